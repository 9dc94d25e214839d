"""Benchmark: real training with every way of averaging gradients, in one MPI job.

    scripts/emulate_cluster.sh run R .venv/bin/python -m chainermn_torus.bench.overlap_training \\
        --model mlp --epochs 5 --json results/overlap/mlp-2x2.json

Configurations, one after another in the same job (each from the same initial weights and
data order): ``naive+stock`` (ChainerMN's naive communicator, ChainerMN's wrapper, Chainer's
update), ``rsap``, ``rsap+fp16``, ``rsap+db`` (double buffering), ``rsap+overlap``,
``rsap+fp16+overlap`` (ours with the fused update and flush-to-zero, as the examples).

Models: ``mlp`` (Kuroda et al.: MNIST MLP 784-1000-1000-10, Adam, batch 100 per rank, on
Fashion-MNIST), ``resnet50`` and ``tiny`` (the ImageNet example's models and JPEG pipeline on
its Fashion-MNIST subset, MomentumSGD 0.9, ``--crop`` pixels).

Per iteration (medians over ranks' medians, the first two iterations skipped): ``data``
(iterator + converter), ``forward_backward``, ``allreduce`` (what the training thread spent
averaging or waiting for the averaging: the exposed part), ``update``, ``iteration``; and
``allreduce_thread``, the communication thread's own time (double buffering, overlap).
After training: test accuracy on the whole test set, and the total training time.
"""
import importlib.util
import json
import os
import statistics
import sys
import time

import chainer
import numpy

import chainermn
import chainermn_torus
from chainermn_torus.bench.double_buffering import wait_for_wire
from chainermn_torus.communicators.engine import TorusEngine
from chainermn_torus.datasets.imagenet import PreprocessedDataset, read_list
from chainermn_torus.datasets.mnist import load_mnist_idx
from chainermn_torus.extensions.timing import time_calls
from chainermn_torus.models import MLP
from chainermn_torus.optimizers import MultiNodeOptimizer
from chainermn_torus.runtime import world
from chainermn_torus.runtime.chainer_glue import patches

CONFIGS = ('naive+stock', 'rsap', 'rsap+fp16', 'rsap+db', 'rsap+overlap',
           'rsap+fp16+overlap')
# Also accepted: '+block' / '+poll' after db or overlap (the thread's MPI calls blocking, or
# polled every --poll seconds; default: the optimizer's own choice).
VARIANTS = ('block', 'poll')
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _imagenet_example():
    path = os.path.join(ROOT, 'examples', 'imagenet', 'train_imagenet.py')
    spec = importlib.util.spec_from_file_location('train_imagenet', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(model, crop, data_dir):
    """(make_model, make_optimizer, train, test, batch size)."""
    if model == 'mlp':
        train, test = load_mnist_idx()
        return (lambda: chainer.links.Classifier(MLP(1000, 10)),
                lambda: chainer.optimizers.Adam(), train, test, 100)
    example = _imagenet_example()
    mean = example.load_mean(os.path.join(data_dir, 'mean.npy'))
    train = PreprocessedDataset(read_list(os.path.join(data_dir, 'train.txt'), data_dir),
                                data_dir, mean, crop, random=True,
                                rng=numpy.random.RandomState(0))
    test = PreprocessedDataset(read_list(os.path.join(data_dir, 'val.txt'), data_dir),
                               data_dir, mean, crop, random=False)
    return (lambda: example.build_model(model, 10),
            lambda: chainer.optimizers.MomentumSGD(lr=0.01, momentum=0.9), train, test, 8)


def make(config, actual, poll=None):
    """(communicator, multi-node optimizer) of a configuration."""
    parts = config.split('+')
    if parts[0] == 'naive':
        comm = chainermn.create_communicator('naive')
        return comm, chainermn.optimizers.create_multi_node_optimizer(actual, comm)
    kwargs = {'allreduce_grad_dtype': numpy.float16} if 'fp16' in parts else {}
    extra = {}
    if 'poll' in parts:
        extra['background_poll'] = poll or 0.0005
    elif 'block' in parts:
        extra['background_poll'] = None
    elif poll is not None:
        extra['background_poll'] = poll
    comm = chainermn.create_communicator(parts[0], **kwargs)
    opt = chainermn_torus.create_multi_node_optimizer(
        actual, comm, double_buffering='db' in parts, overlap='overlap' in parts,
        fused='auto', flush_denormals=True, **extra)
    return comm, opt


def accuracy(model, dataset, comm):
    """Test accuracy over the whole set (each rank a share, summed)."""
    n = len(dataset)
    mine = range(comm.rank, n, comm.size)
    correct = 0
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for lo in range(0, len(mine), 100):
            idx = mine[lo:lo + 100]
            x, t = chainer.dataset.concat_examples([dataset[i] for i in idx])
            y = model.predictor(x)
            correct += int((y.array.argmax(axis=1) == t).sum())
    totals = comm.mpi_comm.allreduce(numpy.array([correct, len(mine)]))
    return float(totals[0]) / float(totals[1])


def sleep_wire(gbps, size, cls=TorusEngine):
    """Add to every segment a sleep as long as a ring all-reduce's bytes take at ``gbps``
    (2 (P - 1) / P of the segment per rank): wire time that costs no CPU, as on a network
    whose adapter moves the bytes (the emulated cluster's links cost this host's CPU)."""
    if any(p.name == '_mean_segment' for p in patches.applied('timing', owner=cls)):
        return  # slowed once per class
    inner = cls._mean_segment

    def mean_segment(self, buf, lo, hi, src, timeline):
        t0 = time.perf_counter()
        inner(self, buf, lo, hi, src, timeline)
        wait_for_wire(t0, (hi - lo) * buf.array.itemsize, size, gbps)
    patches.apply(cls, '_mean_segment', mean_segment, 'timing',
                  'bench overlap --sleep-gbps: wire time that costs no CPU')


def run_config(config, loaded, args):
    make_model, make_optimizer, train, test, batch = loaded
    numpy.random.seed(args.seed)
    model = make_model()
    comm, opt = make(config, make_optimizer(), args.poll)
    if args.sleep_gbps and getattr(comm, 'engine', None) is not None:  # its segment seam
        sleep_wire(args.sleep_gbps, comm.size)
    opt.setup(model)
    shard = chainermn.scatter_dataset(train, comm, shuffle=True, seed=args.seed)
    it = chainer.iterators.SerialIterator(shard, args.batchsize or batch, shuffle=True)
    numpy.random.seed(args.seed + comm.rank)  # the iterator's order (numpy's global RNG)
    spent = {'allreduce': 0.0, 'update': 0.0}
    ours = isinstance(opt, MultiNodeOptimizer)
    if not ours:
        time_calls(comm, 'multi_node_mean_grad', spent, 'allreduce')
        time_calls(opt.actual_optimizer, 'update', spent, 'update')
    rows = []
    limit = args.iterations
    comm.mpi_comm.Barrier()
    t_start = time.perf_counter()
    while it.epoch < args.epochs and (limit is None or len(rows) < limit):
        t0 = time.perf_counter()
        x, t = chainer.dataset.concat_examples(it.next())
        t1 = time.perf_counter()
        if ours:
            before = dict(opt.timings)
        else:
            spent['allreduce'] = spent['update'] = 0.0
        opt.update(model, x, t)
        t2 = time.perf_counter()
        step = t2 - t1
        if ours:
            d = {k: opt.timings[k] - before[k] for k in before}
            fb, update = d['forward_backward'], d['update']
            exposed = max(step - fb - update, 0.0)
            threaded = {'db', 'overlap'} & set(config.split('+'))
            thread = d['communicate'] if threaded else 0.0
        else:
            update, exposed = spent['update'], spent['allreduce']
            fb, thread = max(step - update - exposed, 0.0), 0.0
        rows.append({'data': t1 - t0, 'forward_backward': fb, 'allreduce': exposed,
                     'update': update, 'iteration': t2 - t0, 'allreduce_thread': thread})
    if hasattr(opt, 'finalize'):
        opt.finalize()
    comm.mpi_comm.Barrier()
    train_seconds = time.perf_counter() - t_start
    acc = accuracy(model, test, comm) if not args.no_accuracy else None
    measured = rows[2:] if len(rows) > 4 else rows
    medians = {k: statistics.median(r[k] for r in measured) for k in measured[0]}
    per_rank = comm.mpi_comm.gather(medians, root=0)
    comm.finalize()
    if comm.rank != 0:
        return None
    return {'config': config, 'iterations': len(rows), 'epochs': it.epoch_detail,
            'train_seconds': train_seconds, 'test_accuracy': acc,
            'median_ms': {k: 1e3 * statistics.median(r[k] for r in per_rank)
                          for k in per_rank[0]},
            'per_rank_median_ms': [{k: 1e3 * v for k, v in r.items()} for r in per_rank]}


def main(argv=None):
    parser = world.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', choices=('mlp', 'resnet50', 'tiny'), default='mlp')
    parser.add_argument('--configs', default=','.join(CONFIGS),
                        help='comma-separated, from: ' + ', '.join(CONFIGS))
    parser.add_argument('--epochs', type=int, default=1)
    parser.add_argument('--iterations', type=int, default=None,
                        help='stop each configuration after this many iterations')
    parser.add_argument('--batchsize', type=int, default=None,
                        help='per rank (default: mlp 100, resnet50/tiny 8)')
    parser.add_argument('--crop', type=int, default=64, help='resnet50/tiny crop (pixels)')
    parser.add_argument('--data', default=os.path.join(ROOT, 'data', 'imagenet-fmnist'),
                        help='ImageNet-format data for resnet50/tiny '
                             '(scripts/make_imagenet_subset.py)')
    parser.add_argument('--poll', type=float, default=None, metavar='SECONDS',
                        help='background_poll for the communication thread (double '
                             'buffering, overlap): test every SECONDS and sleep between '
                             '(default: blocking MPI calls)')
    parser.add_argument('--sleep-gbps', type=float, default=None, metavar='G',
                        help='our communicators only: each segment takes at least the time a '
                             "ring all-reduce's bytes take at G Gbit/s, as a sleep (wire time "
                             'without CPU cost; naive+stock is not slowed)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--no-accuracy', action='store_true')
    parser.add_argument('--label', default='', help='recorded with the results (link rate)')
    parser.add_argument('--json', default=None)
    args = parser.parse_args(argv)
    configs = [c for c in args.configs.split(',') if c]
    bad = [c for c in configs if '+'.join(p for p in c.split('+') if p not in VARIANTS)
           not in CONFIGS]
    if bad:
        parser.error('unknown configuration(s) {}; choose from {}'.format(
            ', '.join(bad), ', '.join(CONFIGS)))
    comm = chainermn.create_communicator('naive')
    loaded = load(args.model, args.crop, args.data)
    results = []
    for config in configs:
        r = run_config(config, loaded, args)
        if r is not None:
            results.append(r)
            m = r['median_ms']
            print('{:<18} iter {:8.1f} ms  data {:6.1f} fb {:7.1f} allreduce {:7.1f} '
                  '(thread {:7.1f}) update {:6.1f}  total {:6.1f} s  acc {}'.format(
                      config, m['iteration'], m['data'], m['forward_backward'],
                      m['allreduce'], m['allreduce_thread'], m['update'],
                      r['train_seconds'], 'n/a' if r['test_accuracy'] is None
                      else '{:.4f}'.format(r['test_accuracy'])), flush=True)
    if comm.rank == 0 and args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, 'w') as f:
            json.dump({'model': args.model, 'ranks': comm.size,
                       'nodes': comm.inter_size, 'label': args.label,
                       'epochs': args.epochs, 'iterations': args.iterations,
                       'crop': args.crop if args.model != 'mlp' else None,
                       'results': results}, f, indent=1)
    comm.finalize()
    return 0


if __name__ == '__main__':
    sys.exit(main())
