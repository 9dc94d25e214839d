"""Another user of the node against a job, beyond the fault matrix's rows of such attacks
(scripts/fault_matrix.py, ISSUE54: forged verdicts, squatted start-up names, planted links,
another user's checkpoints): the name that says a node's ranks are ended on purpose, bound
first by the other user (uid 65534, nobody, with Python's standard library only), must not
hide a killed rank's line. The job runs as this user (root in CI)."""
import os
import re
import subprocess
import sys
import time

import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from conftest import ROOT, job_env, mpiexec_path, worker

sys.path.insert(0, os.path.join(ROOT, 'scripts'))
from fault_matrix import SQUAT, as_other  # noqa: E402

pytestmark = [
    pytest.mark.root, pytest.mark.mpi,
    pytest.mark.skipif(os.getuid() != 0, reason='running code as another user needs root'),
    pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                       reason='Debian package dataset-fashion-mnist is not installed')]


def test_a_squatted_ending_name_does_not_hide_a_killed_ranks_line():
    # Before: squatting the name that says "ranks ended on purpose" removed the line naming
    # rank 1's death by SIGKILL.
    env = job_env(2)
    env.update(CHAINERMN_TORUS_WATCHDOG='60')
    squatter = as_other(SQUAT, 60, wait=False)
    time.sleep(0.3)  # its interpreter up before the job's launcher
    try:
        proc = subprocess.run([mpiexec_path(), '-n', '2', sys.executable,
                               worker('fault_train.py'), 'kill', '1', '5'],
                              capture_output=True, text=True, timeout=120, env=env)
    finally:
        squatter.kill()
    out = squatter.communicate()[0]
    assert re.search(r'squatted \d+_\d+ 6', out), out  # every name taken first
    died = [ln for ln in proc.stderr.splitlines() if ' died' in ln and 'chainermn_torus' in ln]
    assert len(died) == 1, proc.stderr[-3000:]
    assert died[0].startswith('chainermn_torus: rank 1 (') and 'SIGKILL' in died[0], died
