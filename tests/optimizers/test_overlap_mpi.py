"""overlap=True on real MPI ranks (tests/mpi_workers/check_overlap.py): against the
synchronous wrapper for rsap, rsaa and pure_allreduce in float32 and float16, bit for bit
where the elements keep their places; backward orders that differ between ranks and steps,
an unused and a shared parameter, resume, update() without a loss function, NaN on one rank,
a parameter added mid-training, and the refusals."""
import pytest

from conftest import ranks


@pytest.mark.parametrize('nprocs', ranks([2, 3, 4], fast=[2]))
@pytest.mark.parametrize('name', ['rsap', pytest.param('rsaa', marks=pytest.mark.slow),
                                  'pure_allreduce'])
def test_overlap(mpi_world, name, nprocs):
    checks = mpi_world(nprocs, 'check_overlap', 'check_communicator', name, timeout=300)
    assert len(set(checks)) == 1 and checks[0] >= 6, checks


@pytest.mark.parametrize('nprocs', ranks([2, 3], fast=[2]))
def test_overlap_with_auto(mpi_world, nprocs):
    # auto hands the buckets to the communicator it chose (it once ran the base class's
    # bucket loop on itself and failed with KeyError 'total').
    checks = mpi_world(nprocs, 'check_overlap', 'check_communicator', 'auto', timeout=300,
                       env={'CHAINERMN_TORUS_NETWORK': 'ofp', 'CHAINERMN_TORUS_SIMULATE': 'off'})
    assert len(set(checks)) == 1 and checks[0] >= 6, checks


@pytest.mark.parametrize('nprocs', [2])
def test_overlap_refusals(mpi_world, nprocs):
    assert mpi_world(nprocs, 'check_overlap', 'check_refusals_on') == [1, 1]
