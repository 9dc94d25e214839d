"""Loading at the same and at another rank count, in one process
(extensions.checkpoint.resharding): the iterator's place, the replicas' agreement, and a
resume that ends bit for bit where an uninterrupted run does."""
import json
import shutil

import numpy
import pytest
from chainer.training import triggers

from chainermn_torus.extensions.checkpoint import MultiNodeCheckpointer, files, resharding
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from tests.extensions.checkpoint.support import checkpointed, comm, params, trainer


@pytest.mark.parametrize('stored, new_len, sizes, batch, expected', [
    # half-way through a shard of 30 -> half-way through a shard of 60
    ({'epoch': 1, 'current_position': 15, 'order': numpy.arange(30)}, 60, (2, 1), 10,
     {'current_position': 30, 'epoch': 1, 'is_new_epoch': False,
      'previous_epoch_detail': 1 + 20 / 60}),
    # no order kept: the old shard's length from the rank counts
    ({'epoch': 0, 'current_position': 10}, 20, (1, 2), 5,
     {'current_position': 5, 'epoch': 0, 'is_new_epoch': False,
      'previous_epoch_detail': 0.0}),
    # the very start
    ({'epoch': 0, 'current_position': 0, 'is_new_epoch': True}, 20, (2, 3), 5,
     {'current_position': 0, 'epoch': 0, 'is_new_epoch': True,
      'previous_epoch_detail': -1.0}),
    # never past the shard's end
    ({'epoch': 2, 'current_position': 29, 'order': numpy.arange(30)}, 10, (1, 3), 2,
     {'current_position': 9, 'epoch': 2, 'is_new_epoch': False,
      'previous_epoch_detail': 2 + 7 / 10}),
])
def test_place_in_epoch(stored, new_len, sizes, batch, expected):
    assert resharding.place_in_epoch(stored, new_len, sizes[0], sizes[1], batch) == \
        pytest.approx(expected)


def test_replica_groups_name_the_first_array_that_differs():
    same = {0: (1, {'a': 1, 'b': 2}), 1: (1, {'a': 1, 'b': 2})}
    assert resharding.replica_groups(same) == ({1: [0, 1]}, None)
    apart = dict(same)
    apart[2] = (7, {'a': 1, 'b': 3})
    assert resharding.replica_groups(apart) == ({1: [0, 1], 7: [2]}, 'b')


def _run_to(tr, iteration):
    tr.stop_trigger = triggers.IntervalTrigger(iteration, 'iteration')
    tr.run()


def test_resume_at_the_same_rank_count_equals_the_uninterrupted_run(tmp_path):
    whole, _ = checkpointed(tmp_path, name='whole')
    _run_to(whole, 12)
    first, _ = checkpointed(tmp_path, name='ck')
    _run_to(first, 6)
    again, ck = checkpointed(tmp_path, name='ck')
    numpy.random.seed(99)  # whatever happened since: the checkpoint restores the stream
    assert ck.resume(again) == 6
    _run_to(again, 12)
    a, b = params(whole), params(again)
    assert all(numpy.array_equal(a[k], b[k]) for k in a)


def _as_two_ranks(ck, iteration, second=None):
    """Rewrite checkpoint ``iteration`` as if two ranks had written it: rank 1's file a copy
    of rank 0's (a replica), or ``second`` (arrays)."""
    manifest = json.loads((ck / files.MANIFEST).read_text())
    src = ck / manifest['files'][0]
    dst = ck / f'snapshot_iter_{iteration}.rank1.npz'
    if second is None:
        shutil.copy(str(src), str(dst))
    else:
        with open(str(dst), 'wb') as f:
            numpy.savez(f, **second)
    manifest['ranks'] = 2
    manifest['files'].append(dst.name)
    manifest['checks'][dst.name] = {'bytes': dst.stat().st_size, 'crc32': files.crc32(str(dst))}
    manifest['batch_per_rank'] = 5
    for name in (files.MANIFEST, f'manifest_iter_{iteration}.json'):
        (ck / name).write_text(json.dumps(manifest))


def test_another_rank_count_loads_the_replica_and_keeps_the_place(tmp_path):
    first, _ = checkpointed(tmp_path)
    _run_to(first, 3)
    _as_two_ranks(tmp_path / 'ck', 3)
    again = trainer(tmp_path / 'o2', batch=10)
    ck = MultiNodeCheckpointer(comm(), str(tmp_path / 'ck'))
    assert ck.resume(again) == 3
    a, b = params(first), params(again)
    assert all(numpy.array_equal(a[k], b[k]) for k in a)
    it = again.updater.get_iterator('main')
    # 2 x 5 per rank kept as 10 on one rank; 3 x 5 of a stored shard of 30 -> 30 of 60
    assert it.batch_size == 10 and it.current_position == 30 and it.epoch == 0


def test_replicas_that_differ_are_refused(tmp_path):
    first, _ = checkpointed(tmp_path)
    _run_to(first, 3)
    ck = tmp_path / 'ck'
    with numpy.load(str(ck / 'snapshot_iter_3.rank0.npz')) as z:
        other = {k: z[k].copy() for k in z.files}
    other['updater/model:main/predictor/l2/b'] += 1
    _as_two_ranks(ck, 3, second=other)
    with pytest.raises(CheckpointError) as e:
        MultiNodeCheckpointer(comm(), str(ck)).resume(trainer(tmp_path / 'o2'))
    assert 'ranks 0 / 1 agree' in str(e.value)
    assert 'updater/model:main/predictor/l2/b' in str(e.value)
