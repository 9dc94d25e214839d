"""Benchmark: one MNIST-MLP training iteration, stock ChainerMN against ours, same run.

    mpiexec -n 2 python -m chainermn_torus.bench.mnist_iteration --epochs 20

Kuroda et al.'s configuration: MLP 784-1000-1000-10, batch 100 per rank, Adam. Every
configuration trains its own model from the same initial weights on the same data shards;
they take turns epoch by epoch, so machine noise and the denormals that appear as training
goes on reach all of them alike. Configurations (``--configs``):

* ``chainermn``: ChainerMN's ``naive`` + ChainerMN's own wrapper + Chainer's Adam (stock);
* ``rsap``: our rsap communicator, our wrapper, Chainer's Adam;
* ``rsap+fused``: and the fused Adam with flush-to-zero;
* ``rsap+fused+db``: and double buffering (ours, the default of the example);
* ``rsap+fused+db+fp16``: and float16 gradient communication.

Per iteration (median over the run, then mean over ranks): ``data`` (next batch and
conversion), ``forward_backward``, ``communication`` that the main thread waits for (with
double buffering: the wait for the background all-reduce), ``update``, and ``total``.
Final test accuracy after the same epochs, on the same test set.
"""
import json
import time

import chainer
import chainer.links as L
import chainermn
import chainermn.optimizers
import numpy

import chainermn_torus
from chainermn_torus import command_line, create_multi_node_optimizer
from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR, load_mnist_idx
from chainermn_torus.datasets.shards import batch_too_large
from chainermn_torus.extensions.timing import time_calls
from chainermn_torus.models import MLP
from chainermn_torus.optimizers import fpenv
from chainermn_torus.runtime import report, world
from chainermn_torus.runtime.cpu import threads

CONFIGS = {
    'chainermn': dict(comm='naive', ours=False, fused=False, ftz=False, db=False, fp16=False),
    'rsap': dict(comm='rsap', ours=True, fused=False, ftz=False, db=False, fp16=False),
    'rsap+fused': dict(comm='rsap', ours=True, fused=True, ftz=True, db=False, fp16=False),
    'rsap+fused+db': dict(comm='rsap', ours=True, fused=True, ftz=True, db=True, fp16=False),
    'rsap+fused+db+fp16': dict(comm='rsap', ours=True, fused=True, ftz=True, db=True,
                               fp16=True),
}
PHASES = ('data', 'forward_backward', 'communication', 'update', 'total')


class Run:
    """One configuration: its communicator, model, optimizer, iterator and timings."""

    def __init__(self, name, cfg, train, batchsize, seed, unit):
        self.name, self.cfg = name, cfg
        kwargs = {'allreduce_grad_dtype': numpy.float16} if cfg['fp16'] else {}
        self.comm = chainermn_torus.create_communicator(cfg['comm'], **kwargs)
        numpy.random.seed(seed)
        self.model = L.Classifier(MLP(unit))
        actual = chainer.optimizers.Adam()
        if cfg['ours']:
            self.opt = create_multi_node_optimizer(
                actual, self.comm, double_buffering=cfg['db'], fused=cfg['fused'],
                flush_denormals=cfg['ftz'])
        else:
            self.opt = chainermn.optimizers.create_multi_node_optimizer(actual, self.comm)
        self.opt.setup(self.model)
        self.acc = {'communication': 0.0, 'update': 0.0}
        time_calls(self.comm, 'multi_node_mean_grad', self.acc, 'communication')
        time_calls(actual, 'update', self.acc, 'update')
        self.iterator = chainer.iterators.SerialIterator(  # the same batches in every run
            train, batchsize, order_sampler=chainer.iterators.ShuffleOrderSampler(
                numpy.random.RandomState(seed)))
        self.rows = []

    def wait_seconds(self):
        return self.opt.timings['wait'] if self.cfg['ours'] else 0.0

    def epoch(self):
        fpenv.set_flush_denormals(self.cfg['ftz'])  # MXCSR belongs to the thread, not the run
        start_epoch = self.iterator.epoch
        while self.iterator.epoch == start_epoch:
            before = dict(self.acc, wait=self.wait_seconds())
            t0 = time.perf_counter()
            batch = self.iterator.next()
            x, t = chainer.dataset.concat_examples(batch)
            t1 = time.perf_counter()
            self.opt.update(self.model, x, t)
            t2 = time.perf_counter()
            comm = self.acc['communication'] - before['communication'] \
                + self.wait_seconds() - before['wait']
            update = self.acc['update'] - before['update']
            self.rows.append((t1 - t0, t2 - t1 - comm - update, comm, update, t2 - t0))

    def finish(self):
        if hasattr(self.opt, 'finalize'):
            self.opt.finalize()  # the last background all-reduce

    def accuracy(self, test, batchsize=1000):
        correct = 0
        with chainer.using_config('train', False), chainer.no_backprop_mode():
            for i in range(0, len(test), batchsize):
                x, t = chainer.dataset.concat_examples(test[i:i + batchsize])
                correct += int((self.model.predictor(x).array.argmax(1) == t).sum())
        total = self.comm.mpi_comm.allreduce(numpy.array([correct, len(test)]))
        return float(total[0]) / float(total[1])

    def medians(self, skip):
        rows = numpy.array(self.rows[skip:] or self.rows)
        return dict(zip(PHASES, numpy.median(rows, axis=0).tolist()))


def main(argv=None):
    p = world.ArgumentParser(description=__doc__.split('\n')[0])
    count = command_line.arg_type('count')  # an integer >= 1: 0 epochs or images ran until killed
    p.add_argument('--epochs', type=count, default=3)
    p.add_argument('--configs', default=','.join(CONFIGS),
                   help='comma-separated, from: ' + ', '.join(CONFIGS))
    p.add_argument('--batchsize', type=count, default=100)
    p.add_argument('--unit', type=count, default=1000)
    p.add_argument('--data-dir', default=DEFAULT_MNIST_DIR)
    p.add_argument('--limit', type=count, default=None, help='first N training images only')
    p.add_argument('--seed', type=command_line.arg_type('seed'), default=0)
    command_line.add_option(p, 'threads')
    p.add_argument('--json', default=None)
    args = command_line.parse_args(p, argv)
    names = [n for n in args.configs.split(',') if n]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit('unknown configuration(s) {}; choose from {}'.format(
            ', '.join(unknown), ', '.join(CONFIGS)))

    comm = chainermn_torus.create_communicator('naive')
    budget = threads.apply_thread_budget(args.threads, comm.intra_size)
    train, test = load_mnist_idx(args.data_dir)
    if args.limit:
        train = train[:args.limit]
    too_large = batch_too_large(len(train), args.batchsize, comm.size, limit=args.limit)
    if too_large:
        report.stop('bench mnist: ' + too_large, comm.rank)
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=args.seed)
    test = chainermn.scatter_dataset(test, comm, shuffle=True, seed=args.seed)
    runs = [Run(n, CONFIGS[n], train, args.batchsize, args.seed, args.unit) for n in names]
    if comm.rank == 0:
        print(f'MNIST MLP {args.unit}-unit, batch {args.batchsize} per rank, {comm.size} '
              f'ranks, {args.epochs} epochs; {threads.describe_budget(budget)}', flush=True)
    t_start = time.perf_counter()
    for epoch in range(args.epochs):
        for run in runs:
            run.epoch()
        if comm.rank == 0:
            print(f'epoch {epoch + 1} done ({time.perf_counter() - t_start:.0f} s)',
                  flush=True)
    for run in runs:
        run.finish()
    fpenv.set_flush_denormals(False)
    skip = 10  # the first iterations broadcast, compile kernels and start threads
    result = {'ranks': comm.size, 'epochs': args.epochs, 'batchsize': args.batchsize,
              'unit': args.unit, 'threads': budget, 'configs': {}}
    for run in runs:
        acc = run.accuracy(test)
        med = run.medians(skip)
        all_med = comm.mpi_comm.allgather(med)
        mean = {k: float(numpy.mean([m[k] for m in all_med])) for k in PHASES}
        result['configs'][run.name] = {'per_iteration_s': mean, 'test_accuracy': acc,
                                       'iterations': len(run.rows), 'config': run.cfg}
    base = result['configs'].get('chainermn') or next(iter(result['configs'].values()))
    for r in result['configs'].values():
        r['speedup_vs_first'] = base['per_iteration_s']['total'] / r['per_iteration_s']['total']
    if comm.rank == 0:
        print(format_table(result))
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(result, f, indent=1)


def format_table(res):
    lines = ['per iteration, ms (median over iterations, mean over {} ranks)'.format(
        res['ranks']),
        '{:<20} {:>6} {:>8} {:>6} {:>7} {:>7} {:>8} {:>8}'.format(
            'config', 'data', 'fwd+bwd', 'comm', 'update', 'total', 'speedup', 'test acc')]
    for name, r in res['configs'].items():
        t = r['per_iteration_s']
        lines.append('{:<20} {:>6.2f} {:>8.2f} {:>6.2f} {:>7.2f} {:>7.2f} {:>7.2f}x {:>8.4f}'
                     .format(name, 1e3 * t['data'], 1e3 * t['forward_backward'],
                             1e3 * t['communication'], 1e3 * t['update'], 1e3 * t['total'],
                             r['speedup_vs_first'], r['test_accuracy']))
    return '\n'.join(lines)


if __name__ == '__main__':
    main()
