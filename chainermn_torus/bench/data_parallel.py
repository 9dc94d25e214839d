"""``bench data_parallel``: the whole data-parallel ResNet-50 iteration (forward, backward,
gradient averaging, update) on Chainer's numpy, on oneDNN and in PyTorch DDP, interleaved.

    python -m chainermn_torus.bench.data_parallel [--ranks 2] [--batch 8] [--size 224]
        [--threads 1] [--iterations 4] [--warmup 1] [--rounds 3] [--communicator rsap]
        [--overlap] [--torch PYTHON] [--json OUT]

Each round runs, one after the other on the same cores, an MPI job of ``--ranks`` ranks per
compute mode (``CHAINERMN_TORUS_COMPUTE`` numpy, then onednn): Chainer's ResNet50Layers,
the communicator named (rsap by default) and this package's multi-node optimizer around
MomentumSGD, ``--threads`` threads per rank; then, with ``--torch`` naming a Python that
has PyTorch, the same network in DistributedDataParallel over gloo with as many processes
and threads (``bench/torch_ddp.py``). Every rank trains on a synthetic batch of its own
(the same shapes on both sides: the data pipeline is not what is compared). Each job
reports the seconds of its iterations after ``--warmup``; the table gives, per side, the
median over rounds of each job's median, and for Chainer the parts of rank 0's iteration:
forward + backward, the averaging the training thread waited for, the update.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import chainer
import chainer.links as L
import numpy

import chainermn  # starts no MPI: the rank side's communicator does
import chainermn_torus
from chainermn_torus import bench, compute
from chainermn_torus.models import ResNet50

__all__ = ['main']

MODES = ('numpy', 'onednn')


def rank_side(args):
    """One MPI rank: prints rank 0's per-iteration seconds and parts as one JSON line."""
    comm = chainermn.create_communicator(args.communicator)
    numpy.random.seed(0)
    model = L.Classifier(ResNet50(1000))
    opt = chainermn_torus.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(0.01, 0.9), comm, fused='auto',
        overlap=args.overlap)
    opt.setup(model)
    rng = numpy.random.RandomState(comm.rank)
    x = rng.uniform(-1, 1, (args.batch, 3, args.size, args.size)).astype(numpy.float32)
    t = rng.randint(0, 1000, args.batch).astype(numpy.int32)
    rows = []
    for i in range(args.warmup + args.iterations):
        before = dict(opt.timings)
        t0 = time.perf_counter()
        opt.update(model, x, t)
        step = time.perf_counter() - t0
        d = {k: opt.timings[k] - before[k] for k in before}
        rows.append({'iteration': step, 'forward_backward': d['forward_backward'],
                     'update': d['update'],
                     'allreduce': max(step - d['forward_backward'] - d['update'], 0.0)})
    comm.mpi_comm.Barrier()
    if comm.rank == 0:
        rows = rows[args.warmup:]
        print('RESULT ' + json.dumps({'seconds': [r['iteration'] for r in rows],
                                      'parts': {k: statistics.median(r[k] for r in rows)
                                                for k in rows[0]},
                                      'compute': compute.in_force()}), flush=True)


def _result(cmd, env, what):
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    lines = [l for l in out.stdout.splitlines() if l.startswith(('RESULT ', '{"seconds"'))]
    if out.returncode != 0 or not lines:
        raise SystemExit('bench data_parallel: the {} job failed (exit {}):\n{}'.format(
            what, out.returncode, out.stdout[-3000:]))
    return json.loads(lines[-1].split(' ', 1)[1] if lines[-1].startswith('RESULT')
                      else lines[-1])


def main(argv=None):
    p = argparse.ArgumentParser(prog='chainermn-torus bench data_parallel',
                                description=__doc__.split('\n')[0])
    p.add_argument('--ranks', type=int, default=2)
    p.add_argument('--batch', type=int, default=8, help='per rank')
    p.add_argument('--size', type=int, default=224)
    p.add_argument('--threads', type=int, default=1, help='per rank')
    p.add_argument('--iterations', type=int, default=4)
    p.add_argument('--warmup', type=int, default=1)
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--communicator', default='rsap')
    p.add_argument('--overlap', action='store_true',
                   help='the optimizer averages each layer\'s gradients while the backward '
                        'goes on (as DDP does with its buckets)')
    p.add_argument('--modes', default=','.join(MODES),
                   help='Chainer\'s compute modes to run, of ' + ', '.join(MODES))
    p.add_argument('--torch', default=None, metavar='PYTHON',
                   help='a Python that has PyTorch: its DDP (gloo) in the same rounds')
    p.add_argument('--json', default=None)
    p.add_argument('--rank-side', action='store_true', help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rank_side:
        return rank_side(args)
    modes = [m for m in args.modes.split(',') if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        p.error('--modes: {} is not one of {}'.format(','.join(bad), ', '.join(MODES)))
    side = ['--batch', str(args.batch), '--size', str(args.size), '--iterations',
            str(args.iterations), '--warmup', str(args.warmup), '--communicator',
            args.communicator, '--rank-side'] + (['--overlap'] if args.overlap else [])
    runs = {m: [] for m in modes}
    if args.torch:
        runs['torch'] = []
    parts = {m: [] for m in modes}
    torch_version = None
    for r in range(args.rounds):
        for mode in modes:
            env = dict(os.environ, CHAINERMN_TORUS_COMPUTE=mode,
                       CHAINERMN_TORUS_THREADS=str(args.threads))
            got = _result([bench.mpiexec(), '-n', str(args.ranks), sys.executable, '-m',
                           'chainermn_torus.bench.data_parallel'] + side, env,
                          'Chainer ({})'.format(mode))
            if got['compute'] != mode:
                raise SystemExit('bench data_parallel: asked for {}, the job ran {}'.format(
                    mode, got['compute']))
            runs[mode].append(statistics.median(got['seconds']))
            parts[mode].append(got['parts'])
            print('round {} {:<7} {:.3f} s per iteration'.format(r + 1, mode, runs[mode][-1]),
                  flush=True)
        if args.torch:
            script = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'torch_ddp.py')
            got = _result([args.torch, script, str(args.ranks), str(args.batch), str(args.size),
                           str(args.threads), str(args.iterations), str(args.warmup)],
                          dict(os.environ), 'PyTorch DDP')
            torch_version = got['torch']
            runs['torch'].append(statistics.median(got['seconds']))
            print('round {} {:<7} {:.3f} s per iteration'.format(r + 1, 'torch',
                                                                 runs['torch'][-1]), flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    part_med = {m: {k: statistics.median(p[k] for p in parts[m]) for k in parts[m][0]}
                for m in modes}
    print('ResNet-50 data-parallel iteration: {} ranks, batch {} per rank, {} px, {} thread(s) '
          'per rank, {}{}; medians of {} interleaved rounds'.format(
              args.ranks, args.batch, args.size, args.threads, args.communicator,
              ' with overlap' if args.overlap else '', args.rounds))
    print('{:<8} {:>9} {:>16} {:>10} {:>8}'.format('', 'iteration', 'forward+backward',
                                                    'averaging', 'update'))
    for k in runs:
        pm = part_med.get(k)
        print('{:<8} {:>9.3f} {:>16} {:>10} {:>8}'.format(
            k, med[k], '{:.3f}'.format(pm['forward_backward']) if pm else '-',
            '{:.3f}'.format(pm['allreduce']) if pm else '-',
            '{:.3f}'.format(pm['update']) if pm else '-'))
    ratios = {}
    if 'numpy' in med and 'onednn' in med:
        ratios['numpy_over_onednn'] = med['numpy'] / med['onednn']
    if 'torch' in med:
        for m in modes:
            ratios['{}_over_torch'.format(m)] = med[m] / med['torch']
    print('; '.join('{} {:.2f}'.format(k, v) for k, v in ratios.items()))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'ranks': args.ranks, 'batch': args.batch, 'size': args.size,
                       'threads': args.threads, 'iterations': args.iterations,
                       'rounds': args.rounds, 'communicator': args.communicator,
                       'overlap': args.overlap,
                       'seconds': runs, 'median': med, 'parts': part_med, 'ratios': ratios,
                       'torch': torch_version}, f, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
