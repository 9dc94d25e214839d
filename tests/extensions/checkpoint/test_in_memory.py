"""Snapshots in node memory (extensions.checkpoint.in_memory, issue 73): written every K
iterations with every rank's small state on every node, two generations kept, a damaged one
passed over, and a restore on the survivors of a lost node equal bit for bit to
--auto-resume from a disk checkpoint of the same iteration."""
import json
import os

import pytest

from chainermn_torus.extensions.checkpoint import in_memory
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from conftest import ROOT, run_mpi
from tests.extensions.checkpoint.support import comm, params, trainer

WORKER = os.path.join(ROOT, 'tests', 'mpi_workers', 'in_memory_restore.py')


def _snapshotted(tmp_path, keep=2):
    tr = trainer(tmp_path / 'out')
    snap = in_memory.MemorySnapshot(comm(), str(tmp_path / 'mem'), keep=keep)
    tr.extend(snap, trigger=(3, 'iteration'))
    tr.run()  # 2 epochs of 6 iterations: generations 3, 6, 9, 12
    return tr, snap


def test_generations_are_kept_and_each_is_complete(tmp_path):
    tr, snap = _snapshotted(tmp_path)
    assert snap.generations() == [12, 9]
    gen = tmp_path / 'mem' / 'gen_12'
    assert sorted(os.listdir(str(gen))) == ['manifest.json', 'rank0.npz', 'replica.npz']
    manifest = json.loads((gen / 'manifest.json').read_text())
    assert in_memory.manifest_problem(manifest, 12) is None
    assert manifest['ranks'] == 1 and manifest['checks']['replica.npz']['bytes'] == \
        (gen / 'replica.npz').stat().st_size
    assert 'not 11' in in_memory.manifest_problem(manifest, 11)
    assert "'ranks' is 0" in in_memory.manifest_problem(dict(manifest, ranks=0), 12)
    again = trainer(tmp_path / 'o2')
    assert in_memory.MemorySnapshot(comm(), str(tmp_path / 'mem')).restore(again) == 12
    assert all((params(again)[k] == v).all() for k, v in params(tr).items())


def test_a_damaged_generation_is_passed_over_and_said(tmp_path, capsys):
    _snapshotted(tmp_path)
    replica = tmp_path / 'mem' / 'gen_12' / 'replica.npz'
    data = bytearray(replica.read_bytes())
    data[len(data) // 2] ^= 0xFF
    replica.write_bytes(bytes(data))
    again = trainer(tmp_path / 'o2')
    assert in_memory.MemorySnapshot(comm(), str(tmp_path / 'mem')).restore(again) == 9
    out = capsys.readouterr().out
    assert 'at iteration 9' in out and 'generation 12' in out and 'CRC-32' in out, out
    (tmp_path / 'mem' / 'gen_9' / 'manifest.json').write_text('{}')
    with pytest.raises(CheckpointError) as e:
        in_memory.MemorySnapshot(comm(), str(tmp_path / 'mem')).restore(trainer(tmp_path / 'o3'))
    assert 'no snapshot in node memory is complete on every rank' in str(e.value)
    assert '\n' not in str(e.value)


@pytest.mark.slow  # 4 ranks: the full tier
@pytest.mark.parametrize('lost', [0, 1], ids=['first-node', 'last-node'])
def test_survivors_restore_from_memory_bit_for_bit_as_from_disk(tmp_path, lost):
    proc = run_mpi(4, [WORKER, str(tmp_path), str(lost)], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    oks = [l for l in proc.stdout.splitlines() if l.startswith('OK rank')]
    assert len(oks) == 2 and all('max abs difference 0.0' in l for l in oks), proc.stdout
    assert 'resumed from node memory' in proc.stdout and 'written by 4 ranks, on 2' in \
        proc.stdout, proc.stdout
    assert not os.path.exists(str(tmp_path / 'node{}'.format(lost)))
