"""overlap=True on real MPI ranks (tests/mpi_workers/check_overlap.py): against the
synchronous wrapper for rsap, rsaa and pure_allreduce in float32 and float16, bit for bit
where the elements keep their places; backward orders that differ between ranks and steps,
an unused and a shared parameter, resume, update() without a loss function, NaN on one rank,
a parameter added mid-training, and the refusals."""
import pytest

from conftest import assert_ok, ranks, run_mpi, worker


@pytest.mark.parametrize('nprocs', ranks([2, 3, 4], fast=[2]))
def test_overlap_all_communicators(nprocs):
    proc = run_mpi(nprocs, [worker('check_overlap.py')], timeout=300)
    assert_ok(proc, nprocs)

