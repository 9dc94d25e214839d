"""Unchanged scripts through the launcher against themselves, same run (issue figures).

    .venv/bin/python scripts/bench_unchanged.py --json docs/measurements/unchanged.json

1. The ChainerMN-style MNIST script (tests/unchanged/chainermn_mnist.py: MLP 784-1000-1000-10,
   batch 100 per rank, Adam: seed 002's configuration) on 2 ranks, run as it is (ChainerMN's
   naive, ChainerMN's wrapper, Chainer's Adam) and through the launcher with
   ``--communicator rsap --fused on --flush-denormals``, alternating, ROUNDS times; median
   time per iteration. The project's own benchmark (bench.mnist_iteration: stock against
   rsap+fused) runs in the same rounds for the ratio it reaches.
2. The ChainerMN-style ImageNet script (tests/unchanged/chainermn_imagenet.py, its own
   MultiprocessIterator with 2 processes) on 1 rank (a spare core) and 2 ranks, as it is and
   with ``--loader ours --affinity auto`` (and ``dedicated`` on 1 rank): data wait share and
   iterations/s.
3. Chainer's plain MNIST script shape (tests/unchanged/chainer_mnist.py) with
   ``--data-parallel --global-batch`` on 2 and 3 ranks against one process with the same
   global batch: test accuracy after EPOCHS epochs.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(ROOT, '.venv', 'bin', 'python')
# scripts/with_mpi.sh names another MPI's mpiexec; the default is the venv's (mpich wheel).
MPIEXEC = (os.environ.get('CHAINERMN_TORUS_MPIEXEC')
           or os.path.join(ROOT, '.venv', 'bin', 'mpiexec'))
SCRIPTS = os.path.join(ROOT, 'tests', 'unchanged')


def run(nprocs, argv, env, launcher=None):
    cmd = [MPIEXEC, '-n', str(nprocs), PY]
    if launcher is not None:
        cmd += ['-m', 'chainermn_torus.run'] + launcher
    proc = subprocess.run(cmd + argv, capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError('{} failed:\n{}'.format(' '.join(cmd + argv), proc.stderr[-3000:]))
    return proc


def mnist(work, env, rounds):
    # 'plain': as users run it (no thread setting: each rank's OpenBLAS takes every core);
    # 'plain, 1 thread': the same with the thread budget the launcher and the project's
    # benchmark apply (one BLAS thread per rank on 2 cores), for the like-for-like ratio.
    out = {'plain': [], 'plain, 1 thread': [], 'launcher': []}
    launcher = ['--communicator', 'rsap', '--fused', 'on', '--flush-denormals']
    one = dict(env, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1')
    # The project's own benchmark (stock against rsap+fused) runs in the same rounds, so
    # both ratios see the same machine state; one run of it alone swung 1.4x-2.0x here.
    example = {'chainermn': [], 'rsap+fused': []}
    for r in range(rounds):
        for name, opts, e in (('plain', None, env), ('plain, 1 thread', None, one),
                              ('launcher', launcher, env)):
            summary = os.path.join(work, 'mnist-{}-{}.json'.format(name.replace(' ', '_')
                                                                   .replace(',', ''), r))
            run(2, [os.path.join(SCRIPTS, 'chainermn_mnist.py'), '--epoch', '1', '--out',
                    os.path.join(work, 'm'), '--summary', summary], e, opts)
            with open(summary) as f:
                out[name].append(json.load(f))
        bench_json = os.path.join(work, f'bench-{r}.json')
        run(2, ['-m', 'chainermn_torus.bench.mnist_iteration', '--epochs', '1', '--configs',
                'chainermn,rsap+fused', '--json', bench_json], env)
        with open(bench_json) as f:
            bench = json.load(f)['configs']
        for k in example:
            example[k].append(bench[k]['per_iteration_s']['total'])
    medians = {k: statistics.median(s['median_iteration_s'] for s in v)
               for k, v in out.items()}
    plain, ours = medians['plain'], medians['launcher']
    example_ratio = (statistics.median(example['chainermn']) /
                     statistics.median(example['rsap+fused']))
    return {'ranks': 2, 'rounds': rounds, 'median_iteration_s': medians,
            'ratio': plain / ours, 'ratio_same_threads': medians['plain, 1 thread'] / ours,
            'example_ratio': example_ratio, 'example_iteration_s': example,
            'accuracy': {k: [s['accuracy'] for s in v] for k, v in out.items()}}


def imagenet(work, env):
    data = os.path.join(work, 'inet')
    subprocess.run([PY, os.path.join(ROOT, 'scripts', 'make_imagenet_subset.py'), '--out', data,
                    '--per-class', '40', '--val-per-class', '4', '--size', '72'], check=True,
                   capture_output=True, cwd=ROOT)
    base = [os.path.join(SCRIPTS, 'chainermn_imagenet.py'), os.path.join(data, 'train.txt'),
            os.path.join(data, 'val.txt'), '--root', data, '--mean',
            os.path.join(data, 'mean.npy'), '--crop-size', '64', '--epoch', '2', '--out',
            os.path.join(work, 'i')]
    rows = []
    for nprocs, configs in ((1, [('script MultiprocessIterator', None),
                                 ('--loader ours --affinity auto',
                                  ['--loader', 'ours', '--affinity', 'auto']),
                                 ('--loader ours --affinity dedicated',
                                  ['--loader', 'ours', '--affinity', 'dedicated'])]),
                            (2, [('script MultiprocessIterator', None),
                                 ('--loader ours --affinity auto',
                                  ['--loader', 'ours', '--affinity', 'auto'])])):
        for name, opts in configs:
            summary = os.path.join(work, f'inet-{nprocs}-{len(rows)}.json')
            run(nprocs, base + ['--summary', summary], env,
                None if opts is None else ['--communicator', 'rsap'] + opts)
            with open(summary) as f:
                s = json.load(f)
            rows.append({'ranks': nprocs, 'config': name, 'iterations_per_s':
                         1.0 / s['median_iteration_s'], 'data_wait_share': s['data_wait_share'],
                         'iterator': s['iterator']})
    return rows


def plain(work, env, epochs):
    rows = []
    for nprocs in (1, 2, 3):
        out = os.path.join(work, f'p{nprocs}')
        args = [os.path.join(SCRIPTS, 'chainer_mnist.py'), '--epoch', str(epochs), '--batchsize',
                '120', '--out', out, '--seed', '0']
        if nprocs == 1:
            run(1, args, env)
        else:
            run(nprocs, args, env, ['--data-parallel', '--global-batch', '--communicator',
                                    'rsap'])
        with open(os.path.join(out, 'log')) as f:
            log = json.load(f)
        rows.append({'ranks': nprocs, 'global_batch': 120,
                     'test_accuracy': log[-1]['validation/main/accuracy']})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--json', required=True)
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--epochs', type=int, default=2)
    p.add_argument('--only', nargs='*', default=['mnist', 'imagenet', 'plain'])
    args = p.parse_args()
    sys.path.insert(0, ROOT)
    from chainermn_torus.datasets.mnist import write_chainer_cache
    work = tempfile.mkdtemp(prefix='bench-unchanged-')
    cache = os.path.join(work, 'chainer')
    write_chainer_cache(cache)
    env = dict(os.environ, CHAINER_DATASET_ROOT=cache, CHAINERMN_TORUS_QUIET='1',
               PYTHONPATH=ROOT)
    result = {'machine': os.uname().nodename}
    if 'mnist' in args.only:
        result['mnist'] = mnist(work, env, args.rounds)
        print(json.dumps(result['mnist']), flush=True)
    if 'imagenet' in args.only:
        result['imagenet'] = imagenet(work, env)
        print(json.dumps(result['imagenet']), flush=True)
    if 'plain' in args.only:
        result['plain'] = plain(work, env, args.epochs)
        print(json.dumps(result['plain']), flush=True)
    with open(args.json, 'w') as f:
        json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
