"""Real MPI jobs: exact means, bitwise identity, every grid, bad input (tests/mpi_workers)."""
import pytest

from conftest import assert_ok, run_mpi, worker


@pytest.mark.parametrize('nprocs', [1, 2, 3, 4, 6, 8])
def test_mean_matches_float64_reference_on_every_rank(nprocs):
    # Every communicator, every grid shape that fits P, segmented and whole, with uneven
    # sizes, mixed dtypes, grad None, repeated calls, size changes and buffer eviction.
    proc = run_mpi(nprocs, [worker('check_mean.py')], timeout=420)
    assert_ok(proc, nprocs)


@pytest.mark.parametrize('nprocs', [2, 3])
def test_bad_input_raises_on_every_rank_without_hanging(nprocs):
    proc = run_mpi(nprocs, [worker('check_errors.py')], timeout=180)
    assert_ok(proc, nprocs)
    assert 'first difference: array #1: /w1 shape=(20,)' in proc.stdout
