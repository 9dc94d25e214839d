"""The emulated cluster (scripts/emulate_cluster.sh): namespaces, shaped links, node-aware grids.

Needs root and network namespaces; skipped, with the reason, where either is missing.
"""
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, netns_refused, assert_ok

SCRIPT = os.path.join(ROOT, 'scripts', 'emulate_cluster.sh')
WORKER = os.path.join(ROOT, 'tests', 'mpi_workers', 'check_cluster.py')


def sh(*args, timeout=300, check=False, env=None):
    proc = subprocess.run(['bash', SCRIPT] + list(args), capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, **(env or {})), cwd=ROOT)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _can_emulate():
    if os.geteuid() != 0:
        return 'needs root (network namespaces, tc)'
    if not shutil.which('ip') or not shutil.which('tc'):
        return 'needs iproute2 (ip, tc) (apt-get install iproute2)'
    return netns_refused()


REASON = _can_emulate()
needs_cluster = pytest.mark.skipif(REASON is not None, reason=str(REASON))
pytestmark = pytest.mark.root  # namespaces and tbf links: full tier only


def link_bytes():
    out = sh('status', check=True).stdout
    return sum(int(a) + int(b) for a, b in re.findall(r'sent (\d+) received (\d+)', out))


@needs_cluster
@pytest.mark.parametrize('nodes,ranks', [(2, 2), (4, 2)])  # 3 x 2: the time budget
def test_node_aware_grids_and_means_across_emulated_nodes(nodes, ranks):
    sh('down')
    try:
        sh('up', str(nodes), '1gbit', check=True)
        before = link_bytes()
        proc = sh('run', str(ranks), os.path.join(ROOT, '.venv', 'bin', 'python'), WORKER,
                  str(nodes), str(ranks), env={'OMP_NUM_THREADS': '1'})
        assert_ok(proc, nodes * ranks)
        hosts = set(re.findall(r'OK rank \d+ (node\d+)', proc.stdout))
        assert hosts == {f'node{n}' for n in range(nodes)}
        # Six all-reduces of 1.2 MB crossed the links (the column phase and the tails).
        assert link_bytes() - before > 1_000_000
    finally:
        sh('down')
    assert 'cmt-n' not in subprocess.run(['ip', 'netns', 'list'], capture_output=True,
                                         text=True).stdout


@needs_cluster
def test_bad_requests_are_refused_and_down_is_idempotent():
    sh('down', check=True)
    assert sh('down').returncode == 0
    proc = sh('run', '2', 'true')
    assert proc.returncode == 2 and 'no cluster is up' in proc.stderr
    proc = sh('up', '99')
    assert proc.returncode == 2 and 'at most 32 nodes' in proc.stderr
    proc = sh('up', 'two')
    assert proc.returncode == 2 and "node count >= 1, got 'two'" in proc.stderr
    try:
        sh('up', '1', check=True)
        proc = sh('up', '1')
        assert proc.returncode == 2 and 'already up' in proc.stderr
    finally:
        sh('down', check=True)


@pytest.mark.skipif(not shutil.which('setpriv') or os.geteuid() != 0,
                    reason='needs setpriv and root to drop to another user')
def test_without_root_it_says_so():
    # The script comes on stdin, read by this (root) process: the checkout may sit in a
    # directory the unprivileged user cannot enter (a `mktemp -d`, mode 0700).
    with open(SCRIPT) as script:
        proc = subprocess.run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups',
                               'bash', '-s', 'up', '2'], stdin=script, capture_output=True,
                              text=True, timeout=60, cwd='/')
    assert proc.returncode == 2 and 'needs root' in proc.stderr and 'uid 65534' in proc.stderr
