#!/usr/bin/env python
"""The table of docs/measurements/gpu-to-cpu.md: each GPU-written script shape of
tests/unchanged/gpu/ on 1-4 ranks, run with ``--gpu-to-cpu``, and its CPU-written twin
(twins.py) without it, in pairs of runs one after the other (the order turned at each rank
count and each round): its final loss and accuracy, whether the twin's
results are the same bit for bit in every pair, and the time per iteration of each
(LogReport's elapsed time between its first and last entries; the median of --rounds pairs).
The ImageNet script also with each of its networks (ResNet-50, NIN, AlexNet, GoogLeNet-BN)
at 1 and 2 ranks, on 232 px images. From 3 ranks on both runs say ``--communicator rsap``
(see measure()).

    python scripts/gpu_to_cpu_table.py --md docs/measurements/gpu-to-cpu.md \\
        --json docs/measurements/gpu-to-cpu.json
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GPU = os.path.join(ROOT, 'tests', 'unchanged', 'gpu')
sys.path.insert(0, GPU)
sys.path.insert(0, ROOT)

import twins  # noqa: E402
from chainermn_torus.datasets.mnist import write_chainer_cache  # noqa: E402
from chainermn_torus.tools import oversubscribe  # noqa: E402


def _mnist(out, data, flag):
    return [flag] + (['0'] if flag == '--device' else []) + [
        '--epoch', '2', '--limit', '8000', '--unit', '100', '--out', out]


def _imagenet(arch, iterations, batch):
    def args(out, data):
        lists = data['lists_' + ('small' if arch == 'tiny' else 'large')]
        return [os.path.join(lists, 'train.txt'), os.path.join(lists, 'val.txt'), '--root',
                lists, '--mean', os.path.join(lists, 'mean.npy'), '--arch', arch,
                '--iterations', str(iterations), '--batchsize', str(batch), '--val_batchsize',
                str(batch), '--loaderjob', '1', '--seed', '1', '--out', out]
    return args


def _dcgan(out, data):
    return ['--gpu', '--epoch', '1', '--limit', '2000', '--batchsize', '20', '--out', out]


# (label, script, launcher options, arguments, rank counts)
ROWS = [('ChainerMN MNIST (--gpu)', 'chainermn_mnist.py', [],
         lambda o, d: _mnist(o, d, '--gpu'), (1, 2, 3, 4)),
        ('ChainerMN ImageNet, tiny', 'chainermn_imagenet.py', [], _imagenet('tiny', 24, 8),
         (1, 2, 3, 4))]
ROWS += [(f'ChainerMN ImageNet, {a}', 'chainermn_imagenet.py', [],
          _imagenet(a, 6, 2), (1, 2)) for a in ('resnet50', 'nin', 'alex', 'googlenetbn')]
ROWS += [('DCGAN (two models, custom updater)', 'dcgan.py', [], _dcgan, (1, 2, 3, 4)),
         ('plain Chainer MNIST (--device 0), --data-parallel', 'chainer_mnist.py',
          ['--data-parallel'], lambda o, d: _mnist(o, d, '--device'), (1, 2, 3, 4))]


def _run(ranks, options, script, args, data, mpiexec):
    env = dict(os.environ, CHAINER_DATASET_ROOT=data['root'],
               PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
    env.update(oversubscribe.environment('mpich', ranks, cores=os.cpu_count()))
    cmd = [mpiexec, '-n', str(ranks), sys.executable, '-m', 'chainermn_torus.run'] + options \
        + [script] + args
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    if proc.returncode != 0:
        raise SystemExit('failed: {}\n{}'.format(' '.join(cmd), proc.stderr[-3000:]))


def _final(out):
    last = twins.last(out)
    if 'gen/loss' in last:
        return 'gen {:.3f}, dis {:.3f}'.format(last['gen/loss'], last['dis/loss']), None
    accuracy = last.get('validation/main/accuracy', last.get('main/accuracy'))
    return '{:.4f}'.format(last['main/loss']), accuracy


def measure(work, mpiexec, only=None, rounds=1):
    data = {'root': os.path.join(work, 'datasets')}
    write_chainer_cache(data['root'])
    for name, size, per_class in (('small', 40, '6'), ('large', 232, '2')):
        out = os.path.join(work, 'imagenet-' + name)
        subprocess.run([sys.executable, os.path.join(HERE, 'make_imagenet_subset.py'),
                        '--out', out, '--per-class', per_class, '--val-per-class', '1',
                        '--size', str(size)], check=True, capture_output=True)
        data['lists_' + name] = out
    rows = []
    for label, script, options, args, ranks in ROWS:
        if only and not any(o in label for o in only):
            continue
        twin = twins.make(script, os.path.join(work, 'twins'))
        for i, p in enumerate(ranks):
            # From 3 ranks on, both runs name the communicator: auto measures the network
            # at start-up and may choose another algorithm each run, whose sums differ in
            # the last bit (a first table: DCGAN at 3 ranks, 1e-7 apart); at 1 and 2 ranks
            # every order of a sum gives the same bits, and pure_nccl becomes auto.
            named = ['--communicator', 'rsap'] if p >= 3 else []
            times, differ = {'gpu': [], 'cpu': []}, []
            for r in range(rounds):
                tag = f'{script}-{label.split()[-1]}-{p}-{r}'
                gpu, cpu = os.path.join(work, tag, 'gpu'), os.path.join(work, tag, 'cpu')
                runs = [(options + named + ['--gpu-to-cpu'], os.path.join(GPU, script), gpu),
                        (options + named + twins.LOADER.get(script, []), twin, cpu)]
                for opts, path, out in (runs if (i + r) % 2 == 0 else runs[::-1]):
                    _run(p, opts, path, args(out, data), data, mpiexec)
                differ += twins.differences(gpu, cpu)
                times['gpu'].append(twins.seconds_per_iteration(gpu))
                times['cpu'].append(twins.seconds_per_iteration(cpu))
                if r == 0:
                    loss, accuracy = _final(gpu)
            t_gpu, t_cpu = (statistics.median(times[k]) for k in ('gpu', 'cpu'))
            rows.append({'shape': label, 'ranks': p, 'loss': loss, 'accuracy': accuracy,
                         'same_bits': not differ, 'differences': differ,
                         'rounds': rounds, 'iteration_ms': t_gpu * 1e3,
                         'twin_iteration_ms': t_cpu * 1e3, 'ratio': t_gpu / t_cpu,
                         'all_ms': {k: [t * 1e3 for t in v] for k, v in times.items()}})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def markdown(rows, machine):
    lines = ['| script shape | ranks | final loss | accuracy | = CPU twin, bit for bit | '
             'ms / iteration (option) | ms / iteration (twin) | option / twin |',
             '|---|---|---|---|---|---|---|---|']
    for r in rows:
        lines.append('| {} | {} | {} | {} | {} | {:.1f} | {:.1f} | {:.2f} |'.format(
            r['shape'], r['ranks'], r['loss'],
            '-' if r['accuracy'] is None else '{:.3f}'.format(r['accuracy']),
            'yes' if r['same_bits'] else 'NO', r['iteration_ms'], r['twin_iteration_ms'],
            r['ratio']))
    rounds = rows[0]['rounds'] if rows else 0
    return '\n'.join(['Measured {} on {}: times per iteration are medians of {} pairs of runs, '
                      'the order of each pair turned; every pair compared bit for bit.'.format(
                          time.strftime('%Y-%m-%d'), machine, rounds), ''] + lines) + '\n'


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--md', default=None)
    parser.add_argument('--json', default=None)
    parser.add_argument('--only', nargs='*', help='the rows whose shape names one of these')
    parser.add_argument('--rounds', type=int, default=3,
                        help='pairs of runs per cell, their order turned each time; the times '
                             'are the medians, every pair compared bit for bit')
    opts = parser.parse_args()
    mpiexec = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    machine = (f'{platform.processor() or platform.machine()} ({os.cpu_count()} cores), '
               f'Python {platform.python_version()}')
    with open('/proc/cpuinfo') as f:
        names = [line.split(':', 1)[1].strip() for line in f if line.startswith('model name')]
    if names:
        machine = f'{names[0]}, {os.cpu_count()} cores, Python {platform.python_version()}'
    with tempfile.TemporaryDirectory() as work:
        rows = measure(work, mpiexec, opts.only, opts.rounds)
    text = markdown(rows, machine)
    print(text)
    if opts.md:
        with open(opts.md, 'w') as f:
            f.write(text)
    if opts.json:
        with open(opts.json, 'w') as f:
            json.dump({'machine': machine, 'rows': rows}, f, indent=1)


if __name__ == '__main__':
    main()
