"""The exact sum (exact_sum=True) with real ranks (tests/mpi_workers/check_exact.py): on every
rank, for pure_allreduce, rsaa and rsap (messages, puts with each synchronisation, MPI_Accumulate,
the node-shared rows), every grid that fits P, whole and segmented, the overlap's buckets and
a polling clone, the means are the bits of the exact sum computed without MPI; a half dtype
on the wire is refused with it in one line."""
import pytest

from conftest import ranks

SPECS = ['pure_allreduce', 'rsaa:shm=0', 'rsaa', 'rsap:shm=0', 'rsap',
         'rsap:sync=notify,reduce_scatter=accumulate']


@pytest.mark.parametrize('nprocs', ranks([1, 2, 3, 4, 6], fast=[2, 3]))
def test_every_communicator_grid_and_mode_gives_the_exact_sums_bits(mpi_world, nprocs):
    configurations = mpi_world(nprocs, 'check_exact', 'check_exact', SPECS, timeout=420)
    assert len(set(configurations)) == 1 and configurations[0] >= 2 * len(SPECS) + 1


@pytest.mark.parametrize('nprocs', ranks([2], fast=[2]))
def test_a_half_dtype_on_the_wire_is_refused_with_it_on_every_rank(mpi_world, nprocs):
    said = mpi_world(nprocs, 'check_exact', 'check_refusals')
    option, set_config, bad = said[0]
    assert 'exact_sum (exact_sum) sends gradients as 64-bit integers' in option, option
    assert 'allreduce_grad_dtype float16 cannot apply' in option, option
    assert 'allreduce_grad_dtype bfloat16 cannot apply' in set_config, set_config
    assert "'sometimes'" in bad and 'exact_sum' in bad, bad
    assert all(s == said[0] for s in said), said
