"""PyTorch's side of ``bench data_parallel``: the same data-parallel ResNet-50 iteration in
PyTorch's DistributedDataParallel over gloo (its CPU all-reduce), on the same cores.

    PYTHON_WITH_TORCH torch_ddp.py RANKS BATCH SIZE THREADS ITERATIONS WARMUP [bf16]

Run by a Python that has torch (a venv of its own); imports nothing of this package but
its sibling ``torch_resnet50`` (Chainer's ResNet50Layers, layer for layer). RANKS processes
(``spawn``), gloo on the loopback, DDP's default 25 MB buckets, SGD with momentum 0.9,
THREADS threads each; every rank its own synthetic batch, as the Chainer side; with
``bf16`` the forward under ``torch.autocast('cpu', dtype=torch.bfloat16)`` (the one line a
PyTorch user adds). Rank 0 prints one JSON line: the seconds of each iteration after the
warm-up.
"""
import json
import os
import socket
import sys
import time

import numpy
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_resnet50 import resnet50  # noqa: E402  (the sibling file, not a package)


def worker(rank, world, batch, size, threads, iterations, warmup, port, amp=False):
    os.environ['MASTER_ADDR'] = '127.0.0.1'
    os.environ['MASTER_PORT'] = str(port)
    torch.set_num_threads(threads)
    dist.init_process_group('gloo', rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DistributedDataParallel(resnet50())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rng = numpy.random.RandomState(rank)
    x = torch.from_numpy(rng.uniform(-1, 1, (batch, 3, size, size)).astype(numpy.float32))
    t = torch.from_numpy(rng.randint(0, 1000, batch).astype(numpy.int64))
    loss_fn = nn.CrossEntropyLoss()
    seconds = []
    for i in range(warmup + iterations):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model(x), t)
        loss.backward()  # DDP all-reduces the buckets during backward
        opt.step()
        seconds.append(time.perf_counter() - t0)
    dist.barrier()
    if rank == 0:
        print(json.dumps({'seconds': seconds[warmup:], 'torch': torch.__version__,
                          'threads': torch.get_num_threads()}), flush=True)
    dist.destroy_process_group()


def main():
    world, batch, size, threads, iterations, warmup = (int(a) for a in sys.argv[1:7])
    amp = sys.argv[7:] == ['bf16']
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(world, batch, size, threads, iterations, warmup, port, amp),
             nprocs=world, join=True)


if __name__ == '__main__':
    main()
