"""Issue 72 with real ranks and a second, unprivileged user (tests/other_user.py): the
checkpoint and output directories are judged component by component at start and written
only through the descriptor that was judged. Each attack of the shared-node probe is played
against the MNIST example, unchanged: a link one level up, a directory swapped for a link
beside the running job (before its first checkpoint and during it), FIFOs, links and
another user's files at the names of its outputs. The user's other experiment is compared
byte for byte after each."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from conftest import ROOT, job_env, mpiexec_path, run_mpi
from tests.other_user import OTHER_UID, Beside, as_other, needs_root, shared_dir  # NOQA

EXAMPLE = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')
pytestmark = [pytest.mark.example, pytest.mark.slow,
              pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                                 reason='Debian package dataset-fashion-mnist is not installed '
                                        '(make setup installs it)')]
# 2000 images over 2 ranks, batch 100: 10 iterations an epoch; checkpoints every 4. 1000
# units: a rank file of 21 MB, so that its write takes long enough to be swapped during.
BASE = ['--limit', '2000', '--unit', '1000', '--checkpoint-interval', '4']


def argv(out, ck, *extra):
    return [EXAMPLE, '--out', str(out), '--checkpoint-dir', str(ck)] + BASE + list(extra)


def tree(where):
    """{name: (mode, bytes)} of a directory: the other experiment, compared byte for byte."""
    out = {}
    for name in sorted(os.listdir(str(where))):
        path = os.path.join(str(where), name)
        st = os.lstat(path)
        with open(path, 'rb') as f:
            out[name] = (st.st_mode, f.read())
    return out


@pytest.fixture
def other_experiment(tmp_path):
    """The user's other experiment: checkpoints 5 and 10, 0700, the user's own."""
    ck = tmp_path / 'v' / 'ck_other'
    ck.mkdir(parents=True, mode=0o700)
    for it in (5, 10):
        (ck / f'snapshot_iter_{it}.rank0.npz').write_bytes(os.urandom(4096))
        (ck / f'manifest_iter_{it}.json').write_text(json.dumps({'iteration': it}))
    (ck / 'latest.json').write_text(json.dumps({'iteration': 10}))
    return ck, tree(ck)


@needs_root
def test_another_users_link_one_level_up_is_refused_before_anything_is_written(
        tmp_path, shared_dir, other_experiment):
    theirs, before = other_experiment
    pl = os.path.join(shared_dir, 'pl')
    as_other(os.symlink, str(theirs.parent), pl)               # ln -s /tmp/v /tmp/shared/pl
    proc = run_mpi(2, argv(tmp_path / 'out', os.path.join(pl, 'ck_other'), '--epoch', '1'),
                   timeout=180)
    assert proc.returncode != 0 and 'test accuracy' not in proc.stdout
    line = next(line for line in proc.stderr.splitlines() if 'refusing checkpoints in' in line)
    assert 'rank(s) 0, 1' in line and \
        f'its component {pl} is a symbolic link to {str(theirs.parent)!r}' in line \
        and 'owned by nobody (uid 65534)' in line, line
    assert tree(theirs) == before


def _swap(project, target):
    """As the other user: ``ck`` renamed away and a link to ``target`` put in its place."""
    os.rename(os.path.join(project, 'ck'), os.path.join(project, 'ck.moved'))
    os.symlink(target, os.path.join(project, 'ck'))
    return 'swapped'


def _when(ck, timing, stop):
    """Wait for the moment to swap: ``before`` the first checkpoint (0.25 s after the
    start-up probe changed the directory), or ``during`` its first write (its in-progress
    marker there). True when it came before ``stop``."""
    first = os.stat(str(ck)).st_mtime_ns
    while not stop.is_set():
        if timing == 'before' and os.stat(str(ck)).st_mtime_ns != first:
            time.sleep(0.25)
            return True
        if timing == 'during' and any(n.startswith('.writing_iter_')
                                      for n in os.listdir(str(ck))):
            return True
        time.sleep(0.0005)
    return False


@needs_root
@pytest.mark.parametrize('timing', ['before', 'during'])
def test_a_directory_swapped_for_a_link_beside_the_job_sends_nothing_elsewhere(
        tmp_path, shared_dir, other_experiment, timing):
    theirs, before = other_experiment
    project = os.path.join(shared_dir, 'proj')
    as_other(os.mkdir, project)
    as_other(os.chmod, project, 0o777)  # a project folder another user owns, 0777
    ck = os.path.join(project, 'ck')
    if timing == 'before':  # once: not trusted, the folder is refused at start, in one line
        proc = run_mpi(2, argv(tmp_path / 'o0', ck, '--epoch', '1'), timeout=180)
        assert proc.returncode != 0 and 'test accuracy' not in proc.stdout
        assert f'its component {project} is a directory owned by nobody (uid 65534)' \
            in proc.stderr and '--trust-checkpoint-dir' in proc.stderr, proc.stderr[-2000:]
        assert not os.path.lexists(ck)
    # Trusted by the user; the other user swaps the directory for a link beside the job.
    os.mkdir(ck, 0o700)
    swapper = Beside(_swap, project, str(theirs))
    cmd = [mpiexec_path(), '-n', '2', sys.executable] + argv(
        tmp_path / 'out', ck, '--epoch', '2', '--trust-checkpoint-dir')
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=job_env(2), cwd=ROOT)
    stop = threading.Event()
    try:
        in_time = _when(ck, timing, stop)
        swapper.go()
        assert swapper.result() == 'swapped'
        out, err = job.communicate(timeout=240)
    finally:
        stop.set()
        if job.poll() is None:
            job.kill()
    assert in_time, 'the job ended before the swap'
    assert job.returncode == 0, err[-3000:]
    assert tree(theirs) == before  # the other experiment: byte for byte as it was
    moved = os.path.join(project, 'ck.moved')
    assert json.loads(open(os.path.join(moved, 'latest.json')).read())['iteration'] == 20
    assert sorted(n for n in os.listdir(moved) if n.startswith('manifest_iter_')) == [
        'manifest_iter_16.json', 'manifest_iter_20.json']
    said = [line for line in (out + err).splitlines() if 'was renamed or replaced after' in line]
    assert len(said) == 1 and 'seen by rank(s) 0, 1' in said[0] and ck in said[0], said


@needs_root
def test_the_users_own_link_on_the_way_works_at_start_and_at_auto_resume(tmp_path):
    real = tmp_path / 'lustre'
    real.mkdir(mode=0o700)
    os.symlink(str(real), str(tmp_path / 'scratch'))        # ~/scratch -> /lustre/$USER
    ck = tmp_path / 'scratch' / 'ck'
    first = run_mpi(2, argv(tmp_path / 'o1', ck, '--epoch', '1'), timeout=180)
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads((real / 'ck' / 'latest.json').read_text())['iteration'] == 8
    again = run_mpi(2, argv(tmp_path / 'o2', ck, '--epoch', '2', '--auto-resume'),
                    timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f'resumed from {ck} at iteration 8' in again.stdout + again.stderr
    assert json.loads((real / 'ck' / 'latest.json').read_text())['iteration'] == 20


def _plant(kind, path):
    if kind == 'fifo':
        os.mkfifo(path)
    elif kind == 'link':
        os.symlink('/tmp/victim-of-the-link', path)
    else:
        with open(path, 'w') as f:
            f.write('theirs')
    return kind


@needs_root
@pytest.mark.parametrize('kind, name', [('fifo', 'summary.json'), ('fifo', 'model_final.npz'),
                                        ('link', 'log'), ('file', 'summary.json')])
def test_another_users_fifo_link_or_file_at_an_output_name_is_refused_at_start(
        tmp_path, shared_dir, kind, name):
    as_other(_plant, kind, os.path.join(shared_dir, name))
    proc = run_mpi(2, [EXAMPLE, '--out', shared_dir, '--limit', '2000', '--unit', '50',
                       '--epoch', '1'], timeout=120)  # a FIFO once hung it: no hang here
    assert proc.returncode != 0 and 'test accuracy' not in proc.stdout
    what = {'fifo': 'a FIFO', 'link': 'a symbolic link', 'file': 'a file'}[kind]
    lines = [line for line in proc.stderr.splitlines() if 'refusing to write' in line]
    there = f'{os.path.join(shared_dir, name)}: {what} owned by nobody (uid 65534) is already there'
    assert lines and there in lines[0] and 'rank(s) 0, 1' in lines[0], proc.stderr[-2000:]
    st = os.lstat(os.path.join(shared_dir, name))
    assert st.st_uid == OTHER_UID  # left as it was: not opened, not replaced, no mode change
    assert not os.path.lexists('/tmp/victim-of-the-link')
