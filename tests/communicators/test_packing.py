import numpy
import pytest

from chainermn_torus.communicators import _packing
from chainermn_torus.algorithms.rsap import put_rounds
from chainermn_torus.algorithms.segments import plan_segments


def layout(sizes, dtype='f'):
    return _packing.Layout([(f'p{i}', (n,), dtype) for i, n in enumerate(sizes)])


@pytest.mark.parametrize('sizes,seg', [([7, 13, 1031, 81, 4099, 1], 100),
                                       ([1] * 50, 8), ([100000, 3, 100000], 4096),
                                       ([5, 70001, 11, 130003, 35], 16384), ([9], 0)])
def test_plan_segments_tiles_the_buffer(sizes, seg):
    lay = layout(sizes)
    plan = plan_segments(lay.offsets, seg)
    assert plan[0][0] == 0 and plan[-1][1] == lay.size
    for (lo, hi, index), nxt in zip(plan, plan[1:] + [(lay.size, None, None)]):
        assert hi == nxt[0] and lo < hi
        assert seg == 0 or hi - lo <= seg
        if index is not None:  # a direct segment lies inside one large array
            assert lay.offsets[index] <= lo and hi <= lay.offsets[index + 1]
            assert sizes[index] >= seg // 4


def test_layout_digest_is_stable_and_sensitive():
    a, b = layout([3, 4]), layout([3, 4])
    assert a == b and a.digest == b.digest and a.size == 7
    assert layout([4, 3]).digest != a.digest
    assert layout([3, 4], 'd').digest != a.digest
    assert a.dtype == numpy.float32 and layout([3, 4], 'd').dtype == numpy.float64
    assert layout([3], 'e').dtype == numpy.float32  # float16 is summed in float32
    assert 'shape=(3,)' in a.describe_difference(layout([5, 4]))


@pytest.mark.parametrize('M', list(range(1, 18)) + [32, 48])
def test_put_rounds_deliver_every_chunk_to_every_position(M):
    held = [{q} for q in range(M)]
    for rnd in put_rounds(M):
        incoming = [set() for _ in range(M)]
        for origin, target, a, b in rnd:
            chunks = set(range(a, b))
            assert chunks <= held[origin], f'position {origin} puts chunks it does not hold'
            assert not chunks & held[target], f'position {target} would receive what it has'
            assert not chunks & incoming[target], 'two puts to the same place in one round'
            incoming[target] |= chunks
        for q in range(M):
            held[q] |= incoming[q]
    assert all(h == set(range(M)) for h in held)
    low = 1 << (M.bit_length() - 1)
    assert len(put_rounds(M)) == (low.bit_length() - 1) + (2 if M > low else 0)


def test_put_window_owns_its_window_and_says_when_used_after_free():
    import numpy
    import pytest
    from mpi4py import MPI
    from chainermn_torus.communicators._packing import Layout, PackedBuffer
    from chainermn_torus.communicators._window import PutWindow
    for passive in (False, True):
        window = PutWindow(MPI.COMM_SELF, 10, numpy.float32, passive=passive)
        buf = PackedBuffer(Layout([('a', (10,), numpy.float32)]), array=window.array,
                           memory=window)
        buf.array[...] = 1.5
        assert window.win != MPI.WIN_NULL
        buf.release()  # frees the window it owns, once
        assert buf.memory is None and buf.array is None
        with pytest.raises(RuntimeError, match='already freed'):
            window.win
        window.free()  # a second free does nothing


_WINDOWS_LEFT = '''
import numpy
import chainermn_torus
import chainermn
from chainermn_torus.process import STATE
comm = chainermn.create_communicator('rsap', shm=False)  # rows of RMA windows
a = numpy.ones(1000, numpy.float32) * comm.rank
comm.mean_array(a)
if comm.rank == 0:  # one writer: mpiexec interleaves the ranks' lines
    print('windows', len(STATE.windows), flush=True)
# no finalize(): the windows are left to the exit
'''


def test_windows_left_at_exit_are_freed_before_mpi_finalize():
    # Left to MPI_Finalize, the MPICH wheel's UCX printed "object ... was not returned to
    # mpool ucp_rkeys" and "destroying inuse region" (6 lines for a float16 job).
    from conftest import run_mpi
    proc = run_mpi(2, ['-c', _WINDOWS_LEFT], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'windows 1\n' in proc.stdout, proc.stdout
    assert 'UCX' not in proc.stderr and 'WARN' not in proc.stderr, proc.stderr
