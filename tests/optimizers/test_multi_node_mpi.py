"""The multi-node optimizer wrapper on real MPI ranks (tests/mpi_workers/check_optimizer.py).

Per communicator: the plain and double-buffered schedules, stock and fused updates, equal to
written-out references bit for bit; float16 communication identical on all ranks and close
to float32; snapshot and resume giving the same next steps; NaN on one rank reported by all;
parameters that change mid-training re-broadcast; an optimizer with no fused version refused.
"""
import pytest

from conftest import assert_ok, ranks, run_mpi, worker


@pytest.mark.parametrize('nprocs', ranks([2, 3, 4], fast=[2]))
def test_wrapper_all_communicators(nprocs):
    proc = run_mpi(nprocs, [worker('check_optimizer.py')], timeout=300)
    assert_ok(proc, nprocs)


@pytest.mark.slow
def test_wrapper_five_ranks_rsap_and_naive():
    # 5 ranks on 2 cores: a prime rank count (grid 5x1) and heavy oversubscription.
    proc = run_mpi(5, [worker('check_optimizer.py'), 'rsap', 'naive'], timeout=300)
    assert_ok(proc, 5)
