"""numba is optional (runtime.cpu.jit): the numpy fallbacks give the numba kernels' bits, a job
runs and says so at start-up, and what has no fallback stops with a message naming numba."""

import chainer
import numpy
import pytest

from chainermn_torus.communicators import _dtypes, _half, _packing, _shm
from chainermn_torus.optimizers import fpenv, fuse
from chainermn_torus.runtime.cpu import jit
from conftest import assert_ok, pythonpath, run_mpi, worker

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason='compares the fallbacks with numba, not installed here '
                                       '(make setup installs it)')


def _halves(rng, n):
    # Finite float16 values over the whole range: subnormals, large ones whose sums overflow
    # to infinity, signed zeros; and infinities.
    bits = rng.randint(0, 0x7c00, size=n).astype(numpy.uint16)
    bits[rng.rand(n) < 0.5] |= 0x8000
    h = bits.view(numpy.float16)
    h[::97] = numpy.inf
    return h


def _bfloat16s(rng, n):
    # Finite bfloat16 values over float32's whole range (sums past it overflow to infinity),
    # signed zeros, subnormals; and infinities.
    bits = rng.randint(0, 0x7f80, size=n).astype(numpy.uint16)
    bits[rng.rand(n) < 0.5] |= 0x8000
    bits[::97] = 0x7f80
    return bits.view(_dtypes.bfloat16())


@pytest.mark.parametrize('kind', ['float16', 'bfloat16'])
@pytest.mark.parametrize('n, nblocks', [(1, 1), (7, 2), (1001, 3), (4099, 5)])
def test_half_block_sums_in_numpy_have_the_kernels_bits(n, nblocks, kind):
    from chainermn_torus.communicators import _half_kernels
    rng = numpy.random.RandomState(n + nblocks)
    blocks = (_halves if kind == 'float16' else _bfloat16s)(rng, n * nblocks)
    out_jit, out_np = numpy.empty(n, blocks.dtype), numpy.empty(n, blocks.dtype)
    _half_kernels.sum_blocks(out_jit.view(numpy.uint16), blocks.view(numpy.uint16), nblocks,
                             numpy.empty(n, numpy.float32), kind)
    _half.sum_blocks_numpy(out_np.view(numpy.uint16), blocks.view(numpy.uint16), nblocks,
                           numpy.empty(n + 3, numpy.float32), blocks.dtype)
    assert numpy.array_equal(out_jit.view(numpy.uint16), out_np.view(numpy.uint16))
    wide = out_np.astype(numpy.float32)
    assert numpy.isinf(wide).any() and (wide != 0).any()  # the edges were exercised


def _packed(scale, monkeypatch, with_numba, dtype=numpy.float16):
    if not with_numba:
        monkeypatch.setattr(jit, 'numba', lambda: None)
    rng = numpy.random.RandomState(3)
    sizes = [5, 1031, 1, 4099]
    params = []
    for i, n in enumerate(sizes):
        p = chainer.Parameter(numpy.zeros(n, numpy.float32))
        # float32 values around float16's limits: rounding, subnormals, overflow
        p.grad = (rng.standard_normal(n) * 10.0 ** rng.randint(-9, 6, n)).astype(numpy.float32)
        params.append((f'p{i}', p))
    lay = _packing.Layout([(name, p.data.shape, p.data.dtype) for name, p in params],
                          dtype=dtype)
    buf = _packing.PackedBuffer(lay)
    for segment in buf.plan:
        assert buf.send_source(params, segment, scale) is None
    packed = buf.array.copy()
    buf.unpack_grads(params)
    monkeypatch.undo()
    return packed, [p.grad.copy() for _, p in params]


@pytest.mark.parametrize('kind', ['float16', 'bfloat16'])
@pytest.mark.parametrize('scale', [None, 0.25, 1.0 / 3])
def test_half_packing_in_numpy_has_the_kernels_bits(scale, kind, monkeypatch):
    dtype = numpy.float16 if kind == 'float16' else _dtypes.bfloat16()
    packed_jit, grads_jit = _packed(scale, monkeypatch, True, dtype)
    packed_np, grads_np = _packed(scale, monkeypatch, False, dtype)
    assert packed_np.dtype == dtype
    assert numpy.array_equal(packed_jit.view(numpy.uint16), packed_np.view(numpy.uint16))
    for a, b in zip(grads_jit, grads_np):
        assert a.dtype == numpy.float32 and numpy.array_equal(a.view('u4'), b.view('u4'))


def test_what_has_no_fallback_names_numba(monkeypatch):
    monkeypatch.setattr(jit, 'numba', lambda: None)
    monkeypatch.setattr(fpenv, 'numba', None)
    with pytest.raises(RuntimeError, match=r'numba cannot be imported .* fused update kernels'):
        fuse(chainer.optimizers.Adam())
    with pytest.raises(RuntimeError, match=r'numba cannot be imported .* flush-to-zero'):
        fpenv.set_flush_denormals(True)
    assert fpenv.set_flush_denormals(False) is False  # turning it off is always allowed


def test_shared_memory_copies_in_numpy_match():
    # The fallbacks _shm uses where numba is missing, against its numba kernels.
    rng = numpy.random.RandomState(5)
    acc = rng.standard_normal(100003).astype(numpy.float32)
    src = rng.standard_normal(100003).astype(numpy.float32)
    expected = acc + src
    _shm._add_into(acc, src)
    assert numpy.array_equal(acc, expected)
    dst = numpy.empty_like(src)
    _shm._copy_chunk(src, dst)
    assert numpy.array_equal(dst, src)


@pytest.mark.slow  # the fast tier is at its 2 minutes; the bit-for-bit checks above stay in it
def test_communicators_average_exactly_without_numba(no_numba):
    # The shared-memory rows (rsaa:shm=1) and float16 messages, every grid of P = 3, checked
    # against the float64 reference with numba hidden in every rank.
    env = {'PYTHONPATH': pythonpath(no_numba)}
    proc = run_mpi(3, [worker('check_mean.py'), 'rsaa:shm=1'], env=env, timeout=300)
    assert_ok(proc, 3)
    assert proc.stdout.count(jit.FALLBACK_NOTE) == 1  # once, on rank 0 of the node
    assert 'no numba' in proc.stdout
