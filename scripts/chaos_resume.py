"""The chaos run: the MNIST example, unchanged, interrupted at random moments and resumed with
--auto-resume until it finishes; its final model must equal an uninterrupted run's bit for
bit (issue 65: "nothing lost").

Each interruption is drawn from a seeded generator: a moment within what is left of the
training (its first 60 %: the uninterrupted run's training time, scaled by the iterations
the newest checkpoint has not reached), and a way to end the job (each of the four in every round of
four): SIGKILL to one rank, SIGKILL to every rank (as a node
lost mid-write), SIGTERM or SIGINT to mpiexec (a batch system's end, a Ctrl-C). The next
start resumes from whatever the checkpoint directory holds. Prints one line per start and a
summary, writes JSON with ``--json``; exits 0 when the final model is the same, 1 when not,
2 when the run could not finish within ``--starts``.

    .venv/bin/python scripts/chaos_resume.py --interruptions 6 --seed 1 --json results/chaos.json
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import numpy
import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, '.venv', 'bin', 'python')
MPIEXEC = os.environ.get('CHAINERMN_TORUS_MPIEXEC') or os.path.join(ROOT, '.venv', 'bin',
                                                                    'mpiexec')
EXAMPLE = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')
# 6000 images over 2 ranks, batch 100: 30 iterations an epoch, 2,400 in all (about 10 s of
# training on 2 cores after 2 s of start-up); a checkpoint every 16 (150 of them).
BASE = ['--epoch', '80', '--limit', '6000', '--unit', '50', '--checkpoint-interval', '16']
START_S = 1.5  # interruptions from here: before it the ranks are starting (import, MPI_Init)
WAYS = ('kill-one-rank', 'kill-every-rank', 'sigterm-mpiexec', 'sigint-mpiexec')


def _start(out, ckpt, nprocs, resume):
    argv = [MPIEXEC, '-n', str(nprocs), PYTHON, EXAMPLE, '--out', out,
            '--checkpoint-dir', ckpt] + BASE + (['--auto-resume'] if resume else [])
    env = dict(os.environ)
    env.pop('CHAINERMN_TORUS_QUIET', None)  # "resumed from ..." is what each start is judged by
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)


def _ranks(proc):
    try:
        return [p for p in psutil.Process(proc.pid).children(recursive=True)
                if 'train_mnist.py' in ' '.join(p.cmdline())]
    except psutil.Error:
        return []


def _interrupt(proc, way, rng):
    ranks, deadline = _ranks(proc), time.monotonic() + 5
    while len(ranks) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the launcher has not started them yet: a rank's kill needs them
        ranks = _ranks(proc)
    if way == 'kill-one-rank' and ranks:
        rng.choice(ranks).send_signal(signal.SIGKILL)
    elif way == 'kill-every-rank' and ranks:
        for r in ranks:
            r.send_signal(signal.SIGKILL)
    elif way == 'sigterm-mpiexec':
        proc.send_signal(signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGINT)


def _checkpointed(ckpt):
    """The newest complete checkpoint's iteration in ``ckpt`` (0: none)."""
    try:
        with open(os.path.join(ckpt, 'latest.json')) as f:
            return int(json.load(f)['iteration'])
    except (OSError, ValueError, KeyError):
        return 0


def _params(out):
    with numpy.load(os.path.join(out, 'model_final.npz')) as z:
        return {k: z[k].copy() for k in z.files}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--interruptions', type=int, default=6)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--np', type=int, default=2)
    p.add_argument('--starts', type=int, default=20, help='give up after this many starts')
    p.add_argument('--json', default=None)
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix='chaos-')
    t0 = time.monotonic()
    whole = _start(os.path.join(work, 'whole'), os.path.join(work, 'ck-whole'), args.np, False)
    err = whole.communicate(timeout=600)[1]
    span = time.monotonic() - t0
    if whole.returncode != 0:
        print('the uninterrupted run failed:\n' + err[-2000:], file=sys.stderr)
        return 2
    print(f'uninterrupted: {span:.1f} s')
    total = max(_checkpointed(os.path.join(work, 'ck-whole')), 1)
    out, ckpt = os.path.join(work, 'chaos'), os.path.join(work, 'ck')
    starts, ways = [], []
    for n in range(args.starts):
        at_start = _checkpointed(ckpt)  # what --auto-resume finds (rank 0's stdout is
        proc = _start(out, ckpt, args.np, resume=n > 0)  # lost with a killed job)
        planned = sum(s['interrupt'] is not None for s in starts) < args.interruptions
        # Within what is left of the training: a resumed start has less to do than a whole
        # run (the newest checkpoint's iteration of the whole run's last).
        # Within the first 60 % of it, so that the next start has work left to interrupt.
        left = 1.0 - _checkpointed(ckpt) / total
        at = START_S + rng.uniform(0.0, 0.6) * left * (span - START_S) if planned else None
        if planned and not ways:  # every way in each round of four, in a drawn order
            ways = rng.sample(WAYS, len(WAYS))
        way = ways.pop() if planned else None
        began = time.monotonic()
        try:
            proc.wait(timeout=at)
            way = None  # it finished (or failed) before the moment came
        except subprocess.TimeoutExpired:
            _interrupt(proc, way, rng)
        try:
            stdout, stderr = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:  # a hang is a finding: said, and the group ended
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            stderr += '\nchaos_resume: the job did not end within 300 s of its interruption'
        resumed = [line for line in stdout.splitlines() if 'resumed from' in line]
        starts.append({'start': n, 'interrupt': way, 'at_s': None if way is None else
                       round(at, 2), 'exit': proc.returncode, 'checkpoint_at_start': at_start,
                       'checkpoint_after': _checkpointed(ckpt),
                       'seconds': round(time.monotonic() - began, 2),
                       'resumed': resumed[0].split('resumed from', 1)[1].strip()
                       if resumed else None,
                       'last_error': (stderr.strip().splitlines() or [''])[-1][:300]})
        print('start {}: from checkpoint {}, {} -> exit {}; newest checkpoint then {}'.format(
            n, at_start or 'none', way or 'left alone' if way is None else
            f'{way} at {at:.1f} s', proc.returncode, _checkpointed(ckpt) or 'none'))
        if proc.returncode == 0 and way is None:
            break
    else:
        print(f'not finished after {args.starts} starts', file=sys.stderr)
        return 2
    a, b = _params(os.path.join(work, 'whole')), _params(out)
    same = a.keys() == b.keys() and all(numpy.array_equal(a[k], b[k]) for k in a)
    diff = max(float(numpy.abs(a[k] - b[k]).max()) for k in a) if a.keys() == b.keys() \
        else None
    summary = {'seed': args.seed, 'ranks': args.np, 'uninterrupted_s': round(span, 2),
               'starts': starts, 'interrupted': sum(s['interrupt'] is not None
                                                   for s in starts),
               'bit_for_bit': same, 'max_abs_difference': diff}
    print('{} interruption(s), {} starts: final model {} (max abs difference {})'.format(
        summary['interrupted'], len(starts), 'bit for bit equal' if same else 'DIFFERENT',
        diff))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(summary, f, indent=1)
    return 0 if same else 1


if __name__ == '__main__':
    sys.exit(main())
