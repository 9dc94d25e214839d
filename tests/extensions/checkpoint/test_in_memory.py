"""Snapshots in node memory (extensions.checkpoint.in_memory, issue 73): written every K
iterations with every rank's small state on every node, two generations kept, a damaged one
passed over, and a restore on the survivors of a lost node equal bit for bit to
--auto-resume from a disk checkpoint of the same iteration."""
import json
import os
import re

import chainer
import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from chainermn_torus.extensions.checkpoint import in_memory
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from conftest import ROOT, run_mpi
from tests.extensions.checkpoint.support import comm, params, trainer

WORKER = os.path.join(ROOT, 'tests', 'mpi_workers', 'in_memory_restore.py')


class _Lost(chainer.training.Extension):
    """The job ends on an error at the last iteration, as when a node is lost."""
    priority = chainer.training.PRIORITY_READER - 10  # after the snapshot

    def __call__(self, trainer):
        if trainer.updater.iteration == 12:
            raise RuntimeError('a node was lost')


def _snapshotted(tmp_path, keep=2):
    tr = trainer(tmp_path / 'out')
    snap = in_memory.MemorySnapshot(comm(), str(tmp_path / 'mem'), keep=keep)
    tr.extend(snap, trigger=(3, 'iteration'))
    tr.extend(_Lost())
    with pytest.raises(RuntimeError, match='a node was lost'):
        tr.run()  # 2 epochs of 6 iterations: generations 3, 6, 9, 12
    return tr, snap


def test_a_job_that_ends_well_leaves_no_snapshot(tmp_path):
    tr = trainer(tmp_path / 'out')
    snap = in_memory.MemorySnapshot(comm(), str(tmp_path / 'mem'))
    tr.extend(snap, trigger=(3, 'iteration'))
    tr.run()
    assert os.listdir(str(tmp_path / 'mem')) == []
    again = trainer(tmp_path / 'o2')
    fresh = in_memory.MemorySnapshot(comm(), str(tmp_path / 'mem'), token=snap.token)
    assert fresh.restore(again, missing_ok=True) is None and again.updater.iteration == 0


def test_generations_are_kept_and_each_is_complete(tmp_path):
    tr, snap = _snapshotted(tmp_path)
    assert snap.generations() == [12, 9]
    gen = tmp_path / 'mem' / os.path.basename(snap.directory) / 'gen_12'
    assert sorted(os.listdir(str(gen))) == ['manifest.json', 'rank0.npz', 'replica.npz']
    manifest = json.loads((gen / 'manifest.json').read_text())
    assert in_memory.manifest_problem(manifest, 12) is None
    assert manifest['ranks'] == 1 and manifest['checks']['replica.npz']['bytes'] == \
        (gen / 'replica.npz').stat().st_size
    assert 'not 11' in in_memory.manifest_problem(manifest, 11)
    assert "'ranks' is 0" in in_memory.manifest_problem(dict(manifest, ranks=0), 12)
    again = trainer(tmp_path / 'o2')
    assert in_memory.MemorySnapshot(comm(), str(tmp_path / 'mem'),
                                    token=snap.token).restore(again) == 12
    assert all((params(again)[k] == v).all() for k, v in params(tr).items())


def test_a_damaged_generation_is_passed_over_and_said(tmp_path, capsys):
    _, snap = _snapshotted(tmp_path)
    run = tmp_path / 'mem' / os.path.basename(snap.directory)
    replica = run / 'gen_12' / 'replica.npz'
    data = bytearray(replica.read_bytes())
    data[len(data) // 2] ^= 0xFF
    replica.write_bytes(bytes(data))
    again = trainer(tmp_path / 'o2')
    assert in_memory.MemorySnapshot(comm(), str(tmp_path / 'mem'),
                                    token=snap.token).restore(again) == 9
    out = capsys.readouterr().out
    assert 'at iteration 9' in out and 'generation 12' in out and 'CRC-32' in out, out
    (run / 'gen_9' / 'manifest.json').write_text('{}')
    with pytest.raises(CheckpointError) as e:
        in_memory.MemorySnapshot(comm(), str(tmp_path / 'mem'), token=snap.token).restore(
            trainer(tmp_path / 'o3'))
    assert 'no snapshot in node memory is complete on every rank' in str(e.value)
    assert '\n' not in str(e.value)


@pytest.mark.slow  # 4 ranks: the full tier
@pytest.mark.parametrize('lost', [0, 1], ids=['first-node', 'last-node'])
def test_survivors_restore_from_memory_bit_for_bit_as_from_disk(tmp_path, lost):
    proc = run_mpi(4, [WORKER, str(tmp_path), str(lost)], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The two ranks' lines may share one (their prints interleave).
    oks = re.findall(r'OK rank (\d) max abs difference ([0-9.e-]+) over', proc.stdout)
    assert sorted(oks) == [('0', '0.0'), ('1', '0.0')], proc.stdout
    assert 'resumed from node memory' in proc.stdout and 'written by 4 ranks, on 2' in \
        proc.stdout, proc.stdout
    assert not os.path.exists(str(tmp_path / f'node{lost}'))


@pytest.mark.example
@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed '
                           '(make setup installs it)')
def test_the_examples_options_keep_snapshots_and_a_job_that_ends_well_leaves_none(tmp_path):
    example = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')
    memory = tmp_path / 'mem'
    common = [example, '--epoch', '1', '--limit', '2000', '--unit', '50', '--out',
              str(tmp_path / 'out'), '--memory-snapshots', '4', '--memory-dir', str(memory)]
    proc = run_mpi(2, common + ['--restore-from-memory'], timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f'no snapshot in node memory ({memory}) yet' in proc.stdout, proc.stdout
    assert os.listdir(str(memory)) == []  # written at 4 and 8, removed at the good end
    bad = run_mpi(2, [example, '--restore-from-memory', '--out', str(tmp_path / 'o2')],
                  timeout=60)
    assert bad.returncode != 0 and '--restore-from-memory needs --memory-snapshots' in \
        bad.stderr, bad.stderr[-2000:]
