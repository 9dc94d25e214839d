"""Fault matrix: every failure path under mpiexec, and what each leaves behind.

    sudo .venv/bin/python scripts/fault_matrix.py [--quick] [--json OUT.json] [--markdown OUT.md]

Each scenario (fault x communicator x loader) runs a real 2-rank training job
(tests/mpi_workers/fault_job.py) under the venv's mpiexec, inside its own mount namespace
with a fresh tmpfs on /dev/shm (``unshare -m`` and ``mount``: root), so every file left in
/dev/shm afterwards is the job's. Reported per row: the time from the fault to mpiexec's
exit, the files (and bytes) left in /dev/shm and in the checkpoint directory, processes
of the job still alive, and the line that tells the user what happened.

Needs root for the namespace and the tmpfs; anywhere else it says so and stops.
"""
import argparse
import collections
import concurrent.futures
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from chainermn_torus.watchers import board_layout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, 'tests', 'mpi_workers', 'fault_job.py')
PYTHON = os.path.join(ROOT, '.venv', 'bin', 'python')
# scripts/with_mpi.sh names another MPI's mpiexec; the default is the venv's (mpich wheel).
MPIEXEC = (os.environ.get('CHAINERMN_TORUS_MPIEXEC')
           or os.path.join(ROOT, '.venv', 'bin', 'mpiexec'))

FAULTS = ('raise', 'kill', 'loader-death', 'sigint', 'sigterm', 'hang', 'enospc', 'shm-full')
# Rows of one configuration each (rsap's node-shared rows, our loader): the float16 mean that
# overflows, a diverged state at a checkpoint, /dev/shm 8 KB above the node-shared buffers'
# bytes (where the old check passed and the job died of SIGBUS), and a checkpoint directory
# (a tmpfs) with room for 2.6 checkpoints (keep=2), where a requeue used to fail at every
# third checkpoint. The last one must complete.
SINGLE = ('mean-overflow', 'diverge', 'shm-short', 'ckpt-room', 'eval-stall', 'eval-long')
COMPLETES = ('ckpt-room', 'eval-long', 'loader-eval', 'empty-flag', 'latest-flip',
             'forged-verdict', 'planted-links', 'sigterm-ckpt', 'ckpt-pickle')
# On the emulated cluster (scripts/emulate_cluster.sh, 3 nodes x 2 ranks), every process of
# node1 stopped (SIGSTOP): during training steps, and during an evaluation. The watchdog
# must name node1 within its limit + 2 s. One at a time (one cluster).
CLUSTER = ('node-frozen', 'node-frozen-eval', 'node-rank-stop')
# node-rank-stop: one rank of node1 (rank 2) stopped (SIGSTOP) mid-step: named, with its
# host, through the heartbeats (the lowest node's watcher says it).
STOPPED_RANK = 2
# A rank stopped (SIGSTOP, process state T) or spinning, and where: at start-up, in a
# checkpoint write and in the final evaluation (the job stops itself there), mid-step (the
# harness stops rank 1 at rank 0's FAULT line, wherever it is then) with every communicator
# kind at P = 2 and 3. The watchdog must name rank 1, its host and phase within the limit
# (3 s) + 2 s; at start-up within its own limit (STARTUP_S) + 2 s.
STALLS = ('stop-startup', 'stop-checkpoint', 'stop-final-eval', 'spin')
STEP_STOPS = ('stop-step', 'stop-step-p3')
STOP_COMMUNICATORS = ('shm', 'rsap', 'rsaa', 'pure_allreduce', 'naive')
STARTUP_S = 10
# Rows that wait by design (a 12 s evaluation; the watchdog's limit after a hang or a stall;
# checkpoints in a full directory): 18-26 s each of the test tier's 7-26 s.
LONGEST = ('eval-long', 'hang', 'eval-stall', 'ckpt-room')
# Refusals: the MNIST example (examples/mnist/train_mnist.py) given one bad value, as a
# user would; the row reports the lines the job printed beyond the example's own header
# (target: the message and at most MPI's abort line) and the exit code.
def example():
    """The MNIST example of the checkout whose package runs (--code: an older one's)."""
    return os.path.join(os.environ.get('FAULT_MATRIX_CODE', ROOT), 'examples', 'mnist',
                        'train_mnist.py')


REFUSALS = collections.OrderedDict([
    ('refuse-segment-bytes', ({'CHAINERMN_TORUS_SEGMENT_BYTES': '4'}, [], False)),
    ('refuse-watchdog', ({'CHAINERMN_TORUS_WATCHDOG': 'abc'}, [], False)),
    ('refuse-threads', ({'CHAINERMN_TORUS_THREADS': 'two'}, [], False)),
    ('refuse-bucket-bytes', ({'CHAINERMN_TORUS_BUCKET_BYTES': '4MB'}, ['--overlap'], False)),
    ('refuse-tune', ({'CHAINERMN_TORUS_TUNE': 'maybe'}, ['--communicator', 'auto'], False)),
    ('refuse-grid', ({'CHAINERMN_TORUS_GRID': '2x-1'}, [], False)),
    ('refuse-timeline', ({'CHAINERMN_TORUS_TIMELINE': '/proc/nope/tl'}, [], False)),
    ('refuse-grid-option', ({}, ['--grid', '0x2'], False)),
    ('refuse-expect-ranks', ({'CHAINERMN_TORUS_EXPECT_RANKS': 'four'}, [], True)),
    ('refuse-shm-room', ({}, [], False)),   # /dev/shm of REFUSE_SHM_SIZE
    ('refuse-keep-mpi-shm', ({'CHAINERMN_TORUS_KEEP_MPI_SHM': 'maybe'}, [], False)),
    ('refuse-threads-huge', ({'CHAINERMN_TORUS_THREADS': '999999999999999'}, [], False)),
])
REFUSE_SHM_SIZE = '24m'  # MPICH's segment and the example's 7.2 MB x 2 do not fit
_HEADER = re.compile(r'^(=+|Num |Using |Optimizer: |Data: |epoch +main/loss)')
# The tuning's memory: a job shorter than the tuning (8 steps; the tuner needs 16 calls for
# the fault job's 0.4 MB of gradients) must say so, and the next job that it measures
# afresh; a file of the right key with a field of the wrong type ("choice" a
# string, "grid" of strings) must be named and ignored, and the job complete.
TUNE_ROWS = ('tune-short', 'tune-choice-str', 'tune-grid-strings')
OTHER = ('enospc-manifest',)
# Issue 48's rows, one per finding of its fault probe (items 7-13), each a job of its own:
# - stop-before-comm: rank 1 stopped (SIGSTOP) as its process starts, before Python, MPI or
#   its communicator (a wrapper stops itself, then execs the rank); watchdog 3 s, start-up
#   10 s: named within the step limit + 2 s, MPICH's segment names removed;
# - watcher-killed: the node's watchdog process killed (SIGKILL) at rank 0's step-5 line: a
#   stall of its own, said, the job ended;
# - batch-too-large: the MNIST example with --batchsize 100000000 (ran until killed);
# - loader-eval: the launcher's --loader ours --loader-eval on the MNIST example (died in
#   the final evaluation): must complete with its test accuracy;
# - empty-flag: CHAINERMN_TORUS_DOUBLE_BUFFERING= (set to nothing) through the launcher
#   (trained with stale gradients): must complete without double buffering;
# - kill rows (above): the killed rank named by the project (item 10);
# - refuse-keep-mpi-shm (a refusal row): a bad CHAINERMN_TORUS_KEEP_MPI_SHM left MPICH's
#   segment (item 11);
# - sigint, sigterm rows (above): one line per node (item 12);
# - latest-flip: a checkpointed job, its latest.json's iteration changed (4 -> 12), then
#   an --auto-resume job: must say latest.json is damaged, fall back and complete.
ISSUE48 = ('stop-before-comm', 'watcher-killed', 'batch-too-large', 'loader-eval',
           'empty-flag', 'latest-flip')
# Issue 54's rows, one per finding of its probe of a shared node (items 1-8); the attacks
# run as another user (OTHER_UID) from the standard library's Python:
# - forged-verdict: forged verdicts to the node watcher's UDP ports (they SIGKILLed the
#   ranks): the job must complete, the first refusal said;
# - squat-names: the watchers' abstract names bound first by the other user, then a rank
#   stopped before its communicator (it went unnoticed): named within the limits;
# - planted-links: links to the other user's file planted under the timeline's names (the
#   trace overwrote it): the job completes, the file untouched, the refusal said;
# - ckpt-foreign: a checkpoint directory the other user owns: refused in one line when the
#   checkpointer is made, before training;
# - ckpt-pickle: the user's checkpoints in a directory the other user owns, trusted, and a
#   rank file of the newest one replaced by the other user's, crafted to run code when
#   unpickled (it ran on every rank): passed over unread (issue 82: a trusted directory's
#   checkpoints are loaded only from the user's own files), nothing run, the job resumed
#   from the checkpoint before (--auto-resume falls back) and completed;
# - sigterm-ckpt: SIGTERM between checkpoint 4's manifest and latest.json (the next job
#   started from 0 and later deleted 4): the next job resumes from 4;
# - sys-exit: rank 1's sys.exit(3) (a hang, or a wrong verdict): the rank and code named;
# - loader-stop: a loader process of rank 1 stopped (named after 10 x the limit, as "the job
#   waits for none"): named with rank, host and pid within the limit + 2 s.
# (auto ending at each stage of its tuning under the three MPIs: tests/communicators/
# test_tune.py, in every MPI's fast set.)
ISSUE54 = ('forged-verdict', 'squat-names', 'planted-links', 'ckpt-foreign', 'ckpt-pickle',
           'sigterm-ckpt', 'sys-exit', 'loader-stop')
OTHER_UID = 65534  # nobody
ATTACKER = shutil.which('python3', path='/usr/bin:/bin') or sys.executable
STOP_AT_START = '''#!/bin/bash
if [ "${PMI_RANK:-}" = 1 ]; then kill -STOP $$; fi
exec "$@"
'''
CLUSTER_NODES, FROZEN_NODE = 3, 1
EMULATE = os.path.join(ROOT, 'scripts', 'emulate_cluster.sh')
# Variants of the table (algorithms.variants): rsap's node-shared rows (its default on
# one node), rsap's RMA window (shm=False), and no window at all.
COMMUNICATORS = ('shm', 'rsap', 'pure_allreduce')
LOADERS = ('ours', 'serial')
# The test tier's rows: every path of the loader and the windows; Ctrl-C is SIGTERM's path
# (an exception in the main thread) and a full disk is
# tests/extensions/checkpoint/test_checkpoint.py's.
QUICK = ('raise', 'kill', 'loader-death', 'sigterm', 'hang', 'shm-full')
SHM_SIZE = '64m'
SHM_FULL_SIZE = '3m'   # MPICH's own segment (2.1 MB) fits, the job's windows and slots do not
WATCHDOG_S = 3

# What the user is told, per fault: the first line matching the first pattern that matches
# any line is the row's message (ours before the launcher's).
MESSAGES = {
    'raise': [r'Uncaught exception on rank \d+.*'],
    'kill': [r'chainermn_torus: rank \d+ \(.*\) died.*', r'BAD TERMINATION.*', r'EXIT CODE: 9',
             r'noticed that process rank \d+ .*exited on'],  # Open MPI's prterun
    'loader-death': [r'loader process .* was killed by signal 9 \(SIGKILL\).*'],
    'sigint': [r'SIGINT \(.*\) received; the job ends.*', r'Ctrl-C'],
    'sigterm': [r'SIGTERM \(.*\) received; the job ends.*', r'signal 15|EXIT CODE: 15'],
    'hang': [r'chainermn_torus watchdog: '],
    'enospc': [r'cannot write checkpoint'],
    'shm-full': [r'not enough shared memory'],
    'mean-overflow': [r"NaN/Inf in the averaged gradients.*"],
    'diverge': [r'checkpoint \d+ not written: the trainer state holds NaN/Inf.*'],
    'shm-short': [r'not enough shared memory.*', r'Bus error|SIGNAL: 7'],
    'ckpt-room': [r'removed the oldest checkpoint\(s\) first.*'],
    'eval-stall': [r'chainermn_torus watchdog: .*'],
    'eval-long': [r'chainermn_torus watchdog: .*'],  # none expected: the job completes
    'node-frozen': [r'chainermn_torus watchdog: .*'],
    'node-frozen-eval': [r'chainermn_torus watchdog: .*'],
    'node-rank-stop': [r'chainermn_torus watchdog: .*'],
    'enospc-manifest': [r'checkpoint 4 not completed: rank 0 cannot write its manifest.*'],
    'tune-short': [r'chainermn_torus auto: the job ended after .*'],
    'tune-choice-str': [r'chainermn_torus auto: .* ignored, stale: .*'],
    'tune-grid-strings': [r'chainermn_torus auto: .* ignored, stale: .*'],
    'stop-before-comm': [r'chainermn_torus watchdog: .*before its communicator.*'],
    'watcher-killed': [r"chainermn_torus watchdog: the watchdog's process .*"],
    'batch-too-large': [r'--batchsize 100000000 is more than .*'],
    'loader-eval': [r'test accuracy: .*'],
    'empty-flag': [r'test accuracy: .*'],
    'latest-flip': [r'latest checkpoint in .* is damaged.*'],
    'forged-verdict': [r'chainermn_torus watchdog: refused a datagram at .*'],
    'squat-names': [r'chainermn_torus watchdog: .*before its communicator.*'],
    'planted-links': [r'chainermn_torus: .*refusing to write .*'],
    'ckpt-foreign': [r'chainermn_torus: refusing checkpoints in .*'],
    'ckpt-pickle': [r'the latest checkpoint in .* is damaged .*'],
    'sigterm-ckpt': [r'latest\.json names iteration \d+, but a newer checkpoint is complete.*'],
    'sys-exit': [r'chainermn_torus: rank \d+ \(.*\) called sys\.exit\(3\).*'],
    'loader-stop': [r'chainermn_torus: .*loader process .* has been stopped .*',
                    r'chainermn_torus watchdog: .*a process it started, pid .*'],
}
for _fault in STALLS + STEP_STOPS:
    MESSAGES[_fault] = [r'chainermn_torus watchdog: .*']
for _fault in REFUSALS:
    MESSAGES[_fault] = [r'chainermn_torus(\.run)?: .*']
# Where in the job the watchdog says the rank was: the fixed words of each phase of the
# board's phase table (board_layout.PHASE_TABLE, the text before its first figure), the
# longest first, so that a new phase is named here without an edit.
PHASE_WORDS = tuple(sorted({text.split('{')[0].split(' (')[0].strip()
                            for p in board_layout.PHASE_TABLE
                            for text in (p.words, p.first_words) if text and p.limit},
                           key=len, reverse=True))


def scenarios(quick=False):
    """(fault, communicator, loader) rows; quick: every fault once and every communicator."""
    rows = []
    for fault in FAULTS:
        for comm in COMMUNICATORS:
            for loader in LOADERS:
                if fault == 'loader-death' and loader != 'ours':
                    continue  # no loader process to lose
                if quick and not ((comm, loader) == ('shm', 'ours') and fault in QUICK):
                    continue
                rows.append((fault, comm, loader))
    rows += [(fault, 'shm', 'ours') for fault in SINGLE + CLUSTER if fault != 'node-rank-stop']
    rows += [(fault, 'shm', 'serial') for fault in STALLS]
    rows += [(fault, comm, 'serial') for fault in STEP_STOPS for comm in STOP_COMMUNICATORS]
    rows += [(fault, 'rsap', 'serial') for fault in REFUSALS]
    rows += [(fault, 'auto', 'serial') for fault in TUNE_ROWS]
    rows += [(fault, 'shm', 'serial') for fault in OTHER]
    rows += [('node-rank-stop', 'shm', 'serial')]
    rows += [(fault, 'rsap', 'serial') for fault in ISSUE48]
    rows += [(fault, 'rsap', 'ours' if fault == 'loader-stop' else 'serial')
             for fault in ISSUE54]
    return rows


def ranks_of(fault):
    return 3 if fault.endswith('-p3') else 2


def can_run():
    """None if this machine can run the matrix, else why not."""
    if os.geteuid() != 0:
        return 'needs root (a mount namespace with its own tmpfs on /dev/shm)'
    if not shutil.which('unshare'):
        return 'no unshare(1)'
    probe = subprocess.run(['unshare', '-m', '--propagation', 'private', 'sh', '-c',
                            'mount -t tmpfs -o size=1m tmpfs /dev/shm'],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return 'cannot mount a private tmpfs on /dev/shm here: ' + probe.stderr.strip()
    return None


def _mount(size, where, mode=None):
    """A tmpfs of ``size`` bytes at ``where``; ``mode``: its root's (tmpfs's own is 1777,
    which a checkpoint directory may not have: anyone could write there)."""
    options = 'size=' + str(size) + ('' if mode is None else ',mode=' + mode)
    subprocess.run(['mount', '-t', 'tmpfs', '-o', options, 'tmpfs', where], check=True)


def _probe(comm, loader, workdir):
    """A run of the same job that completes: the bytes of one checkpoint."""
    _mount(SHM_SIZE, '/dev/shm')
    try:
        probe = _run_job('none', comm, loader, os.path.join(workdir, 'probe'))
    finally:
        subprocess.run(['umount', '/dev/shm'], check=False)
    if not probe['completed']:
        raise RuntimeError('probe run failed: ' + probe['tail'])
    return probe['checkpoint_bytes']


def run_inside(fault, comm, loader, workdir):
    """One scenario; called inside the private mount namespace (see main)."""
    size = {'shm-full': SHM_FULL_SIZE, 'refuse-shm-room': REFUSE_SHM_SIZE}.get(fault, SHM_SIZE)
    if fault in TUNE_ROWS:
        _mount(size, '/dev/shm')
        try:
            return dict(_tune_row(fault, comm, loader, workdir), shm_size=size,
                        checkpoint_room=None)
        finally:
            subprocess.run(['umount', '/dev/shm'], check=False)
    if fault == 'latest-flip' or fault in ISSUE54:
        _mount(size, '/dev/shm')
        row = _flip_row if fault == 'latest-flip' else _issue54_row
        try:
            return dict(row(fault, comm, loader, workdir), shm_size=size, checkpoint_room=None)
        finally:
            subprocess.run(['umount', '/dev/shm'], check=False)
    room = None
    if fault == 'ckpt-room':
        room = int(2.6 * _probe(comm, loader, workdir))
    _mount(size, '/dev/shm')
    if fault in CLUSTER:  # the emulated nodes share this namespace's /dev/shm
        try:
            subprocess.run(['bash', EMULATE, 'up', str(CLUSTER_NODES)], check=True,
                           capture_output=True, text=True)
            result = _run_job(fault, comm, loader, workdir)
        finally:
            subprocess.run(['bash', EMULATE, 'down'], capture_output=True)
            subprocess.run(['umount', '/dev/shm'], check=False)
        result['shm_size'], result['checkpoint_room'] = size, None
        return result
    ckpt = os.path.join(workdir, 'ckpt')
    if room is not None:
        os.makedirs(ckpt, exist_ok=True)
        _mount(room, ckpt, mode='0700')
    try:
        result = _run_job(fault, comm, loader, workdir)
        result['shm_size'] = size
        result['checkpoint_room'] = room
        return result
    finally:
        if room is not None:
            subprocess.run(['umount', ckpt], check=False)
        subprocess.run(['umount', '/dev/shm'], check=False)


def _tune_row(fault, comm, loader, workdir):
    """A tuning row: for the wrong-typed files, a job long enough to decide (40 steps),
    its file made wrong, then the job the row reports; for the short job, 20 steps twice
    (the second must say the first ended before deciding)."""
    tune = os.path.join(workdir, 'tuned')
    env = {'CHAINERMN_TORUS_TUNE': 'on', 'CHAINERMN_TORUS_TUNE_DIR': tune,
           'CHAINERMN_TORUS_QUIET': '0'}
    short = {'FAULT_STEPS': '8'}  # the job's 0.4 MB of gradients: 16 calls decide
    first = _run_job('none', comm, loader, os.path.join(workdir, 'first'),
                     dict(env, **short) if fault == 'tune-short' else
                     dict(env, FAULT_STEPS='40'))
    files = sorted(os.listdir(tune)) if os.path.isdir(tune) else []
    if fault != 'tune-short' and files:
        path = os.path.join(tune, files[0])
        with open(path) as f:
            data = json.load(f)
        if fault == 'tune-choice-str':
            data['choice'] = 'rsap'
        else:
            data['choice']['grid'] = ['2', '1']
        with open(path, 'w') as f:
            json.dump(data, f)
    result = _run_job('none', comm, loader, workdir, dict(env, **short))
    result['fault'] = fault
    result['message'] = _message(fault, result['tail'])
    result['first_job'] = {'exit_code': first['exit_code'], 'message': first['message'],
                           'tune_files': files}
    if fault == 'tune-short':  # the second job: the first's record said, afresh
        result['afresh'] = _message('tune-short', result['tail']) and \
            'measuring afresh' in result['tail']
        result['first_job']['message'] = _message('tune-short', first['tail'])
    return result


def _run_job(fault, comm, loader, workdir, extra_env=None, args=()):
    ckpt = os.path.join(workdir, 'ckpt')
    os.makedirs(ckpt, exist_ok=True)
    timeline = os.path.join(workdir, 'tl')
    code = os.environ.get('FAULT_MATRIX_CODE', ROOT)  # --code: an older checkout's package
    env = dict(os.environ, OMP_NUM_THREADS='1', CHAINERMN_TORUS_QUIET='1',
               PYTHONPATH=code + os.pathsep + os.environ.get('PYTHONPATH', ''),
               CHAINERMN_TORUS_TIMELINE=timeline,
               FAULT_MATRIX_ROW=workdir)  # marks this row's processes
    # More processes than cores (rows side by side, 2 loader processes per rank, the other
    # lane of `make test`): each MPI's setting that makes a waiting rank give its core up.
    mpi = os.environ.get('CHAINERMN_TORUS_MPI', 'mpich')
    env.update(_ours('tools.oversubscribe').environment(mpi, ranks_of(fault), cores=1))
    env.update(extra_env or {})
    job_fault = {'sigint': 'signal', 'sigterm': 'signal', 'shm-full': 'none',
                 'ckpt-room': 'none', 'ckpt-foreign': 'none',
                 'ckpt-pickle': 'none'}.get(fault, fault)
    if fault == 'ckpt-room':
        env['CHAINERMN_TORUS_QUIET'] = '0'  # the line that says what was removed first
    if fault in ('hang', 'eval-stall', 'forged-verdict', 'squat-names', 'loader-stop',
                 'sys-exit') + CLUSTER + STALLS + STEP_STOPS:
        env['CHAINERMN_TORUS_WATCHDOG'] = str(WATCHDOG_S)
    if fault in STALLS + STEP_STOPS:  # one node, the serial loader: started in seconds
        env['CHAINERMN_TORUS_WATCHDOG_STARTUP'] = str(STARTUP_S)
    if fault == 'eval-long':
        # 40 batches of 0.3 s: a 12 s evaluation under the rows' 3 s limit, 4 x the limit.
        # (Shorter limits were too short for a loaded 2-core machine's ordinary steps, rows
        # side by side: two ranks both inside one all-reduce of step 2 for 1 s, in 4 runs
        # of 6 on a slow day at issue 36, and once for 2 s in a slow hour with four rows
        # side by side.)
        env['CHAINERMN_TORUS_WATCHDOG'] = str(WATCHDOG_S)
    if fault in CLUSTER or fault in ('forged-verdict', 'planted-links'):
        env['FAULT_STEP_SLEEP'] = '0.2'  # a job still running while it is attacked
    if fault == 'shm-full':
        env['FAULT_UNITS'] = '1000'  # 3.2 MB of gradients per rank: more than is left
        env['FAULT_BATCH'] = '400'   # and 7.5 MB of loader slots
    job_fault = {'stop-step-p3': 'stop-step'}.get(job_fault, job_fault)
    argv = [MPIEXEC, '-n', str(ranks_of(fault)), PYTHON, WORKER, job_fault, comm, loader, ckpt]
    if fault in REFUSALS:
        bad_env, args, launcher = REFUSALS[fault]
        env.pop('CHAINERMN_TORUS_TIMELINE', None)  # no timeline: the refusal rows' own values
        env.update(bad_env)
        argv = [MPIEXEC, '-n', '2', PYTHON] + (['-m', 'chainermn_torus.run'] if launcher
                                                else []) + \
            [example(), '--epoch', '1', '--limit', '400', '--out', os.path.join(workdir, 'out')] \
            + args
    if fault in ISSUE48:
        env.pop('CHAINERMN_TORUS_TIMELINE', None)
        out = ['--out', os.path.join(workdir, 'out')]
        mnist = [PYTHON, example(), '--epoch', '1', '--limit', '400']
        if fault == 'stop-before-comm':
            wrapper = os.path.join(workdir, 'stop_first.sh')
            with open(wrapper, 'w') as f:
                f.write(STOP_AT_START)
            os.chmod(wrapper, 0o755)
            env.update(CHAINERMN_TORUS_WATCHDOG=str(WATCHDOG_S),
                       CHAINERMN_TORUS_WATCHDOG_STARTUP=str(STARTUP_S))
            argv = [MPIEXEC, '-n', '2', wrapper, PYTHON, WORKER, 'none', comm, loader, ckpt]
        elif fault == 'watcher-killed':
            env['CHAINERMN_TORUS_WATCHDOG'] = str(WATCHDOG_S)
            argv = [MPIEXEC, '-n', '2', PYTHON, WORKER, 'signal', comm, loader, ckpt]
        elif fault == 'batch-too-large':
            argv = [MPIEXEC, '-n', '2'] + mnist + ['--batchsize', '100000000'] + out
        elif fault == 'loader-eval':
            argv = [MPIEXEC, '-n', '2', PYTHON, '-m', 'chainermn_torus.run', '--loader', 'ours',
                    '--loader-eval'] + mnist[1:] + out
        elif fault == 'empty-flag':
            env['CHAINERMN_TORUS_DOUBLE_BUFFERING'] = ''
            env['CHAINERMN_TORUS_QUIET'] = '0'  # the launcher's line: what it applied
            argv = [MPIEXEC, '-n', '2', PYTHON, '-m', 'chainermn_torus.run'] + mnist[1:] + out
        else:  # latest-flip: _flip_row's jobs
            env['CHAINERMN_TORUS_QUIET'] = '0'  # the fall-back and the resume are said lines
            argv = [MPIEXEC, '-n', '2'] + mnist + list(args) + out
    if fault in ('forged-verdict', 'planted-links'):
        job_fault = 'attack'
    if fault == 'squat-names':
        wrapper = os.path.join(workdir, 'stop_first.sh')
        with open(wrapper, 'w') as f:
            f.write(STOP_AT_START)
        os.chmod(wrapper, 0o755)
        env['CHAINERMN_TORUS_WATCHDOG_STARTUP'] = str(STARTUP_S)
        # Under the launcher, as the job scripts run a job: it watches the start-up (the
        # import of the package starts nothing).
        argv = [MPIEXEC, '-n', '2', wrapper, PYTHON, '-m', 'chainermn_torus.run', WORKER,
                'none', comm, loader, ckpt]
    elif fault in ISSUE54:
        argv = [MPIEXEC, '-n', '2', PYTHON, WORKER, job_fault, comm, loader, ckpt]
    if fault in CLUSTER:
        job_fault = {'node-frozen': 'frozen', 'node-frozen-eval': 'frozen-eval',
                     'node-rank-stop': 'stop-step'}[fault]
        argv = ['bash', EMULATE, 'run', '2', PYTHON, WORKER, job_fault, comm, loader, ckpt]
    start = time.time()
    tmp_before = set(_hydra_files())
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=workdir, start_new_session=True)
    out, err, fault_at = [], [], [None]

    cue = r'EVALUATION (\d+\.\d+)' if fault == 'node-frozen-eval' else r'FAULT (\d+\.\d+)'

    named = [None]  # when the watchdog's line arrived
    forged = [None]  # forged-verdict: what the attacker said it sent

    def pump(stream, sink, watch):
        for line in stream:
            sink.append(line)
            if named[0] is None and (line.startswith('chainermn_torus watchdog: ') or (
                    fault == 'loader-stop' and 'has been stopped' in line)):
                named[0] = time.time()
            m = re.match(cue, line)
            if watch and m and fault_at[0] is None:
                if fault == 'node-rank-stop':
                    _stop_rank(workdir, STOPPED_RANK)
                    fault_at[0] = time.time()
                elif fault in CLUSTER:
                    _signal_node(FROZEN_NODE, signal.SIGSTOP)
                    fault_at[0] = time.time()
                elif fault in STEP_STOPS:
                    _stop_rank(workdir, 1)
                    fault_at[0] = time.time()
                elif fault == 'watcher-killed':
                    _kill_node_watcher(workdir)
                    fault_at[0] = time.time()
                elif fault == 'forged-verdict':
                    fault_at[0] = time.time()
                    forged[0] = _forge_verdicts(workdir)
                else:
                    fault_at[0] = float(m.group(1))

    threads = [threading.Thread(target=pump, args=(proc.stdout, out, True)),
               threading.Thread(target=pump, args=(proc.stderr, err, False))]
    for t in threads:
        t.start()
    if fault in ('sigint', 'sigterm') or job_fault == 'sigterm-ckpt':
        while fault_at[0] is None and proc.poll() is None and time.time() - start < 120:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT if fault == 'sigint' else signal.SIGTERM)
    try:
        proc.wait(timeout=180)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        hung = True
    end = time.time()
    frozen_files = []
    if fault in CLUSTER:
        # The stopped node's processes cannot clean up; on a cluster the node is rebooted or
        # the next job's start sweeps them (runtime.files.devshm). Here: killed, then swept, and
        # what was theirs is reported apart. With one rank stopped (node-rank-stop) the node
        # is not frozen: its watcher removes its board itself once its leader rank is gone,
        # given the time (killed at once, that clean-up lost the race on a loaded machine).
        if fault == 'node-rank-stop':
            _wait_node_gone(FROZEN_NODE, 5)
        # The other nodes' processes first: one still ending (a watcher's last sweep) would
        # remove the board as soon as its creator is killed (CI, beside lane B, once).
        _wait_others_gone(workdir, FROZEN_NODE, 10)
        _signal_node(FROZEN_NODE, signal.SIGKILL)
        _wait_node_gone(FROZEN_NODE, 5)
        frozen_files = [n for n, _ in _shm_files()  # the board: ..._watch_<host>_<token>
                        if re.search(rf'_watch_node{FROZEN_NODE}_[0-9a-f]+$', n)]
        _ours('runtime.files.devshm').sweep()
    for t in threads:
        t.join()
    stdout, stderr = ''.join(out), ''.join(err)
    if fault_at[0] is None and (fault in ('shm-full', 'ckpt-room') or fault in REFUSALS
                                or fault in ISSUE48 or fault in ISSUE54):
        fault_at[0] = start  # the fault is there from the start
    # Loader processes notice a dead parent within a second: up to 1.5 s for the job's
    # processes to be gone (at once where none is left), then what remains is counted.
    settle = time.time() + 1.5
    while _job_processes(workdir) and time.time() < settle:
        time.sleep(0.05)
    left = _shm_files()
    # MPICH's launcher topology files this row's job left in /tmp (rows side by side: another
    # row's job may still hold one; `make fault-matrix` runs them one at a time).
    tmp_left = sorted(set(_hydra_files()) - tmp_before)
    stray = [n for n in os.listdir(ckpt) if '.tmp' in n]
    alive = _job_processes(workdir)
    message = _message(fault, stdout + stderr)
    checkpoints, nonfinite, ckpt_bytes = _checkpoints(ckpt)
    named_rank, named_host, named_phase = _named(message)
    return {
        'ranks': ranks_of(fault), 'lines': _lines(stdout + stderr),
        'named_rank': named_rank, 'named_host': named_host, 'named_phase': named_phase,
        'fault': fault, 'communicator': comm, 'loader': loader, 'exit_code': proc.returncode,
        'hung': hung, 'seconds_to_end': None if fault_at[0] is None else end - fault_at[0],
        'shm_files': left, 'shm_bytes': sum(size for _, size in left), 'tmp_files': tmp_left,
        'checkpoint_tmp_files': stray, 'processes_left': alive, 'message': message,
        'completed': stdout.count('OK rank') == 2 or (
            fault in ISSUE48 and 'test accuracy:' in stdout and proc.returncode == 0),
        'checkpoints': checkpoints, 'checkpoints_nonfinite': nonfinite,
        'checkpoint_bytes': ckpt_bytes, 'timeline': _timelines(timeline),
        'frozen_node_files': frozen_files,
        'seconds_to_message': None if named[0] is None or fault_at[0] is None
        else named[0] - fault_at[0],
        'forged': forged[0],
        'tail': (stdout + stderr)[-1500:],
        'ours': [ln for ln in (stdout + stderr).splitlines()
                 if ln.startswith('chainermn_torus')][:20],
    }


def _lines(text):
    """The lines a job printed beyond the MNIST example's own header."""
    return sum(1 for line in text.splitlines() if line.strip() and not _HEADER.match(line))


def _named(message):
    """(rank, host, phase) the watchdog's line names, or Nones."""
    m = re.search(r'the job waits for rank (\d+) on ([^,]+),', message)
    if not m:
        return None, None, None
    phase = next((w for w in PHASE_WORDS if w in message), None)
    return int(m.group(1)), m.group(2), phase


def _stop_rank(workdir, rank):
    """SIGSTOP the training process of ``rank`` in this row's job."""
    for pid in _job_processes(workdir):
        try:
            with open(f'/proc/{pid}/environ', 'rb') as f:
                environ = f.read().split(b'\0')
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                cmdline = f.read()
        except OSError:
            continue
        if f'PMI_RANK={rank}'.encode() in environ and WORKER.encode() in cmdline:
            os.kill(pid, signal.SIGSTOP)


def _kill_node_watcher(workdir):
    """SIGKILL the node watcher process (runtime.watch.node_watch) of this row's job."""
    for pid in _job_processes(workdir):
        try:
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                cmdline = f.read()
        except OSError:
            continue
        if b'chainermn_torus.runtime.watch.node_watch' in cmdline:
            os.kill(pid, signal.SIGKILL)


def _flip_row(fault, comm, loader, workdir):
    """Issue 48's latest-flip: a job that writes checkpoints at iterations 2 and 4, its
    latest.json's iteration changed to 12 (its files stay those of 4), then a job with
    --auto-resume that must name the damage, fall back and complete."""
    ckpt = ['--checkpoint-dir', os.path.join(workdir, 'ck'), '--checkpoint-interval', '2',
            '--batchsize', '50']
    first = _run_job(fault, comm, loader, os.path.join(workdir, 'first'), args=ckpt)
    path = os.path.join(workdir, 'ck', 'latest.json')
    with open(path) as f:
        data = json.load(f)
    flipped = data['iteration']
    data['iteration'] = flipped + 8
    with open(path, 'w') as f:
        json.dump(data, f)
    result = _run_job(fault, comm, loader, workdir, args=ckpt + ['--epoch', '2',
                                                                 '--auto-resume'])
    result['first_job'] = {'exit_code': first['exit_code'], 'flipped': [flipped,
                                                                        flipped + 8]}
    result['resumed_at'] = flipped if f'at iteration {flipped}' in result['tail'] \
        else None
    return result


def as_other(code, *args, wait=True):
    """``code`` run by the other user (OTHER_UID), the standard library's Python alone
    (tests/runtime/test_other_users.py runs the same attacks): its output, or with ``wait`` False
    the process."""
    proc = subprocess.Popen([ATTACKER, '-I', '-S', '-c', code] + [str(a) for a in args],
                            user=OTHER_UID, group=OTHER_UID, extra_groups=[], cwd='/',
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={'PATH': '/usr/bin:/bin'})
    if not wait:
        return proc
    out, err = proc.communicate(timeout=60)
    return out + err


FORGE = r"""
import json, os, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent = 0
for port in sys.argv[1:]:
    for node in (0, 1, 2):
        for data in (json.dumps({'kind': 'verdict', 'node': node, 'rows': []}).encode(),
                     os.urandom(32) + json.dumps({'kind': 'verdict', 'node': node,
                                                  'seq': 1 << 62}).encode()):
            s.sendto(data, ('127.0.0.1', int(port)))
            sent += 1
print('sent', sent)
"""


def _forge_verdicts(workdir):
    """Forged verdicts, as the other user, to every UDP port of this row's node watcher
    (what /proc/net/udp shows anyone): what the attacker said."""
    import psutil
    for pid in _job_processes(workdir):
        try:
            proc = psutil.Process(pid)
            if 'chainermn_torus.runtime.watch.node_watch' not in ' '.join(proc.cmdline()):
                continue
            conns = proc.net_connections(kind='udp') if hasattr(proc, 'net_connections') \
                else proc.connections(kind='udp')
        except psutil.Error:
            continue
        ports = sorted({c.laddr.port for c in conns})
        return as_other(FORGE, *ports).strip()
    return 'no node watcher found'


SQUAT = r"""
import os, socket, sys, time
held, seen = [], set()
end = time.time() + float(sys.argv[1])
while time.time() < end and not held:  # then hold them, idle: the job is not to be slowed
    for pid in os.listdir('/proc'):
        if not pid.isdigit() or pid in seen:
            continue
        try:
            comm = open('/proc/%s/comm' % pid).read().strip()
            text = open('/proc/%s/stat' % pid).read()
        except OSError:
            continue
        if comm != 'hydra_pmi_proxy':
            continue
        seen.add(pid)
        key = '%s_%s' % (pid, text[text.rindex(')') + 2:].split()[19])
        names = ['cmtorus_startup_said_' + key, 'cmtorus_ending_' + key]
        names += ['cmtorus_arrived_%s_%d' % (key, r) for r in range(4)]
        for name in names:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                s.bind('\0' + name)
                held.append(s)
            except OSError:
                s.close()
        print('squatted', key, len(held), flush=True)
    time.sleep(0.02)
time.sleep(max(0, end - time.time()))
"""

PLANT = r"""
import os, sys
victim, prefix = sys.argv[1], sys.argv[2]
with open(victim, 'w') as f:
    f.write('precious')
os.chmod(victim, 0o600)
for rank in (0, 1):
    for suffix in ('events', 'json.tmp'):
        os.symlink(victim, '%s.rank%d.%s' % (prefix, rank, suffix))
print('planted')
"""

# A member to add to a rank file: an object array whose unpickling opens (creates) the file
# named, as the probe's crafted rank file ran `id`.
_CRAFT = r"""
import os, pickle, struct, sys, zipfile
ckpt, name, marker = sys.argv[1:4]
payload = pickle.dumps(type('P', (), {'__reduce__': lambda self: (open, (marker, 'w'))})(),
                       protocol=3)
header = "{'descr': '|O', 'fortran_order': False, 'shape': (), }"
header += ' ' * (63 - (10 + len(header)) % 64) + '\n'
npy = b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header)) + header.encode() + payload
path = ckpt + '/' + name
with zipfile.ZipFile(path + '.crafted', 'w') as z:
    z.writestr('updater/evil.npy', npy)
os.replace(path + '.crafted', path)  # the directory is this user's: the name is theirs now
print('crafted')
"""


def _issue54_row(fault, comm, loader, workdir):
    """One of ISSUE54's rows: the attack or the fault around a job, or two (the first writes
    the checkpoints the second resumes from)."""
    if fault == 'squat-names':
        squatter = as_other(SQUAT, 60, wait=False)
        time.sleep(0.3)
        try:
            result = _run_job(fault, comm, loader, workdir)
        finally:
            squatter.kill()
        result['attack'] = squatter.communicate()[0].strip()[-200:]
        return result
    if fault == 'planted-links':
        shared = tempfile.mkdtemp(prefix='cmtorus-shared-')  # /tmp: the other user reaches it
        try:
            os.chmod(shared, 0o1777)
            victim = os.path.join(shared, 'victim')
            attack = as_other(PLANT, victim, os.path.join(shared, 'tl')).strip()
            result = _run_job(fault, comm, loader, workdir, {
                'CHAINERMN_TORUS_TIMELINE': os.path.join(shared, 'tl')})
            with open(victim) as f:
                result['victim_intact'] = f.read() == 'precious'
        finally:
            shutil.rmtree(shared, ignore_errors=True)
        result['attack'] = attack
        return result
    if fault in ('ckpt-foreign', 'ckpt-pickle', 'sigterm-ckpt'):
        # In /tmp: the other user reaches the checkpoint directory there.
        shared = tempfile.mkdtemp(prefix='cmtorus-ckpt-row-')
        try:
            os.chmod(shared, 0o755)
            return _resume_row(fault, comm, loader, shared)
        finally:
            shutil.rmtree(shared, ignore_errors=True)
    return _run_job(fault, comm, loader, workdir)


def _resume_row(fault, comm, loader, workdir):
    """A job that writes checkpoints (sigterm-ckpt: SIGTERM ends it between checkpoint 4's
    manifest and latest.json), what the attack does to them, then a job that resumes."""
    ckpt = os.path.join(workdir, 'ckpt')
    first = _run_job(fault, comm, loader, workdir, {'FAULT_STEPS': '6'})
    extra, attack = {'FAULT_RESUME': '1', 'CHAINERMN_TORUS_QUIET': '0'}, None
    marker = os.path.join(workdir, 'payload-ran')  # what the crafted file's unpickling makes
    if fault != 'sigterm-ckpt':  # a shared project directory: the other user owns it
        # (ckpt-foreign: its files too; ckpt-pickle: the user's own checkpoints in it)
        for path in [ckpt] + ([os.path.join(ckpt, n) for n in os.listdir(ckpt)]
                              if fault == 'ckpt-foreign' else []):
            os.chown(path, OTHER_UID, OTHER_UID)
    if fault == 'ckpt-pickle':  # and the user said it is trusted
        attack = as_other(_CRAFT, ckpt, 'snapshot_iter_6.rank1.npz', marker).strip()
        extra['CHAINERMN_TORUS_TRUST_CHECKPOINTS'] = '1'
    result = _run_job('none' if fault == 'sigterm-ckpt' else fault, comm, loader, workdir,
                      extra)
    result['fault'] = fault
    result['message'] = _message(fault, '\n'.join(result['ours']))
    resumed = re.search(r'RESUMED (\w+)', result['tail'])
    result['resumed_at'] = resumed and resumed.group(1)
    result['first_job'] = {'exit_code': first['exit_code'], 'message': first['message'],
                           'said_on_disk': 'the newest complete checkpoint on disk is '
                                           'iteration 4' in first['tail']}
    result['attack'] = attack
    result['payload_ran'] = os.path.exists(marker)
    return result


def _node_pids(node):
    out = subprocess.run(['ip', 'netns', 'pids', f'cmt-n{node}'],
                         capture_output=True, text=True).stdout.split()
    alive = []
    for pid in out:  # a zombie is gone for our purpose (its parent reaps it later)
        try:
            with open(f'/proc/{pid}/stat') as f:
                if f.read().rsplit(')', 1)[1].split()[0] != 'Z':
                    alive.append(int(pid))
        except (OSError, IndexError):
            pass
    return alive


def _ours(module):
    """``chainermn_torus.<module>`` of this checkout (the harness runs as a script, and the
    tests import it, from outside the package's path)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return importlib.import_module('chainermn_torus.' + module)


def _wait_node_gone(node, seconds):
    """Until no process of emulated node ``node`` is left, for at most ``seconds``."""
    settle = time.time() + seconds
    while _node_pids(node) and time.time() < settle:
        time.sleep(0.05)


def _wait_others_gone(workdir, node, seconds):
    """Until no process of this row's job is left but those of emulated node ``node``, for
    at most ``seconds``."""
    settle = time.time() + seconds
    while time.time() < settle and set(_job_processes(workdir)) - set(_node_pids(node)):
        time.sleep(0.05)


def _signal_node(node, sig):
    """Send ``sig`` to every process of emulated node ``node`` (its network namespace)."""
    for pid in _node_pids(node):
        try:
            os.kill(int(pid), sig)
        except (ProcessLookupError, ValueError):
            pass


def _checkpoints(ckpt):
    """(complete checkpoints, rank files holding NaN/Inf, bytes of the newest checkpoint)."""
    import numpy
    manifests = sorted(n for n in os.listdir(ckpt) if n.startswith('manifest_iter_'))
    nonfinite = []
    for name in sorted(os.listdir(ckpt)):
        if not (name.startswith('snapshot_iter_') and name.endswith('.npz')):
            continue
        if os.lstat(os.path.join(ckpt, name)).st_uid != os.getuid():
            continue  # another user's (ckpt-pickle's crafted file): never the job's, left
        with numpy.load(os.path.join(ckpt, name)) as z:
            if any(z[k].dtype.kind == 'f' and not numpy.isfinite(z[k]).all() for k in z.files):
                nonfinite.append(name)
    newest = 0
    if manifests:
        with open(os.path.join(ckpt, manifests[-1])) as f:
            newest = sum(c['bytes'] for c in json.load(f).get('checks', {}).values())
    return len(manifests), nonfinite, newest


def _timelines(prefix):
    """What the ranks' timelines became: complete, cut short (streamed log only), missing."""
    tools = _ours('tools.timeline')  # this checkout's reader, also for --code's jobs
    try:
        files = tools.rank_files(prefix)
    except ValueError:
        return {'complete': [], 'cut': [], 'notes': ['no timeline file']}
    notes = []
    tools.merge(prefix, notes)
    return {'complete': [r for r, p in files.items() if p.endswith('.json')],
            'cut': [r for r, p in files.items() if p.endswith('.events')],
            'notes': notes}


def _hydra_files():
    """The names of MPICH's launcher topology files in /tmp
    (runtime.files.devshm.HYDRA_TOPOLOGY)."""
    directory, prefix = os.path.split(_ours('runtime.files.devshm').HYDRA_TOPOLOGY)
    return [n for n in os.listdir(directory) if n.startswith(prefix)]


def _shm_files():
    out = []
    for name in sorted(os.listdir('/dev/shm')):
        try:
            out.append((name, os.lstat(os.path.join('/dev/shm', name)).st_size))
        except FileNotFoundError:
            pass
    return out


def _job_processes(workdir):
    """Processes of this row's job still alive: those whose environment carries the row's
    mark (the ranks, their loader processes and anything they started inherit it)."""
    mark = ('FAULT_MATRIX_ROW=' + workdir).encode()
    alive = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f'/proc/{pid}/environ', 'rb') as f:
                environ = f.read().split(b'\0')
        except OSError:
            continue
        if mark in environ:
            alive.append(int(pid))
    return alive


def _message(fault, text):
    lines = text.splitlines()
    for pattern in MESSAGES.get(fault, ()):
        for line in lines:
            if re.search(pattern, line):
                return line.strip()[:240]
    return ''


# Rows wait by design (a stopped, hung or killed rank; the watchdog's limit) while the other
# rank waits in MPI, where each MPI's setting for oversubscribed ranks makes it yield (MPICH:
# a 1 ns nanosleep, woken at the thread's timer slack, 50 us by default). A rank waiting
# 4 s in a barrier took 0.95 CPU-s so, 0.09 with a slack of 1 ms; these rows alone (their
# test file) 138 busy CPU-s against 154, 95 s against 97. A wake-up 1 ms late is
# nothing beside the rows' bounds (seconds).
ROW_TIMER_SLACK_NS = 1000000


def _set_timer_slack(ns):
    """The calling thread's timer slack (Linux prctl), which the processes it starts inherit
    (/proc/PID/timerslack_ns is the main thread's only)."""
    import ctypes
    try:
        ctypes.CDLL(None).prctl(29, ctypes.c_ulong(ns), 0, 0, 0)  # 29: PR_SET_TIMERSLACK
    except (OSError, AttributeError):  # no prctl (not Linux): the default slack
        pass


def run(rows, workdir, parallel=1):
    """Every row in a private mount namespace (this script re-executes itself in one), up
    to ``parallel`` rows at a time: each has its own /dev/shm, checkpoint directory, process
    group and process mark, so rows side by side see only their own leftovers."""
    def one(row):
        fault, comm, loader = row
        _set_timer_slack(ROW_TIMER_SLACK_NS)  # this thread's: the row's processes inherit it
        d = tempfile.mkdtemp(prefix='fault-', dir=workdir)
        proc = subprocess.run(['unshare', '-m', '--propagation', 'private', sys.executable,
                               os.path.abspath(__file__), '--inside', fault, comm, loader, d],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f'scenario {fault} {comm} {loader} failed to '
                               f'run: {proc.stderr[-2000:]}')
        shutil.rmtree(d, ignore_errors=True)
        return json.loads(proc.stdout.splitlines()[-1])
    alone = [r for r in rows if r[0] in CLUSTER]  # one emulated cluster at a time
    # The rows that wait longest go first, so that none of them is left running alone at
    # the end while the other workers idle.
    shared = sorted((r for r in rows if r not in alone), key=lambda r: r[0] not in LONGEST)
    with concurrent.futures.ThreadPoolExecutor(max(1, parallel)) as pool:
        done = dict(zip(shared, pool.map(one, shared)))
    done.update({r: one(r) for r in alone})
    return [done[r] for r in rows]


HEADER = """# Fault matrix

Written by `make fault-matrix` (`scripts/fault_matrix.py`, root): a real 2-rank training job
(`tests/mpi_workers/fault_job.py`: Fashion-MNIST, the multi-node optimizer, checkpoints
every 2 iterations) per row, under the MPICH wheel's mpiexec, each in its own mount
namespace with a fresh tmpfs on `/dev/shm`, so everything there afterwards is the job's.
Communicators: `shm` (rsap's default on one node, node-shared row buffers), `rsap` (its RMA
window, `shm=False`), `pure_allreduce` (no window). Loaders: `ours` (LoaderIterator, 2
processes) or `serial`. Time to end: from the fault to mpiexec's exit (named: to the
watchdog's line). Left: files in
`/dev/shm`, temporary files in the checkpoint directory, and processes of the job, once
they are gone or 1.5 s after mpiexec's exit. Checkpoints: complete ones left, and (in
brackets) rank files holding NaN/Inf. Timelines: ranks whose `.json` was written whole /
ranks with only the log they streamed (cut short by MPI_Abort or a kill).
Machine: {machine}, 2 ranks.

The rows after the first 45, one configuration each:
- `mean-overflow`: float16 communication and `check_finite`; from step 5 on, every rank's
  gradient of one weight is 0.9 x 65504 x P: each share g / P fits in float16, the mean
  does not;
- `diverge`: a weight set to NaN after step 5: the checkpoint at step 6 must refuse;
- `shm-short`: /dev/shm filled until the node-shared buffers' bytes + 8 KB are free, where
  the old check passed and the job died of SIGBUS;
- `ckpt-room`: the checkpoint directory on a tmpfs with room for 2.6 checkpoints (keep=2):
  must complete, removing the oldest checkpoint first when short;
- `eval-stall`: rank 1 stops at batch 3 of an evaluation (watchdog 3 s);
- `eval-long`: a healthy 12 s evaluation (40 batches) under a 3 s watchdog (4 x the
  limit): must complete;
- `node-frozen`, `node-frozen-eval`: the emulated cluster (`scripts/emulate_cluster.sh`, 3
  nodes x 2 ranks, watchdog 3 s), every process of node1 stopped (SIGSTOP) during training
  steps or during an evaluation; time to end from the stop. The stopped node's own progress
  board is what only it could remove: reported apart, then swept (its reboot or the next
  job's start would).

Issue 34's rows (watchdog 3 s, start-up limit 10 s; each stall must be named, with the
right rank, host and phase, within its limit + 2 s):
- `stop-startup`, `stop-checkpoint`, `stop-final-eval`: rank 1 stops itself (SIGSTOP) after
  making its communicator, halfway through writing its checkpoint file, and at batch 3 of
  the evaluation after training (after `watchdog.training_over()`, as the examples end);
- `spin`: rank 1 spins in its forward of step 5, never reaching the all-reduce;
- `stop-step`, `stop-step-p3`: the harness stops rank 1 (SIGSTOP) when rank 0 prints its
  step-5 line, wherever rank 1 is then, with every communicator kind, at P = 2 and 3;
  `node-rank-stop` the same on the emulated cluster (3 nodes x 2 ranks) for rank 2 of
  node1: named with its host through the heartbeats;
- `refuse-*`: the MNIST example with one bad value (an environment variable, `--grid
  0x2`, the launcher's `CHAINERMN_TORUS_EXPECT_RANKS=four`, a 24 MiB /dev/shm); lines
  printed: beyond the example's own header (target: the message and at most MPI's abort
  line);
- `tune-short`: `auto` with `tune=on` in an 8-step job (the tuning of its 0.4 MB takes 16
  calls), twice; `tune-choice-str`, `tune-grid-strings`: a tuned file given a field of the wrong
  type, then a job that must name it, ignore it and complete;
- `enospc-manifest`: rank 0's write of checkpoint 4's manifest fails (ENOSPC).

Issue 48's rows (its fault probe's findings; watchdog 3 s, start-up limit 10 s):
- `stop-before-comm`: rank 1 stopped (SIGSTOP) as its process starts, before Python, MPI or
  its communicator: named by the start-up watch within the step limit + 2 s, MPICH's
  segment names removed;
- `watcher-killed`: the node's watchdog process killed (SIGKILL) at rank 0's step-5 line:
  said as a stall of its own, the job ended;
- `batch-too-large`: the MNIST example with `--batchsize 100000000` (ran until killed);
- `loader-eval`: the launcher's `--loader ours --loader-eval` (died in the final
  evaluation): completes with its test accuracy;
- `empty-flag`: `CHAINERMN_TORUS_DOUBLE_BUFFERING=` through the launcher (trained with stale
  gradients): completes, nothing applied;
- `latest-flip`: checkpoints at iterations 2 and 4, latest.json's iteration changed to 12,
  then `--auto-resume`: the damage said, iteration 4 resumed;
- `refuse-keep-mpi-shm` (left MPICH's segment), `refuse-threads-huge` (said 999999999999999
  threads); the `kill` rows name the rank that died (the project's line, item 10), the
  `sigint`/`sigterm` rows end in one line per node (item 12).

Issue 54's rows (a shared node: the attacks run as another user, `nobody`, with the system's
Python alone; watchdog 3 s):
- `forged-verdict`: unauthenticated and wrongly keyed verdicts sent to the node watcher's
  UDP ports mid-training (they ended the job silently): refused and counted, the job
  completes;
- `squat-names`: the watchers' abstract names bound first by the other user, and rank 1
  stopped before its communicator, under the launcher (it went unnoticed): named within
  the limit + 2 s;
- `planted-links`: links to the other user's 0600 file planted as `tl.rank<R>.events` and
  `.json.tmp` in a shared directory (the trace overwrote it): refused, the file untouched,
  the job completes;
- `ckpt-foreign`: a checkpoint directory the other user owns: refused in one line when the
  checkpointer is made, before any training;
- `ckpt-pickle`: the user's checkpoints in such a directory, trusted
  (`CHAINERMN_TORUS_TRUST_CHECKPOINTS=1`), the newest checkpoint's rank file replaced by the
  other user's, holding an object array whose unpickling creates a file (the probe's ran
  `id`): passed over unread (a checkpoint is loaded only from the user's own files),
  nothing run, the checkpoint before resumed;
- `sigterm-ckpt`: SIGTERM to mpiexec between checkpoint 4's manifest and latest.json (the
  next job started from 0 and later deleted 4): the signal's line says 4 is on disk, the
  next job resumes from it;
- `sys-exit`: rank 1's `sys.exit(3)` (a hang without a watchdog, a wrong verdict with one):
  the rank and code named;
- `loader-stop`: one of rank 1's loader processes stopped (named after 10 x the limit as
  "the job waits for none"): named with its pid within the limit + 2 s.
"""


def markdown(results, machine=''):
    lines = [HEADER.format(machine=machine or os.uname().nodename),
             '| fault | communicator | loader | ranks | exit code | time to end (s) | '
             'left in /dev/shm | checkpoint tmp files | processes left | checkpoints '
             '(non-finite files) | timelines complete / cut short | named: rank, host, phase | '
             'lines printed | message shown |',
             '|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|---|']
    for r in results:
        secs = '-' if r['seconds_to_end'] is None else '{:.1f}'.format(r['seconds_to_end'])
        if r.get('seconds_to_message') is not None:
            secs += ' (named {:.1f})'.format(r['seconds_to_message'])
        msg = r['message'] or ('completed (nothing to fail)' if r['completed'] else '')
        tl = r.get('timeline') or {'complete': [], 'cut': []}
        named = '-' if r.get('named_rank') is None else '{}, {}, {}'.format(
            r['named_rank'], r['named_host'], r['named_phase'])
        lines.append('| {} | {} | {} | {} | {} | {} | {} B in {} file(s) | {} | {} | {} ({}) | '
                     '{} / {} | {} | {} | {} |'.format(
                         r['fault'], r['communicator'], r['loader'], r.get('ranks', 2),
                         r['exit_code'], secs,
                         r['shm_bytes'], len(r['shm_files']), len(r['checkpoint_tmp_files']),
                         len(r['processes_left']), r.get('checkpoints', '-'),
                         len(r.get('checkpoints_nonfinite', [])), len(tl['complete']),
                         len(tl['cut']), named, r.get('lines', '-'),
                         msg.replace('|', '/')[:240]))
    tmp = [r for r in results if r.get('tmp_files')]
    lines.append('\nLeft in /tmp (MPICH\'s launcher topology files, `hydra_hwloc_xmlfile_*`, '
                 'new after a row): {} file(s) after {} of {} rows{}.'.format(
                     sum(len(r['tmp_files']) for r in tmp), len(tmp), len(results),
                     ''.join('; {} {} {}: {}'.format(r['fault'], r['communicator'],
                                                     r['loader'], len(r['tmp_files']))
                             for r in tmp)))
    return '\n'.join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == '--inside':
        fault, comm, loader, workdir = argv[1:5]
        print(json.dumps(run_inside(fault, comm, loader, workdir)))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--quick', action='store_true', help='the test tier\'s rows (QUICK, with '
                   'shm and our loader)')
    p.add_argument('--parallel', type=int, default=1, metavar='N',
                   help='rows run side by side (default 1: timings as alone)')
    p.add_argument('--json', default=None)
    p.add_argument('--markdown', default=None)
    p.add_argument('--code', default=None, metavar='DIR',
                   help='run the jobs with the chainermn_torus package of another checkout '
                        '(to compare with an older version)')
    p.add_argument('--only', nargs=3, action='append', metavar=('FAULT', 'COMM', 'LOADER'),
                   help='run only these rows (repeatable)')
    p.add_argument('--render', default=None, metavar='JSON',
                   help='only write --markdown from the results in JSON (no jobs run)')
    args = p.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            data = json.load(f)
        with open(args.markdown, 'w') as f:
            f.write(markdown(data['results'], data.get('machine', '')) + '\n')
        return 0
    why = can_run()
    if why:
        sys.exit('fault_matrix: ' + why)
    if args.code:
        os.environ['FAULT_MATRIX_CODE'] = os.path.abspath(args.code)
    workdir = tempfile.mkdtemp(prefix='fault-matrix-')
    try:
        results = run([tuple(r) for r in args.only] if args.only else scenarios(args.quick),
                      workdir, args.parallel)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    table = markdown(results)
    print(table)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'machine': os.uname().nodename, 'ranks': 2, 'results': results}, f,
                      indent=1)
    if args.markdown:
        with open(args.markdown, 'w') as f:
            f.write(table + '\n')
    bad = [r for r in results if r['shm_bytes'] or r['checkpoint_tmp_files'] or
           r['processes_left'] or r['hung']]
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
