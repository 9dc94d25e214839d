"""What judging a directory once and holding it costs (issue 72), measured in one run:

* checkpoint write and resume, this checkout against an earlier one (``--ref``, by default
  the last commit before the checkpoint directory was held), alternating, ``--rounds``
  each: the MNIST example's model (MLP 784-1000-1000-10 with Adam, 42 MB a file) and
  ResNet-50 (MomentumSGD, 196 MB), one rank (scripts/held_cost_worker.py);
* the MNIST example with ``--communicator auto`` and tuning on, 2 ranks, its tune folder
  empty against the same folder holding 20,000 names of its own choice's form planted by
  another user (uid 65534) with future mtimes, alternating (needs root, as CI runs).

Prints medians and ratios; ``--json`` keeps every figure.

    python scripts/held_cost.py --json docs/measurements/held/cost.json
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, 'scripts', 'held_cost_worker.py')
EXAMPLE = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')
REF = '2562e15'  # main before issue 72's held checkpoint directory
OTHER_UID = 65534
FLOOD = 20000


def env_for(checkout):
    env = dict(os.environ, PYTHONPATH=checkout, OMP_NUM_THREADS='1',
               CHAINERMN_TORUS_QUIET='1')
    return env


def checkpoint_once(checkout, model):
    where = tempfile.mkdtemp(prefix='held-cost-')
    try:
        out = subprocess.run([sys.executable, WORKER, model, os.path.join(where, 'ck')],
                             capture_output=True, text=True, env=env_for(checkout),
                             timeout=600, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _as_other(fn, *args):
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            fn(*args)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    if status:
        raise RuntimeError('the other user could not plant the names')


def _flood(where, stem, count):
    future = time.time() + 86400 * 365
    for i in range(count):
        path = os.path.join(where, f'{stem}.{i:012x}.json')
        with open(path, 'w') as f:
            f.write('{}')
        os.utime(path, (future, future))


def mnist_auto(tune_dir, out):
    env = dict(env_for(ROOT), CHAINERMN_TORUS_TUNE='on', CHAINERMN_TORUS_TUNE_DIR=tune_dir)
    mpiexec = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    t0 = time.perf_counter()
    subprocess.run([mpiexec, '-n', '2', sys.executable, EXAMPLE, '--communicator', 'auto',
                    '--epoch', '2', '--limit', '2000', '--out', out], capture_output=True,
                   text=True, env=env, timeout=600, check=True)
    return time.perf_counter() - t0


def shared(prefix):
    where = tempfile.mkdtemp(prefix=prefix, dir='/tmp')
    os.chmod(where, 0o1777)
    return where


def tune_flood(rounds):
    learn = shared('held-cost-learn-')
    out = tempfile.mkdtemp(prefix='held-cost-out-')
    try:
        mnist_auto(learn, out)
        stems = sorted({n[:-len('.json')] for n in os.listdir(learn) if n.endswith('.json')})
        if not stems:
            raise RuntimeError('the job remembered no choice: nothing to plant beside')
        times = {'none': [], 'flooded': []}
        for i in range(rounds):
            for kind in ('none', 'flooded') if i % 2 == 0 else ('flooded', 'none'):
                where = shared('held-cost-tune-')
                try:
                    if kind == 'flooded':
                        _as_other(_flood, where, stems[0], FLOOD)
                    times[kind].append(mnist_auto(where, out))
                finally:
                    shutil.rmtree(where, ignore_errors=True)
        return stems[0], times
    finally:
        shutil.rmtree(learn, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--ref', default=REF, help='the earlier commit (default %(default)s)')
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--json', default=None)
    p.add_argument('--no-flood', action='store_true', help='checkpoints only')
    args = p.parse_args(argv)
    ref = tempfile.mkdtemp(prefix='held-cost-ref-')
    subprocess.run(['git', '-C', ROOT, 'worktree', 'add', '-q', '--detach', ref, args.ref],
                   check=True)
    result = {'ref': args.ref, 'head': subprocess.run(
        ['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD'], capture_output=True,
        text=True).stdout.strip(), 'rounds': args.rounds, 'checkpoint': {}}
    try:
        for model in ('mnist', 'resnet50'):
            runs = {'ref': [], 'head': []}
            for i in range(args.rounds):  # the order alternates: neither always goes first
                order = (('ref', ref), ('head', ROOT))
                for which, checkout in order if i % 2 == 0 else order[::-1]:
                    runs[which].append(checkpoint_once(checkout, model))
            row = {}
            for which in runs:
                for key in ('save_s', 'resume_s'):
                    row[f'{which}_{key}'] = [r[key] for r in runs[which]]
            for key in ('save_s', 'resume_s'):
                a = statistics.median(row['ref_' + key])
                b = statistics.median(row['head_' + key])
                row['median_ref_' + key], row['median_head_' + key] = a, b
                row['ratio_' + key] = b / a
                print(f'{model:9s} {key[:-2]:8s} median of {args.rounds}: ref {a:.3f} s, '
                      f'head {b:.3f} s, head/ref '
                      f'{b / a:.3f}', flush=True)
            result['checkpoint'][model] = row
    finally:
        subprocess.run(['git', '-C', ROOT, 'worktree', 'remove', '--force', ref])
    if not args.no_flood:
        stem, times = tune_flood(args.rounds)
        a, b = statistics.median(times['none']), statistics.median(times['flooded'])
        result['tune_flood'] = {'stem': stem, 'planted': FLOOD, 'seconds': times,
                                'median_none_s': a, 'median_flooded_s': b,
                                'difference_s': b - a}
        print(f'MNIST auto, 2 ranks, median of {args.rounds}: tune folder empty {a:.2f} s, '
              f'with {FLOOD:,} '
              f'planted names {b:.2f} s, difference {b - a:+.2f} s', flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, 'w') as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
