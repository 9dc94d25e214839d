"""Two jobs of one user on one node, both keeping snapshots in node memory (issue 82, P1):
the MNIST example, as a user runs it twice. Before, both used one directory
(``cmtorus-snapshots-<uid>-nojob-<host>``): the first to end removed the other's snapshots,
which then died at its next one, and its restart began at iteration 0."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from chainermn_torus.extensions.checkpoint import snapshot_place
from chainermn_torus.tools import elastic_node
from conftest import ROOT, job_env, mpiexec_path

EXAMPLE = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')
KILLED_AT = os.path.join(ROOT, 'tests', 'mpi_workers', 'killed_at.py')


def start(out, epochs, wrapper=(), env=None, extra=()):
    exe = mpiexec_path()
    if exe is None:
        pytest.skip('no mpiexec: run `make setup` (installs the mpich wheel into .venv)')
    argv = [exe, '-n', '2', sys.executable] + list(wrapper) + [
        EXAMPLE, '--epoch', str(epochs), '--limit', '1200', '--unit', '20',
        '--memory-snapshots', '5', '--out', str(out)] + list(extra)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=job_env(2, env), cwd=ROOT, start_new_session=True)


def finish(proc, timeout=300):
    started = time.time() - timeout  # since before the job's start
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f'a job did not end in {timeout} s')
    finally:  # a launcher SIGKILLed with its job leaves MPICH's topology file in /tmp
        elastic_node.remove_dead_topology(started, run='(none)')


@pytest.mark.example
@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed '
                           '(make setup installs it)')
def test_two_jobs_of_one_user_keep_their_own_snapshots(tmp_path):
    ended = tmp_path / 'short-ended'
    # The long job: 4 epochs of 6 iterations; at iteration 20 (its snapshot written) it
    # waits for the short job's end, then every process of it is SIGKILLed.
    long_job = start(tmp_path / 'long', 4, [KILLED_AT, '20'],
                     env={'KILLED_AT_AFTER': str(ended)})
    short = start(tmp_path / 'short', 1)
    out, err = finish(short)
    assert short.returncode == 0, err[-3000:]
    ended.write_text('')
    finish(long_job)
    assert long_job.returncode != 0  # killed
    token = snapshot_place.read_token(str(tmp_path / 'long'))
    assert snapshot_place.read_token(str(tmp_path / 'short')) != token
    # The short job's good end removed its own run's snapshots only.
    kept = [p for p, _, _ in snapshot_place.kept() if token in os.path.basename(p)]
    assert len(kept) == 1, snapshot_place.kept()
    # Started again: from node memory, at its newest generation, and to the end.
    again = start(tmp_path / 'long', 4, extra=['--restore-from-memory'])
    out, err = finish(again)
    assert again.returncode == 0, err[-3000:]
    m = re.search(r'resumed from node memory \(\S+\) at iteration (\d+)', out + err)
    assert m and int(m.group(1)) == 20, (out + err)[-3000:]
    assert not [p for p, _, _ in snapshot_place.kept() if token in os.path.basename(p)]
