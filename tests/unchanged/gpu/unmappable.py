"""One use of a GPU facility that has no CPU equivalent, chosen by its name (``--use``), in a
GPU-written script: ``--gpu-to-cpu`` refuses each in one line that names it and this file's
line (tests/launch/test_gpu_to_cpu.py)."""
import argparse

import chainer
from chainer import cuda

USES = ('cuda.elementwise', 'cuda.reduce', 'cuda.raw', 'cupy.ElementwiseKernel',
        'cupy.RawKernel', 'cupy.get_default_memory_pool', 'cupy.cuda.Stream',
        'chainermn.nccl', 'import cupy.cuda.nccl')


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--use', choices=USES, required=True)
    use = parser.parse_args().use
    cuda.get_device_from_id(0).use()
    if use == 'cuda.elementwise':
        cuda.elementwise('T x', 'T y', 'y = x * 2', 'double')  # <- refused
    elif use == 'cuda.reduce':
        cuda.reduce('T x', 'T y', 'x', 'a + b', 'y = a', '0', 'sum')  # <- refused
    elif use == 'cuda.raw':
        cuda.raw('extern "C" __global__ void k() {}', 'k')  # <- refused
    elif use == 'cupy.ElementwiseKernel':
        cuda.cupy.ElementwiseKernel('T x', 'T y', 'y = x * 2', 'double')  # <- refused
    elif use == 'cupy.RawKernel':
        cuda.cupy.RawKernel('extern "C" __global__ void k() {}', 'k')  # <- refused
    elif use == 'cupy.get_default_memory_pool':
        cuda.cupy.get_default_memory_pool().free_all_blocks()  # <- refused
    elif use == 'cupy.cuda.Stream':
        cuda.cupy.cuda.Stream(non_blocking=True)  # <- refused
    elif use == 'chainermn.nccl':
        from chainermn import nccl
        nccl.get_unique_id()  # <- refused
    else:
        from cupy.cuda import nccl  # NOQA <- refused
    print('not refused:', use, chainer.__version__)


if __name__ == '__main__':
    main()
