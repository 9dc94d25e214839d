"""No hangs: a rank that raises, is killed, or stops ends the whole job within a bounded time.

Real training (Fashion-MNIST, rsap, the multi-node optimizer) on 2 and 4 ranks; rank 1 faults
at step 5. The time from the fault to the end of mpiexec (every rank gone) is printed.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from conftest import ranks, run_mpi, worker

pytestmark = pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                                reason='Debian package dataset-fashion-mnist is not installed '
                                       '(make setup installs it)')
WATCHDOG_S = 3


def run_fault(mode, nprocs, env=None):
    proc = run_mpi(nprocs, [worker('fault_train.py'), mode, '1', '5'], timeout=180, env=env)
    end = time.time()
    match = re.search(r'FAULT (\d+\.\d+)', proc.stdout)
    assert match, proc.stdout[-3000:] + proc.stderr[-3000:]
    elapsed = end - float(match.group(1))
    print(f'{mode} on {nprocs} ranks: last rank gone {elapsed:.2f} s after the fault')
    assert proc.returncode != 0 and 'OK rank' not in proc.stdout
    return proc, elapsed


@pytest.mark.parametrize('nprocs', ranks([2, 3], fast=[]))
def test_exception_inside_backward_with_overlap_ends_the_job(nprocs):
    # The other ranks' threads are inside the first bucket's collectives, waiting for rank 1.
    proc, elapsed = run_fault('raise-backward', nprocs, env={'OVERLAP': '1'})
    assert elapsed < 30
    assert 'RuntimeError: injected fault in backward on rank 1' in proc.stderr
    assert 'Uncaught exception on rank 1' in proc.stdout + proc.stderr


@pytest.mark.parametrize('nprocs', ranks([2, 4]))
def test_exception_on_one_rank_ends_every_rank_naming_it(nprocs):
    proc, elapsed = run_fault('raise', nprocs)
    assert elapsed < 30
    assert 'RuntimeError: injected fault on rank 1 at step 5' in proc.stderr
    assert 'Uncaught exception on rank 1' in proc.stdout + proc.stderr


# At P = 2 a rank killed is the fault matrix's kill rows too (every communicator, root).
# kill-forked: the rank had forked a child that lives on (a fork-based iterator's worker).
@pytest.mark.slow  # full tier: a rank's death; the fast tier's is test_exception_on_one_rank
@pytest.mark.parametrize('nprocs, watch, mode', [
    (2, True, 'kill'), (4, False, 'kill'), (2, False, 'kill-forked')])
def test_killed_rank_ends_the_job(nprocs, watch, mode):
    env = {'CHAINERMN_TORUS_WATCHDOG': '60'} if watch else None
    proc, elapsed = run_fault(mode, nprocs, env=env)
    assert elapsed < 30
    # The project names the rank, its host, the signal and, with a watchdog, the phase (the
    # only line that named a process was MPI's, with another rank's pid).
    died = [ln for ln in proc.stderr.splitlines() if ' died' in ln and 'chainermn_torus' in ln]
    assert len(died) == 1, proc.stderr[-3000:]  # the ranks ended after it say nothing
    assert died[0].startswith(f'chainermn_torus: rank 1 ({os.uname().nodename}, pid ')
    assert 'killed by signal 9 (SIGKILL: ' in died[0], died
    assert ('died between steps 4 and 5' if watch else '--watchdog SECONDS') in died[0], died
    # The killed rank cannot speak; the launcher names it and the signal, each in its words:
    # MPICH's Hydra "BAD TERMINATION ... EXIT CODE: 9", Intel MPI's Hydra "BAD TERMINATION
    # ... KILLED BY SIGNAL: 9", Open MPI's PRRTE "... exited on signal 9 (Killed)".
    out = proc.stdout + proc.stderr
    assert re.search(r'BAD TERMINATION[\s\S]*(EXIT CODE: 9|SIGNAL: 9)|exited on\s+signal 9',
                     out), out[-2000:]


@pytest.mark.slow  # waits for the watchdog's limit; 2 ranks only (the full tier's 10 minutes)
@pytest.mark.parametrize('nprocs', [2])
def test_rank_that_stops_is_caught_by_the_watchdog(nprocs):
    proc, elapsed = run_fault('hang', nprocs, env={'CHAINERMN_TORUS_WATCHDOG': str(WATCHDOG_S)})
    assert WATCHDOG_S <= elapsed < WATCHDOG_S + 30
    # The node's watcher sees rank 0 waiting in the all-reduce of step 5 and rank 1 in no
    # call at all, asleep between steps 4 and 5: rank 1 is named, with its host.
    assert re.search(r'chainermn_torus watchdog: the job waits for rank 1 on \S+, outside '
                     r'communication, blocked \(sleeping[^;]*between steps 4 and 5[^;]*; '
                     r'rank 0 \(\S+\) waits in multi_node_mean_grad', proc.stderr), \
        proc.stderr[-3000:]
    assert 'limit 3 s per step or evaluation batch, set by CHAINERMN_TORUS_WATCHDOG' in \
        proc.stderr, proc.stderr[-3000:]  # the variable gave it: the verdict names it
    assert proc.stderr.count('chainermn_torus watchdog:') == 1, proc.stderr[-3000:]
    assert ' died' not in proc.stderr, proc.stderr[-3000:]  # ended on purpose: said once


@pytest.mark.slow  # waits twice the limit between two steps
def test_watchdog_does_not_count_a_pause_between_steps():
    # Every rank spends 3 x the limit between two steps (an evaluation, a checkpoint): the
    # limit between steps is OUTSIDE_FACTOR x the limit, so the job ends normally. It is
    # also the healthy run under the watchdog: 20 steps under a 1 s limit, nothing said
    # (and the fault matrix's eval-long row, a 12 s evaluation under 2 s).
    from chainermn_torus.runtime.watch.watchdog import OUTSIDE_FACTOR
    assert OUTSIDE_FACTOR > 3
    proc = run_mpi(2, [worker('fault_train.py'), 'pause', '1', '5'], timeout=180,
                   env={'CHAINERMN_TORUS_WATCHDOG': '1', 'PAUSE_S': '3'})
    assert proc.returncode == 0 and proc.stdout.count('OK rank') == 2, proc.stderr[-3000:]
    assert 'watchdog' not in proc.stderr


def test_watchdog_bad_value():
    from chainermn_torus.process import STATE
    from chainermn_torus.runtime.watch import watchdog
    with pytest.raises(ValueError, match='number of seconds >= 1'):
        watchdog.Watchdog(0)
    os.environ[watchdog.WATCHDOG_ENV] = 'soon'
    STATE.settings = None  # read again: this is a job of its own
    try:
        with pytest.raises(ValueError, match="CHAINERMN_TORUS_WATCHDOG must be a number"):
            watchdog.start(None)
    finally:
        del os.environ[watchdog.WATCHDOG_ENV]


@pytest.mark.slow
@pytest.mark.parametrize('mode', ['term'])
def test_timeline_is_written_whole_when_the_job_ends_abnormally(mode, tmp_path):
    # SIGTERM writes the timeline before the process goes (atexit never runs after a
    # signal). The abort hook's whole file after an exception: tests/runtime/test_timeline.py's
    # test_timelines_survive_an_abort_and_kill_9[raise].
    import json
    prefix = tmp_path / 'tl'
    proc, elapsed = run_fault(mode, 2, env={'CHAINERMN_TORUS_TIMELINE': str(prefix)})
    assert elapsed < 30
    path = tmp_path / 'tl.rank1.json'
    assert path.exists(), (sorted(p.name for p in tmp_path.iterdir()), proc.stderr[-2000:])
    events = json.loads(path.read_text())['traceEvents']
    assert any(e.get('name') == 'forward_backward' for e in events)
    # A process torn down mid-write (the launcher's kill after the abort) can leave an
    # unfinished PREFIX.rankR.json.tmp next to the whole file: `timeline merge` reads only
    # the whole files and names a lone .tmp as such (tests/runtime/test_timeline.py).


def _started_job(argv, env, cwd=None):
    """``argv`` under mpiexec in its own session, its output piped. SIGINT at its default:
    a shell's background job (a lane of `make test`) inherits it ignored, and ranks that
    ignore Ctrl-C would wait for the job's end."""
    def default_sigint():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=cwd, start_new_session=True,
                            preexec_fn=default_sigint)


class _Bounded:
    """Within the ``with``, the job is killed (its whole session) after ``seconds``: a line
    waited for on its output that never comes ends the test instead of hanging it."""

    def __init__(self, proc, seconds=90):
        self.proc = proc
        self.timer = threading.Timer(seconds, self.kill)

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def __enter__(self):
        self.timer.start()
        return self.proc

    def __exit__(self, *exc):
        self.timer.cancel()
        self.kill()
        self.proc.wait()


def _until_training(proc):
    """Read the job's output up to its TRAINING line; the job's own words if it never comes."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if 'TRAINING' in line:  # the launcher may interleave the ranks' partial lines
            return
    proc.wait()
    pytest.fail(f'no TRAINING line; exit {proc.returncode}; stdout {seen[-20:]!r}; '
                f'stderr: {proc.stderr.read()[-3000:]}')


def _ours(text):
    """The lines of ``text`` that are the package's or Python's (a traceback), not the
    launcher's or MPI's (Hydra's lines, Open MPI's MPI_ABORT banner)."""
    return [line for line in text.splitlines() if line.startswith(
        ('chainermn_torus', 'Traceback', '  File "', 'KeyboardInterrupt'))]


@pytest.mark.slow  # full tier: the fast tier keeps one job per kind of ending
def test_sigterm_to_one_rank_ends_the_job_in_one_line():
    # 60 lines before: a traceback and a banner.
    proc, elapsed = run_fault('term', 2)
    assert elapsed < 30
    said = _ours(proc.stderr)
    assert len(said) == 1 and said[0].startswith(
        f'chainermn_torus: rank 1 ({os.uname().nodename}): SIGTERM (a batch time limit, scancel, '
        'or the launcher '
        'ending the job) received; the job ends'), proc.stderr
    assert 'Traceback' not in proc.stderr


@pytest.mark.slow  # full tier: a job ended from outside (the fast tier's are ended from inside)
@pytest.mark.parametrize('signame', ['SIGTERM', 'SIGINT'])
def test_a_signal_to_mpiexec_ends_the_job_in_one_line_per_node(signame):
    # A batch system's cancel or time limit (SIGTERM), Ctrl-C (SIGINT): mpiexec passes it to
    # every rank. It was a traceback and a banner per rank: 101-129 lines for 2 ranks.
    from conftest import job_env, mpiexec_path
    with _Bounded(_started_job([mpiexec_path(), '-n', '2', sys.executable,
                                worker('fault_train.py'), 'loop', '1', '3'],
                               job_env(2))) as proc:
        _until_training(proc)
        proc.send_signal(getattr(signal, signame))
        out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and 'OK rank' not in out
    said = _ours(err)
    assert len(said) == 1, err  # one node here
    assert re.match(rf'chainermn_torus: rank \d \({re.escape(os.uname().nodename)}\): {signame} '
                    r'\(.*\) received; the job ends; '
                    r'no checkpoint is written by this job$', said[0]), said
    assert 'Traceback' not in err


@pytest.mark.slow
def test_sigterm_ends_a_rank_blocked_in_an_object_collective():
    # mpi4py's object collectives hold the GIL while they wait: no Python handler or thread
    # of the rank can run. The watcher process ends it; mpiexec then ends the job.
    from conftest import ROOT, mpiexec_path
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
    with _Bounded(_started_job([mpiexec_path(), '-n', '2', sys.executable,
                                worker('blocked_in_object_collective.py')], env,
                               cwd=ROOT)) as proc:
        pids = {}
        for line in proc.stdout:  # the two ranks' lines may interleave
            for rank, pid in re.findall(r'PID (\d) (\d+)', line):
                pids[int(rank)] = int(pid)
            if len(pids) == 2:
                break
        time.sleep(1.0)  # rank 1 is in the collective by now
        sent = time.time()
        os.kill(pids[1], signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    elapsed = time.time() - sent
    assert proc.returncode != 0 and 'OK rank' not in out
    assert 'rank 1 (' in err and 'SIGTERM 3 s ago and the process is still there' in err, \
        err[-2000:]
    assert elapsed < 30, elapsed


@pytest.mark.slow
def test_double_buffering_with_the_finite_check_stops_in_its_words_before_a_checkpoint(
        tmp_path):
    # float16 means that overflow in step 6, still unapplied when checkpoint 6 is written:
    # the finite check the next update would make is made at the checkpoint (it used to
    # stop there as the checkpoint's NaN refusal, advising --check-finite, which was on).
    proc = run_mpi(2, [worker('fault_job.py'), 'mean-overflow', 'shm', 'serial',
                       str(tmp_path)], timeout=180,
                   env={'FAULT_DOUBLE_BUFFERING': '1', 'FAULT_BOOST_AFTER': '5',
                        'CHAINERMN_TORUS_QUIET': '1'})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    said = [line for line in out.splitlines() if line.startswith('chainermn_torus:')]
    assert len(said) == 1 and said[0].startswith(
        'chainermn_torus: NaN/Inf in the averaged gradients of the previous step (double '
        'buffering): 1 value(s), the first in /predictor/l1/W'), out[-2000:]
    assert 'checkpoint 6 not written' not in out and 'Traceback' not in out, out[-2000:]


_STOP_AT_START = '''#!/bin/bash
# rank 1 stops as soon as its process exists: before Python, MPI or a communicator
if [ "${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-}}" = 1 ]; then kill -STOP $$; fi
exec "$@"
'''


@pytest.mark.slow  # full tier: jobs ended from their start-up (fast: a job's own end)
@pytest.mark.parametrize('nprocs, how', [(2, 'variable'), (3, 'variable'), (2, 'launcher'),
                                         (2, 'flag over variable')])
def test_a_rank_stopped_before_its_communicator_is_named_and_the_job_ends(tmp_path, nprocs,
                                                                        how):
    # The watchdog starts with the communicator (it needs MPI): a rank stopped before it left
    # the others in MPI_Init with no line until the batch limit. Watched from the launcher's
    # start on (its --watchdog or the variable, as the job scripts run it; the import starts
    # nothing), the stopped rank is named within the step limit, as a stopped process is in
    # any phase, and the job ends.
    from conftest import job_env, mpiexec_path
    wrapper = tmp_path / 'stop_first.sh'
    wrapper.write_text(_STOP_AT_START)
    wrapper.chmod(0o755)
    env = job_env(nprocs)
    argv = [sys.executable, worker('fault_train.py'), 'none', '1', '5']
    if how == 'variable':
        env.update(CHAINERMN_TORUS_WATCHDOG=str(WATCHDOG_S),
                   CHAINERMN_TORUS_WATCHDOG_STARTUP='30')
        argv[1:1] = ['-m', 'chainermn_torus.run']
    else:
        argv[1:1] = ['-m', 'chainermn_torus.run', '--watchdog', str(WATCHDOG_S)]
    if how == 'flag over variable':  # the job script's variable, the command line's flag
        env['CHAINERMN_TORUS_WATCHDOG'] = '60'
    start = time.time()
    proc = subprocess.run([mpiexec_path(), '-n', str(nprocs), str(wrapper)] + argv,
                          capture_output=True, text=True, timeout=120, env=env)
    elapsed = time.time() - start
    assert proc.returncode != 0 and 'OK rank' not in proc.stdout
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith('chainermn_torus watchdog')]
    assert len(said) == 1, proc.stderr[-3000:]
    assert re.match(rf'chainermn_torus watchdog: rank 1 \({re.escape(os.uname().nodename)}, pid '
                    r'\d+\) is stopped \(process '
                    r'state T.*at start-up, before its communicator was made; rank '
                    r'0', said[0]), said
    if nprocs == 3:
        assert 'rank 0, rank 2 of ' in said[0], said
    assert elapsed < WATCHDOG_S + 10, elapsed  # the step limit, not the start-up limit


@pytest.mark.slow  # waits for the watchdog's limit
def test_the_launchers_watchdog_flag_wins_over_the_variable_mid_step():
    # config's one precedence, flag over variable: with CHAINERMN_TORUS_WATCHDOG=60 in the
    # job's environment and --watchdog 3 on the launcher's command line, the watchdog ran
    # with 60 (it took the variable before the launcher's flag).
    from conftest import job_env, mpiexec_path
    env = job_env(2)
    env['CHAINERMN_TORUS_WATCHDOG'] = '60'
    argv = [sys.executable, '-m', 'chainermn_torus.run', '--watchdog', str(WATCHDOG_S),
            worker('fault_train.py'), 'hang', '1', '5']
    proc = subprocess.run([mpiexec_path(), '-n', '2'] + argv, capture_output=True, text=True,
                          timeout=120, env=env)
    match = re.search(r'FAULT (\d+\.\d+)', proc.stdout)
    assert match, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert time.time() - float(match.group(1)) < WATCHDOG_S + 30
    # the verdict names the flag that gave the limit, not the variable it won over
    assert 'limit 3 s per step or evaluation batch, set by --watchdog' in proc.stderr, \
        proc.stderr[-3000:]
    assert re.search(r'chainermn_torus watchdog: the job waits for rank 1 on \S+',
                     proc.stderr), proc.stderr[-3000:]


@pytest.mark.slow  # full tier: the fast tier keeps one job per kind of ending
def test_a_watchdog_process_that_dies_is_a_stall_named_and_the_job_ends():
    # The node's watcher killed: nothing watched the node's ranks any more, and a rank
    # stopped afterwards held the job until the batch limit, with no line.
    from conftest import job_env, mpiexec_path
    env = job_env(2)
    env['CHAINERMN_TORUS_WATCHDOG'] = str(WATCHDOG_S)
    with _Bounded(_started_job([mpiexec_path(), '-n', '2', sys.executable,
                                worker('fault_train.py'), 'loop', '1', '3'], env)) as proc:
        _until_training(proc)
        import psutil
        ranks = psutil.Process(proc.pid).children(recursive=True)

        def command(p):
            try:
                return ' '.join(p.cmdline())
            except psutil.Error:
                return ''
        watcher = [p for p in ranks if 'chainermn_torus.runtime.watch.node_watch' in command(p)]
        assert len(watcher) == 1, [p.cmdline() for p in ranks]
        leader = watcher[0].ppid()  # the node's board is named after it
        killed = time.time()
        watcher[0].kill()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and 'OK rank' not in out
    said = [line for line in err.splitlines() if line.startswith('chainermn_torus')]
    assert len(said) == 1, err[-3000:]  # the ranks it ended say nothing of their own
    assert said[0].startswith("chainermn_torus watchdog: the watchdog's process "
                              f"on {os.uname().nodename} (pid {watcher[0].pid}) "
                              'was killed by signal 9 (SIGKILL'), said
    assert time.time() - killed < 10
    # the board the watcher would have removed, removed
    assert not [n for n in os.listdir('/dev/shm') if f'_{leader}_watch_' in n]


def test_a_lost_watchdogs_ranks_leave_no_checkpoint_temporaries(tmp_path):
    # The rank's own watcher ends the node's ranks when the watchdog process is gone; a rank
    # ended halfway through a checkpoint left its temporary file (the watchdog process, which
    # removes them otherwise, is the one gone). A dead writer's file goes, a live one's stays;
    # and who was writing is read once the ended ranks are gone, not before: a rank that began
    # its checkpoint while the node's ranks were being ended once left its file in CI.
    from chainermn_torus.watchers import processes, rank_watch, temporaries
    dead = subprocess.Popen([sys.executable, '-c', 'pass'])
    dead.wait()
    ending = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.4)'])
    live = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])
    try:
        names = {}
        for pid in (dead.pid, ending.pid, live.pid):
            path = os.path.join(str(tmp_path), f'snapshot_iter_6.rank{pid}.npz')
            names[pid] = os.path.basename(temporaries.tmp_name(path)).replace(
                f'.{os.getpid()}', f'.{pid}')
            open(os.path.join(str(tmp_path), names[pid]), 'w').close()
        read_at = []

        st = os.stat(str(tmp_path))
        record = temporaries.writing_record(str(tmp_path), (st.st_dev, st.st_ino))

        def board():  # what the board says when read; the ending rank there once it ended
            read_at.append(processes.state(ending.pid))
            return [(pid, record) for pid in (dead.pid, ending.pid, live.pid)]

        # A record whose directory is not the one at the path now (renamed and replaced
        # after the writer judged it) removes nothing there.
        swapped = temporaries.writing_record(str(tmp_path), (st.st_dev, st.st_ino + 1))
        assert temporaries.remove_temporary(swapped, dead.pid) == []
        assert len(os.listdir(str(tmp_path))) == 3
        rank_watch.remove_temporaries([dead.pid, ending.pid], board, wait_s=10)
        assert read_at in (['Z'], ['X']), read_at
        assert sorted(os.listdir(str(tmp_path))) == [names[live.pid]]
    finally:
        for p in (ending, live):
            p.kill()
            p.wait()


@pytest.mark.slow  # full tier: exception_on_one_rank is the fast tier's
@pytest.mark.parametrize('watch', [False, True])
def test_sys_exit_on_one_rank_ends_the_job_naming_the_rank_and_its_code(watch):
    # Before: without a watchdog the job hung (rank 1 in MPI_Finalize, the others in their
    # next collective); with one it ended blamed on "a deadlock, or a message MPI lost".
    env = {'CHAINERMN_TORUS_WATCHDOG': str(WATCHDOG_S)} if watch else None
    proc, elapsed = run_fault('exit', 2, env=env)
    assert elapsed < 15
    said = _ours(proc.stderr)
    assert len(said) == 1, proc.stderr[-3000:]
    assert re.match(rf'chainermn_torus: rank 1 \({re.escape(os.uname().nodename)}, pid \d+\) '
                    r'called sys\.exit\(3\); the job '
                    r'ends with exit code 3$',
                    said[0]), said


@pytest.mark.root
@pytest.mark.skipif(os.getuid() != 0 or not __import__('shutil').which('unshare'),
                    reason='a private /tmp (a mount namespace) needs root and unshare(1)')
@pytest.mark.parametrize('mode', ['raise', 'exit'])
def test_an_aborted_job_leaves_nothing_in_tmp(mode):
    # MPICH's mpiexec writes the node's hwloc topology to /tmp/hydra_hwloc_xmlfile_* and
    # removes it at a normal end only: every aborted job left one (68 on one machine). The
    # job runs with a /tmp of its own, so whatever is left there is its.
    from conftest import ROOT, job_env, mpiexec_path
    # The checkout (a CI clone may be under /tmp) stays reachable at its path: the real /tmp
    # is kept aside, a fresh tmpfs takes its place, and the checkout's top folder is bound
    # back into it (and left out of the listing).
    top = ROOT.split('/')[2] if ROOT.startswith('/tmp/') else ''
    keep = tempfile.mkdtemp(prefix='cmtorus-keep-', dir='/var/tmp')
    script = ('mount --bind /tmp "$KEEP" && mount -t tmpfs -o size=16m tmpfs /tmp && '
              'if [ -n "$TOP" ]; then mkdir /tmp/"$TOP" && '
              'mount --bind "$KEEP/$TOP" /tmp/"$TOP"; fi && "$@"; code=$?; '
              'echo "LEFT IN TMP:" $(ls -A /tmp | grep -vx "${TOP:-.}"); exit $code')
    try:
        proc = subprocess.run(['unshare', '-m', '--propagation', 'private', 'bash', '-c',
                               script, 'job', mpiexec_path(), '-n', '2', sys.executable,
                               worker('fault_train.py'), mode, '1', '3'],
                              capture_output=True, text=True, timeout=120,
                              env=dict(job_env(2), KEEP=keep, TOP=top))
    finally:
        os.rmdir(keep)
    assert proc.returncode != 0 and 'FAULT' in proc.stdout, proc.stderr[-2000:]
    left = proc.stdout.split('LEFT IN TMP:')[-1].split()
    assert 'LEFT IN TMP:' in proc.stdout and left == [], (left, proc.stderr[-2000:])
