"""The checkpointer as an extension, one rank in this process (MPI_COMM_SELF): what it
keeps, what it refuses to write, how it falls back, and a failed write's leftovers. The
same across real ranks: tests/extensions/checkpoint/test_checkpoint.py."""
import errno
import json
import os
import socket

import chainer
import numpy
import pytest
from chainer.training import triggers

from chainermn_torus.errors import ConfigError
from chainermn_torus.extensions.checkpoint import MultiNodeCheckpointer, writing
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from tests.extensions.checkpoint.support import checkpointed, comm, trainer


def _run_to(tr, iteration):
    tr.stop_trigger = triggers.IntervalTrigger(iteration, 'iteration')
    tr.run()


def _step_and_save(tr, ck):
    """Three more steps (a trainer runs once), then a checkpoint."""
    for _ in range(3):
        tr.updater.update()
    ck.save(tr)


def _names(directory):
    return sorted(p.name for p in directory.iterdir())


def test_keeps_the_newest_and_writes_a_manifest_naming_each(tmp_path):
    tr, _ = checkpointed(tmp_path, keep=2)
    _run_to(tr, 9)
    assert _names(tmp_path / 'ck') == [
        'latest.json', 'manifest_iter_6.json', 'manifest_iter_9.json',
        'snapshot_iter_6.rank0.npz', 'snapshot_iter_9.rank0.npz']
    manifest = json.loads((tmp_path / 'ck' / 'latest.json').read_text())
    assert (manifest['iteration'], manifest['optimizer'], manifest['batch_per_rank'],
            manifest['learning_rate']) == (9, 'MomentumSGD', 10, ['lr', 0.1])
    assert manifest['data']['examples'] == 60


@pytest.mark.parametrize('keep', [0, 1.5, -1])
def test_keep_must_be_a_count(tmp_path, keep):
    with pytest.raises(ConfigError) as e:
        MultiNodeCheckpointer(comm(), str(tmp_path), keep=keep)
    assert f'keep must be a count >= 1, got {keep!r}' in str(e.value)


def test_a_diverged_state_is_not_written(tmp_path):
    tr, ck = checkpointed(tmp_path)
    _run_to(tr, 3)
    tr.updater.get_optimizer('main').target.predictor.l1.W.array[0, 1] = numpy.nan
    with pytest.raises(CheckpointError) as e:
        ck.save(tr)
    for fact in ('checkpoint 3 not written', 'rank(s) 0', '1 value(s)', 'l1/W',
                 'checkpoint 3 in'):
        assert fact in str(e.value)


def test_a_failed_write_keeps_the_previous_checkpoint_and_leaves_nothing(tmp_path, monkeypatch):
    tr, ck = checkpointed(tmp_path)
    _run_to(tr, 3)
    write = writing.atomic_write

    def full(place, name, writer, *args, **kwargs):
        def half(f):
            f.write(b'\0' * 4096)
            raise OSError(errno.ENOSPC, 'No space left on device')
        return write(place, name, half if name.endswith('.npz') else writer, *args, **kwargs)
    monkeypatch.setattr(writing, 'atomic_write', full)
    with pytest.raises(CheckpointError) as e:
        _step_and_save(tr, ck)
    assert 'rank 0 cannot write checkpoint' in str(e.value)
    assert 'No space left' in str(e.value)
    assert 'checkpoint 3 in' in str(e.value) and 'stays the latest' in str(e.value)
    assert _names(tmp_path / 'ck') == ['latest.json', 'manifest_iter_3.json',
                                       'snapshot_iter_3.rank0.npz']


def test_a_failed_manifest_leaves_the_rank_files_to_the_sweep(tmp_path, monkeypatch):
    tr, ck = checkpointed(tmp_path)
    _run_to(tr, 3)
    write = writing.atomic_write

    def full(place, name, writer, *args, **kwargs):
        if name == 'latest.json':
            raise OSError(errno.ENOSPC, 'No space left on device')
        return write(place, name, writer, *args, **kwargs)
    monkeypatch.setattr(writing, 'atomic_write', full)
    with pytest.raises(CheckpointError) as e:
        _step_and_save(tr, ck)
    assert 'checkpoint 6 not completed' in str(e.value) and 'latest.json' in str(e.value)
    monkeypatch.undo()
    assert json.loads((tmp_path / 'ck' / 'latest.json').read_text())['iteration'] == 3
    assert not (tmp_path / 'ck' / 'manifest_iter_6.json').exists()
    # Its rank file stays with the in-progress marker naming this (live) process: the next
    # job's sweep removes both once the writer is gone (test_sweep), not while it may write.
    marker = f'.writing_iter_6.rank0.{socket.gethostname()}.{os.getpid()}'
    expected = [marker, 'latest.json', 'manifest_iter_3.json', 'snapshot_iter_3.rank0.npz',
                'snapshot_iter_6.rank0.npz']
    assert _names(tmp_path / 'ck') == expected
    MultiNodeCheckpointer(comm(), str(tmp_path / 'ck'))
    assert _names(tmp_path / 'ck') == expected


def test_maybe_resume_falls_back_past_a_damaged_latest(tmp_path, capsys):
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 6)
    latest = tmp_path / 'ck' / 'snapshot_iter_6.rank0.npz'
    latest.write_bytes(latest.read_bytes()[:100])
    again = trainer(tmp_path / 'o2')
    ck = MultiNodeCheckpointer(comm(), str(tmp_path / 'ck'))
    with pytest.raises(CheckpointError) as e:
        ck.resume(again)
    assert 'has 100 bytes' in str(e.value) and '1 older checkpoint(s)' in str(e.value)
    assert ck.maybe_resume(again) == 3
    out = capsys.readouterr().out
    assert 'the latest checkpoint in' in out and 'falling back' in out
    assert again.updater.iteration == 3
    assert MultiNodeCheckpointer(comm(), str(tmp_path / 'empty')).maybe_resume(again) is None


@pytest.mark.parametrize('flip', ['iteration', 'another manifest'])
def test_a_latest_json_whose_iteration_is_not_its_checkpoints_falls_back(tmp_path, capsys,
                                                                        flip):
    # A bit flipped in latest.json's iteration (6 -> 14) named iteration 14 as the resume
    # point while the files of 6 were loaded: now checked against its files and its own
    # manifest, it is damaged, and the newest consistent checkpoint is the one resumed.
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 6)
    path = tmp_path / 'ck' / 'latest.json'
    data = json.loads(path.read_text())
    if flip == 'iteration':
        data['iteration'] = 14
    else:  # the right iteration, other contents than manifest_iter_6.json
        data['written'] = 'at another time'
    path.write_text(json.dumps(data))
    again = trainer(tmp_path / 'o2')
    ck = MultiNodeCheckpointer(comm(), str(tmp_path / 'ck'))
    with pytest.raises(CheckpointError) as e:
        ck.resume(again)
    said = ("latest.json is not a chainermn-torus manifest ('files' is not the 1 rank files "
            "of iteration 14 in rank order (['snapshot_iter_6.rank0.npz']))"
            if flip == 'iteration' else 'latest.json is damaged: it differs from '
            'manifest_iter_6.json, the manifest of iteration 6')
    assert said in str(e.value), str(e.value)
    assert ck.maybe_resume(again) == 6 and again.updater.iteration == 6
    out = capsys.readouterr().out
    assert 'falling back' in out and 'resumed from {} at iteration 6'.format(
        tmp_path / 'ck') in out


def test_another_optimizer_or_data_is_refused(tmp_path):
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 3)
    ck = MultiNodeCheckpointer(comm(), str(tmp_path / 'ck'))
    with pytest.raises(CheckpointError) as e:
        ck.resume(trainer(tmp_path / 'o2', optimizer=chainer.optimizers.Adam()))
    assert 'optimizer MomentumSGD' in str(e.value) and 'trains with Adam' in str(e.value)
    with pytest.raises(CheckpointError) as e:
        ck.resume(trainer(tmp_path / 'o3', seed=1))
    assert str(e.value).count('60 examples in shard order') == 2
