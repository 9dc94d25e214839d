"""A node lost mid-job on the emulated cluster (scripts/elastic_cases.py, issue 73): 3 nodes
x 2 ranks of the MNIST example under ``chainermn-torus elastic``, one node killed in the
all-reduce, in a snapshot's write and in the evaluation; the job trains to the end on the
2 nodes left, equal bit for bit to a disk checkpoint of the restored iteration resumed on
4 ranks, and leaves nothing. The other cases (every node, frozen nodes, a second loss, the
timing) are ``make test-elastic``'s.

Needs root and network namespaces; skipped, with the reason, where either is missing.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from conftest import ROOT, netns_refused

SCRIPT = os.path.join(ROOT, 'scripts', 'elastic_cases.py')


def _why_not():
    if os.geteuid() != 0:
        return 'needs root (network namespaces, tc)'
    if not shutil.which('ip') or not shutil.which('tc'):
        return 'needs iproute2 (ip, tc) (apt-get install iproute2)'
    if not os.path.isdir(DEFAULT_MNIST_DIR):
        return 'Debian package dataset-fashion-mnist is not installed (make setup installs it)'
    return netns_refused()


WHY_NOT = _why_not()
pytestmark = [pytest.mark.root, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]


@pytest.fixture(scope='module')
def cases(tmp_path_factory):
    out = tmp_path_factory.mktemp('elastic')
    report = out / 'cases.json'
    proc = subprocess.run([sys.executable, SCRIPT, '--cases', 'quick', '--json', str(report)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return {c['case']: c for c in json.loads(report.read_text())['cases']}, proc


@pytest.mark.parametrize('case', ['kill-last-allreduce', 'kill-first-snapshot',
                                  'kill-middle-evaluation'])
def test_the_survivors_train_to_the_end_bit_for_bit_and_leave_nothing(cases, case):
    by_case, proc = cases
    r = by_case[case]
    assert r['exit_code'] == 0, r['tail']
    # Restored from node memory: the newest snapshot before the loss (every 10 iterations;
    # the all-reduce's loss at iteration 25, the others at 30 and 40).
    assert r['iteration'] == {'allreduce': 20}.get(case.split('-')[-1], 30), r
    assert r['max_abs_difference'] == 0.0, r
    # MPICH's topology files in /tmp (r['tmp_left']) are reported, as the fault matrix does.
    assert r['processes_left'] == [] and r['shm_left'] == [], r
    assert len(r['recoveries']) == 1 and r['lost'] == [
        '198.18.0.{}'.format(r['lost_nodes'][0] + 1)], r
    assert r['ok'] and proc.returncode == 0, proc.stdout[-2000:]
