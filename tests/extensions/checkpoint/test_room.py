"""Room before a checkpoint is written, one process (extensions.checkpoint.room)."""
import io

import numpy
import pytest

from chainermn_torus.extensions.checkpoint import room


@pytest.mark.parametrize('arrays', [
    {'a': numpy.zeros(10, numpy.float32)},
    {'updater/model:main/predictor/l1/W': numpy.ones((300, 784), numpy.float32),
     'x' * 200: numpy.zeros((1,) * 30, numpy.int64), 'scalar': numpy.asarray(3.0)},
    {f'k{i}': numpy.arange(i, dtype=numpy.float64) for i in range(50)},
], ids=['one', 'long-names-and-shapes', 'many'])
def test_npz_bytes_is_an_upper_bound_close_to_what_savez_writes(arrays):
    f = io.BytesIO()
    numpy.savez(f, **arrays)
    written = len(f.getvalue())
    estimate = room.npz_bytes(arrays)
    assert written <= estimate <= written + 600 * len(arrays), (written, estimate)


def test_host_need_counts_this_hosts_ranks_on_the_same_device():
    peers = [('a', 1, 4096), ('a', 1, 8192), ('a', 2, 4096), ('b', 1, 4096)]
    assert room.host_need(peers, 'a', 1, 4096) == 12288 + 4096  # metadata: at least a block
    big = [('a', 1, 10 ** 6)] * 3
    assert room.host_need(big, 'a', 1, 4096) == 3 * 10 ** 6 + 3 * 10 ** 4


@pytest.mark.parametrize('complete, keep, expected', [
    ([12, 8, 4], 2, [4, 8]),   # keep=2: the new one and the newest old one stay
    ([12, 8, 4], 3, [4]),
    ([12], 1, []),             # the newest complete one stays whatever keep is
    ([12, 8], 1, [8]),
    ([], 2, []),
])
def test_removable_first(complete, keep, expected):
    assert room.removable_first(complete, keep) == expected
