"""A grain of work per thread (runtime.cpu.jit.grain): a numba kernel on a few thousand
elements runs on one thread, a large one on the rank's whole budget, and the budget is the
same after as before, whatever the kernel raised."""
import numpy
import pytest

from chainermn_torus.runtime.cpu import jit

numba = pytest.importorskip('numba', reason='numba is not installed (make setup installs it)')


@pytest.fixture
def four_threads():
    before = numba.get_num_threads()
    numba.set_num_threads(min(4, numba.config.NUMBA_NUM_THREADS))
    yield numba.get_num_threads()
    numba.set_num_threads(before)


def test_small_work_takes_one_thread_and_large_work_all(four_threads):
    budget = four_threads
    with jit.grain(jit.GRAIN - 1):
        assert numba.get_num_threads() == 1
    with jit.grain(2 * jit.GRAIN):
        assert numba.get_num_threads() == min(2, budget)
    with jit.grain(10 ** 9):
        assert numba.get_num_threads() == budget
    assert numba.get_num_threads() == budget


def test_the_budget_comes_back_after_an_error(four_threads):
    with pytest.raises(ZeroDivisionError):
        with jit.grain(10):
            1 / 0
    assert numba.get_num_threads() == four_threads


def test_a_grain_of_zero_gives_every_kernel_every_thread(four_threads, monkeypatch):
    monkeypatch.setattr(jit, 'GRAIN', 0)
    with jit.grain(10):
        assert numba.get_num_threads() == four_threads


def test_the_kernels_give_the_same_bits_on_one_thread_as_on_all(four_threads):
    # what the grain changes is how many threads, never the result
    from chainermn_torus.compute.kernels import batchnorm as bn_kernels, eltwise
    rng = numpy.random.RandomState(0)
    x = rng.randn(2, 8, 300).astype(numpy.float32)
    gamma, beta = numpy.ones(8, numpy.float32), numpy.zeros(8, numpy.float32)
    few = bn_kernels.forward(x.reshape(2, 8, 300, 1), gamma, beta, 2e-5)  # one thread
    relu_few = eltwise.relu(x)
    old = jit.GRAIN
    try:
        jit.GRAIN = 1  # every kernel on every thread
        many = bn_kernels.forward(x.reshape(2, 8, 300, 1), gamma, beta, 2e-5)
        relu_many = eltwise.relu(x)
    finally:
        jit.GRAIN = old
    for a, b in zip(few + (relu_few,), many + (relu_many,)):
        assert numpy.array_equal(a, b)

