"""Another user of the node against a job (the attacks of a probe, run again): forged
heartbeats, squatted watcher names, links planted under the job's predictable file names.
The job runs as this user (root in CI), the attacker as uid 65534 (nobody) with Python's
standard library only. Each attack is shown to have happened, and the job unharmed."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from conftest import ROOT, job_env, mpiexec_path, worker
from test_faults import _Bounded, _started_job, WATCHDOG_S, _STOP_AT_START

sys.path.insert(0, os.path.join(ROOT, 'scripts'))
from fault_matrix import FORGE, OTHER_UID as OTHER, PLANT, SQUAT, as_other  # noqa: E402

pytestmark = [
    pytest.mark.root, pytest.mark.mpi,
    pytest.mark.skipif(os.getuid() != 0, reason='running code as another user needs root'),
    pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                       reason='Debian package dataset-fashion-mnist is not installed')]


def _udp_ports(pid):
    """The watcher's ports once it joined the job (its sockets off the job's networks
    closed): what ``ss -ulpn`` or /proc/net/udp shows anyone."""
    proc = psutil.Process(pid)
    deadline, ports = time.time() + 20, []
    while time.time() < deadline:
        conns = proc.net_connections(kind='udp') if hasattr(proc, 'net_connections') else \
            proc.connections(kind='udp')
        now = sorted({c.laddr.port for c in conns})
        if now and now == ports:
            return ports
        ports = now
        time.sleep(0.5)
    return ports


def test_forged_verdicts_from_another_user_are_refused_counted_and_the_job_goes_on():
    # Before: one unauthenticated datagram ({"kind": "verdict"}) to the watcher's port made it
    # SIGKILL the job's ranks 0.3 s later, with no line.
    env = job_env(2)
    env.update(CHAINERMN_TORUS_WATCHDOG=str(WATCHDOG_S), PAUSE_S='4')
    with _Bounded(_started_job([mpiexec_path(), '-n', '2', sys.executable,
                                worker('fault_train.py'), 'pause', '1', '3'], env)) as proc:
        watcher = _watcher_of(proc.pid)  # the ranks have their communicator
        ports = _udp_ports(watcher.pid)
        assert ports, 'the watcher has no UDP socket'
        sent = as_other(FORGE, *ports)
        out, err = proc.communicate(timeout=90)
    assert 'sent {}'.format(6 * len(ports)) in sent, sent
    assert proc.returncode == 0 and out.count('OK rank') == 2, err[-3000:]
    first = [l for l in err.splitlines() if 'refused a datagram at' in l]
    assert len(first) == 1 and re.search(r'from 127\.0\.0\.1:\d+ \(no valid MAC of this job\)',
                                         first[0]), err[-3000:]
    total = [l for l in err.splitlines() if 'datagram(s) in all were refused' in l]
    assert len(total) == 1 and total[0].startswith(
        'chainermn_torus watchdog: {} datagram(s)'.format(6 * len(ports))), err[-3000:]


def _watcher_of(pid):
    deadline = time.time() + 20
    while time.time() < deadline:
        for p in psutil.Process(pid).children(recursive=True):
            try:
                if 'chainermn_torus.runtime.watch.node_watch' in ' '.join(p.cmdline()):
                    return p
            except psutil.Error:
                continue
        time.sleep(0.1)
    pytest.fail('no node watcher')


def _squatter(seconds):
    proc = as_other(SQUAT, seconds, wait=False)
    time.sleep(0.3)  # its interpreter up before the job's launcher
    return proc


def _squatted(squatter):
    squatter.kill()
    out = squatter.communicate()[0]
    assert re.search(r'squatted \d+_\d+ 6', out), out  # every name taken first
    return out


def test_squatted_names_neither_hide_a_rank_stopped_at_start_up_nor_its_line(tmp_path):
    # Before: another user binding the start-up watchers' names first made a rank stopped
    # before its communicator go unnoticed (a hang to the outer limit, mpich_shm_* left).
    wrapper = tmp_path / 'stop_first.sh'
    wrapper.write_text(_STOP_AT_START)
    wrapper.chmod(0o755)
    env = job_env(2)
    env.update(CHAINERMN_TORUS_WATCHDOG=str(WATCHDOG_S), CHAINERMN_TORUS_WATCHDOG_STARTUP='30')
    squatter = _squatter(60)
    try:
        start = time.time()
        proc = subprocess.run([mpiexec_path(), '-n', '2', str(wrapper), sys.executable,
                               worker('fault_train.py'), 'none', '1', '5'],
                              capture_output=True, text=True, timeout=120, env=env)
        elapsed = time.time() - start
    finally:
        _squatted(squatter)
    said = [l for l in proc.stderr.splitlines() if l.startswith('chainermn_torus watchdog')]
    assert len(said) == 1, proc.stderr[-3000:]
    assert re.match(r'chainermn_torus watchdog: rank 1 \(.*, pid \d+\) is stopped \(process '
                    r'state T', said[0]), said
    assert elapsed < WATCHDOG_S + 10, elapsed  # the step limit, not the start-up limit


def test_a_squatted_ending_name_does_not_hide_a_killed_ranks_line():
    # Before: squatting the name that says "ranks ended on purpose" removed the line naming
    # rank 1's death by SIGKILL.
    env = job_env(2)
    env.update(CHAINERMN_TORUS_WATCHDOG='60')
    squatter = _squatter(60)
    try:
        proc = subprocess.run([mpiexec_path(), '-n', '2', sys.executable,
                               worker('fault_train.py'), 'kill', '1', '5'],
                              capture_output=True, text=True, timeout=120, env=env)
    finally:
        _squatted(squatter)
    died = [l for l in proc.stderr.splitlines() if ' died' in l and 'chainermn_torus' in l]
    assert len(died) == 1, proc.stderr[-3000:]
    assert died[0].startswith('chainermn_torus: rank 1 (') and 'SIGKILL' in died[0], died


def test_links_planted_under_the_timelines_names_write_nothing_through_them():
    # Before: --timeline SHARED/tl followed a link planted as tl.rank0.events and overwrote
    # the other user's 0600 file with the trace.
    shared = tempfile.mkdtemp(prefix='cmtorus-shared-')
    try:
        os.chmod(shared, 0o1777)  # as /tmp: everyone may create, only owners remove
        victim = os.path.join(shared, 'victim')
        assert 'planted' in as_other(PLANT, victim, os.path.join(shared, 'tl'))
        env = job_env(2)
        env['CHAINERMN_TORUS_TIMELINE'] = os.path.join(shared, 'tl')
        proc = subprocess.run([mpiexec_path(), '-n', '2', sys.executable,
                               worker('fault_train.py'), 'none', '1', '5'],
                              capture_output=True, text=True, timeout=180, env=env)
        with open(victim) as f:
            assert f.read() == 'precious'
        assert os.stat(victim).st_uid == OTHER
        refused = [l for l in proc.stderr.splitlines() if 'refusing to write' in l]
        assert refused and all('a symbolic link owned by ' in l and '(uid 65534)' in l
                               for l in refused), proc.stderr[-3000:]
        assert proc.stdout.count('OK rank') == 2, proc.stderr[-3000:]  # training unharmed
    finally:
        shutil.rmtree(shared, ignore_errors=True)
