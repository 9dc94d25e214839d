"""``bench data_parallel``: the whole data-parallel ResNet-50 iteration (forward, backward,
gradient averaging, update) on Chainer's numpy, on oneDNN and in PyTorch DDP, interleaved.

    python -m chainermn_torus.bench.data_parallel [--ranks 2] [--batch 8] [--size 224]
        [--threads 1] [--layouts RxT:B,...] [--iterations 4] [--warmup 1] [--rounds 3]
        [--communicator rsap] [--overlap] [--variant LABEL:VAR=VALUE ...]
        [--modes numpy,onednn[,onednn-bf16]] [--torch PYTHON [--torch-amp bf16]] [--json OUT]

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

``--layouts 1x2:1,1x2:2,2x1:8`` measures several layouts (ranks x threads per rank: batch
per rank) in the same rounds, one after the other, each as above (the seeds' layout is one
rank per node with every core a thread). ``--variant LABEL:VAR=VALUE[,VAR=VALUE]``
(repeatable) adds a oneDNN job per layout and round with those environment variables, for
a before/after in one run: ``--variant checked:CHAINERMN_TORUS_TYPE_CHECK=on``.
``--modes ...,onednn-bf16`` adds oneDNN in bfloat16 (``CHAINERMN_TORUS_PRECISION=bf16``)
and ``--torch-amp bf16`` PyTorch under autocast bfloat16, each a row of its own in the same
rounds.
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
from chainermn_torus import bench, command_line, compute
from chainermn_torus.models import ResNet50

__all__ = ['main']

MODES = ('numpy', 'onednn', 'onednn-bf16')  # the last: oneDNN with precision bf16
# a mode -> (CHAINERMN_TORUS_COMPUTE, its extra environment)
_MODE_ENV = {'numpy': ('numpy', {}), 'onednn': ('onednn', {}),
             'onednn-bf16': ('onednn', {'CHAINERMN_TORUS_PRECISION': 'bf16'})}


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
                                      'compute': compute.in_force(),
                                      'precision': compute.precision_in_force()}), flush=True)


def _result(cmd, env, what):
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith(('RESULT ', '{"seconds"'))]
    if out.returncode != 0 or not lines:
        raise SystemExit(f'bench data_parallel: the {what} job failed '
                         f'(exit {out.returncode}):\n{out.stdout[-3000:]}')
    return json.loads(lines[-1].split(' ', 1)[1] if lines[-1].startswith('RESULT')
                      else lines[-1])


def parse_layouts(text):
    """'RxT:B,...' -> [(ranks, threads, batch)]; a ValueError saying what is allowed."""
    out = []
    for item in text.split(','):
        try:
            grid, batch = item.split(':')
            ranks, threads = grid.lower().split('x')
            layout = int(ranks), int(threads), int(batch)
        except ValueError:
            layout = None
        if layout is None or min(layout) < 1:
            raise ValueError(f'--layouts: {item!r} is not RANKSxTHREADS:BATCH with each a whole '
                             'number >= 1 (for example 1x2:2,2x1:8)')
        out.append(layout)
    return out


def parse_variant(text):
    """'LABEL:VAR=VALUE,...' -> (label, {VAR: VALUE})."""
    label, _, assignments = text.partition(':')
    env = dict(a.split('=', 1) for a in assignments.split(',') if '=' in a)
    if not label or label in MODES + ('torch', 'torch-bf16') or not env or \
            len(env) != len([a for a in assignments.split(',') if a]):
        raise ValueError('--variant: {!r} is not LABEL:VAR=VALUE[,VAR=VALUE] with a label '
                         'other than {}'.format(text, ', '.join(MODES + ('torch',
                                                                          'torch-bf16'))))
    return label, env


def _measure(args, layouts, modes, variants):
    """{layout: (runs, parts, torch_version)}, the layouts interleaved in each round."""
    got_all = {layout: ({}, {}, [None]) for layout in layouts}
    jobs = [(m,) + _MODE_ENV[m] for m in modes] + [(label, 'onednn', env)
                                                   for label, env in variants]
    sides = [('torch', [])] + ([('torch-bf16', ['bf16'])] if args.torch_amp else [])
    for r in range(args.rounds):
        for layout in layouts:
            ranks, threads, batch = layout
            runs, parts, version = got_all[layout]
            side = ['--batch', str(batch), '--size', str(args.size), '--iterations',
                    str(args.iterations), '--warmup', str(args.warmup), '--communicator',
                    args.communicator, '--rank-side'] + (['--overlap'] if args.overlap else [])
            for label, mode, extra in jobs:
                env = dict(os.environ, CHAINERMN_TORUS_COMPUTE=mode,
                           CHAINERMN_TORUS_THREADS=str(threads), **extra)
                got = _result([bench.mpiexec(), '-n', str(ranks), sys.executable, '-m',
                               'chainermn_torus.bench.data_parallel'] + side, env,
                              f'Chainer ({label})')
                ran = (got['compute'], got.get('precision', 'fp32'))
                if ran != (mode, extra.get('CHAINERMN_TORUS_PRECISION', 'fp32')):
                    raise SystemExit('bench data_parallel: asked for {}, the job ran {}'.format(
                        label, ' '.join(ran)))
                runs.setdefault(label, []).append(statistics.median(got['seconds']))
                parts.setdefault(label, []).append(got['parts'])
                print(f'round {r + 1} {ranks}x{threads}:{batch} {label:<11} {runs[label][-1]:.3f} '
                      's per iteration', flush=True)
            for name, extra_args in (sides if args.torch else []):
                script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                      'torch_ddp.py')
                got = _result([args.torch, script, str(ranks), str(batch), str(args.size),
                               str(threads), str(args.iterations), str(args.warmup)] +
                              extra_args, dict(os.environ), 'PyTorch DDP')
                version[0] = got['torch']
                runs.setdefault(name, []).append(statistics.median(got['seconds']))
                print(f'round {r + 1} {ranks}x{threads}:{batch} {name:<11} {runs[name][-1]:.3f} s '
                      'per iteration', flush=True)
    return got_all


def _summary(args, layout, runs, parts, torch_version, variants):
    ranks, threads, batch = layout
    med = {k: statistics.median(v) for k, v in runs.items()}
    part_med = {m: {k: statistics.median(p[k] for p in parts[m]) for k in parts[m][0]}
                for m in parts}
    print('ResNet-50 data-parallel iteration: {} ranks, batch {} per rank, {} px, {} thread(s) '
          'per rank, {}{}; medians of {} interleaved rounds'.format(
              ranks, batch, args.size, threads, args.communicator,
              ' with overlap' if args.overlap else '', args.rounds))
    print('{:<11} {:>9} {:>16} {:>10} {:>8}'.format('', 'iteration', 'forward+backward',
                                                     'averaging', 'update'))
    for k in runs:
        pm = part_med.get(k)
        print('{:<11} {:>9.3f} {:>16} {:>10} {:>8}'.format(
            k, med[k], '{:.3f}'.format(pm['forward_backward']) if pm else '-',
            '{:.3f}'.format(pm['allreduce']) if pm else '-',
            '{:.3f}'.format(pm['update']) if pm else '-'))
    ratios = {}
    if 'numpy' in med and 'onednn' in med:
        ratios['numpy_over_onednn'] = med['numpy'] / med['onednn']
    if 'onednn' in med:
        for label, _ in variants:
            ratios[f'onednn_over_{label}'] = med['onednn'] / med[label]
    if 'torch' in med:
        for m in parts:
            ratios[f'{m}_over_torch'] = med[m] / med['torch']
    if 'onednn' in med and 'onednn-bf16' in med:
        ratios['onednn_over_onednn-bf16'] = med['onednn'] / med['onednn-bf16']
    if 'torch-bf16' in med:
        for m in parts:
            ratios[f'{m}_over_torch-bf16'] = med[m] / med['torch-bf16']
    print('; '.join(f'{k} {v:.2f}' for k, v in ratios.items()))
    return {'ranks': ranks, 'batch': batch, 'size': args.size, 'threads': threads,
            'iterations': args.iterations, 'rounds': args.rounds,
            'communicator': args.communicator, 'overlap': args.overlap,
            'variants': {label: env for label, env in variants},
            'seconds': runs, 'median': med, 'parts': part_med, 'ratios': ratios,
            'torch': torch_version}


def main(argv=None):
    p = argparse.ArgumentParser(prog='chainermn-torus bench data_parallel',
                                description=__doc__.split('\n')[0])
    p.add_argument('--ranks', type=int, default=2)
    p.add_argument('--batch', type=int, default=8, help='per rank')
    p.add_argument('--size', type=int, default=224)
    command_line.add_option(p, 'threads', default=1, counts=True)
    p.add_argument('--layouts', default=None, metavar='RxT:B,...',
                   help='several layouts in the same rounds (ranks x threads per rank: batch '
                        'per rank), instead of --ranks/--threads/--batch')
    p.add_argument('--iterations', type=int, default=4)
    p.add_argument('--warmup', type=int, default=1)
    p.add_argument('--rounds', type=int, default=3)
    command_line.add_communicator(p, 'rsap')
    command_line.add_option(p, 'overlap', help='the optimizer averages each layer\'s gradients '
                      'while the backward goes on (as DDP does with its buckets)')
    p.add_argument('--modes', default='numpy,onednn',
                   help='Chainer\'s compute modes to run, of ' + ', '.join(MODES))
    p.add_argument('--variant', action='append', default=[], metavar='LABEL:VAR=VALUE',
                   help='also a oneDNN job with these environment variables (repeatable)')
    p.add_argument('--torch', default=None, metavar='PYTHON',
                   help='a Python that has PyTorch: its DDP (gloo) in the same rounds')
    p.add_argument('--torch-amp', choices=('bf16',), default=None,
                   help='bf16: PyTorch under autocast bfloat16 too, beside its float32')
    p.add_argument('--json', default=None)
    p.add_argument('--rank-side', action='store_true', help=argparse.SUPPRESS)
    args = command_line.parse_args(p, argv)
    if args.rank_side:
        return rank_side(args)
    if args.torch_amp and not args.torch:
        p.error('--torch-amp goes with --torch PYTHON')
    modes = [m for m in args.modes.split(',') if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        p.error('--modes: {} is not one of {}'.format(','.join(bad), ', '.join(MODES)))
    try:
        layouts = (parse_layouts(args.layouts) if args.layouts
                   else [(args.ranks, args.threads, args.batch)])
        variants = [parse_variant(v) for v in args.variant]
    except ValueError as e:
        p.error(str(e))
    got = _measure(args, layouts, modes, variants)
    results = [_summary(args, layout, runs, parts, version[0], variants)
               for layout, (runs, parts, version) in got.items()]
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results[0] if not args.layouts else {'layouts': results}, f, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
