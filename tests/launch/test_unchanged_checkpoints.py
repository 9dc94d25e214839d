"""ChainerMN's own MNIST script (tests/unchanged/chainermn_mnist.py: its scatter_dataset
unseeded, as ChainerMN's example calls it) kept on disk through the launcher (issue 82,
item 8): ``--checkpoint-dir`` and ``--auto-resume`` give it the examples' checkpoints, and
its unseeded shuffle the run's seed (extensions.checkpoint.shard_order), kept beside them, so a
job SIGKILLed and started again goes on bit for bit."""
import os
import signal
import subprocess
import sys
import time

import numpy
import pytest

from chainermn_torus.extensions.checkpoint import shard_order
from chainermn_torus.tools import elastic_node
from conftest import ROOT, job_env, mpiexec_path

MNIST = os.path.join(ROOT, 'tests', 'unchanged', 'chainermn_mnist.py')
KILLED_AT = os.path.join(ROOT, 'tests', 'mpi_workers', 'killed_at.py')


def job(tmp_path, name, options, script, dataset_root, epochs=2, timeout=300):
    """A 2-rank job in a session of its own (killed_at.py ends its process group)."""
    exe = mpiexec_path()
    if exe is None:
        pytest.skip('no mpiexec: run `make setup` (installs the mpich wheel into .venv)')
    out = tmp_path / name
    argv = [exe, '-n', '2', sys.executable, '-m', 'chainermn_torus.run', '--communicator',
            'rsap'] + options + script + [
                MNIST, '--epoch', str(epochs), '--limit', '1200', '--unit', '20', '--seed', '0',
                '--out', str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=job_env(2, {'CHAINER_DATASET_ROOT': dataset_root}), cwd=ROOT,
                            start_new_session=True)
    started = time.time()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f'the job did not end in {timeout} s (a hang)')
    finally:  # a launcher SIGKILLed with its job leaves MPICH's topology file in /tmp
        elastic_node.remove_dead_topology(started, run='(none)')
    return proc.returncode, stdout, stderr, out


def params(out):
    with numpy.load(str(out / 'model_final.npz')) as f:
        return {k: f[k].copy() for k in f.files}


@pytest.mark.example
def test_an_unseeded_chainermn_script_resumes_bit_for_bit_after_a_sigkill(tmp_path,
                                                                          dataset_root):
    ckpt = tmp_path / 'ckpt'
    keep = ['--checkpoint-dir', str(ckpt), '--checkpoint-interval', '4', '--auto-resume']
    # Killed, every process at once, right after the checkpoint of iteration 8 (of 12).
    code, stdout, stderr, _ = job(tmp_path, 'killed', keep, [KILLED_AT, '8'], dataset_root)
    assert code != 0, stdout[-2000:]
    kept = (ckpt / shard_order.DRAWS_FILE).read_text().strip()
    assert f"scatter_dataset(shuffle=True) without a seed -> seed {kept}: the run's, new, kept " \
        f'in {ckpt / shard_order.DRAWS_FILE}' in stdout, stdout[-3000:]
    assert oct((ckpt / shard_order.DRAWS_FILE).stat().st_mode & 0o777) == '0o600'
    # Started again as it was: the same order, from the checkpoint of iteration 8.
    code, stdout, stderr, resumed = job(tmp_path, 'killed', keep, [], dataset_root)
    assert code == 0, stderr[-3000:]
    assert f"seed {kept}: the run's, kept in" in stdout, stdout[-3000:]
    assert 'iteration 8' in stdout + stderr, (stdout + stderr)[-3000:]
    # The run that was never killed, its shuffle given the same seed.
    code, stdout, stderr, whole = job(tmp_path, 'whole', ['--shuffle-seed', kept], [],
                                      dataset_root)
    assert code == 0, stderr[-3000:]
    a, b = params(resumed), params(whole)
    assert sorted(a) == sorted(b)
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)
    # Without the seed kept, the resume is refused, naming the two orders (the file gone).
    os.unlink(str(ckpt / shard_order.DRAWS_FILE))
    code, stdout, stderr, _ = job(tmp_path, 'killed', keep, [], dataset_root, epochs=3)
    assert code != 0 and 'in shard order' in stderr, stderr[-2000:]


@pytest.mark.slow
def test_a_draws_file_that_is_not_a_seed_is_refused_in_one_line(tmp_path, dataset_root):
    ckpt = tmp_path / 'ckpt'
    ckpt.mkdir(mode=0o700)
    (ckpt / shard_order.DRAWS_FILE).write_text('seven\n')
    code, stdout, stderr, _ = job(tmp_path, 'bad', ['--checkpoint-dir', str(ckpt)], [],
                                  dataset_root, epochs=1, timeout=120)
    assert code != 0 and 'Traceback' not in stderr, stderr[-2000:]
    assert "holds no seed (an integer below 2**32), got 'seven'; remove it" in stderr, \
        stderr[-2000:]
