"""The exact sum (exact_sum=True) with real ranks (tests/mpi_workers/check_exact.py): on every
rank, for pure_allreduce, rsaa and rsap (messages, puts with each synchronisation, MPI_Accumulate,
the node-shared rows), every grid that fits P, whole and segmented, the overlap's buckets and
a polling clone, the means are the bits of the exact sum computed without MPI; a half dtype
on the wire is refused with it in one line."""
import pytest

from conftest import ranks

# The variants table's names pin their options (rsaa and rsap: messages and puts; shm: the
# node-shared rows), and two specs it does not: rsap in node memory, rsap's other modes.
SPECS = ['pure_allreduce', 'rsaa', 'shm', 'rsap', 'rsap:shm=1',
         'rsap:sync=notify,reduce_scatter=accumulate']


@pytest.mark.parametrize('nprocs', ranks([1, 2, 3, 4, 6], fast=[2]))
def test_every_communicator_grid_and_mode_gives_the_exact_sums_bits(mpi_world, nprocs):
    configurations = mpi_world(nprocs, 'check_exact', 'check_exact', SPECS, timeout=420)
    assert len(set(configurations)) == 1 and configurations[0] >= 2 * len(SPECS) + 1


@pytest.mark.parametrize('nprocs', ranks([2], fast=[2]))
def test_a_half_dtype_on_the_wire_is_refused_with_it_on_every_rank(mpi_world, nprocs):
    said = mpi_world(nprocs, 'check_exact', 'check_refusals')
    option, set_config, bad = said[0]
    assert 'exact_sum (exact_sum) sums gradients as 64-bit integers' in option, option
    assert 'allreduce_grad_dtype float16 cannot apply' in option, option
    assert 'allreduce_grad_dtype bfloat16 cannot apply' in set_config, set_config
    assert "'sometimes'" in bad and 'exact_sum' in bad, bad
    assert all(s == said[0] for s in said), said


@pytest.mark.parametrize('nprocs', ranks([1, 2, 3, 4, 6], fast=[3]))
def test_six_virtual_ranks_give_the_same_bits_on_any_number_of_processes(mpi_world, nprocs):
    # V = 6 on P = 1, 2, 3, 4, 6: each process sums the sets of the virtual ranks it holds
    # into its integers; the means equal the reference over the 6 sets (the worker checks
    # every array's bits), whatever P and the algorithm.
    held = mpi_world(nprocs, 'check_exact', 'check_virtual', 6,
                     ['pure_allreduce', 'rsaa', 'shm'], timeout=300)
    assert sorted(v for h in held for v in h) == list(range(6))
    assert [len(h) for h in held] == {1: [6], 2: [3, 3], 3: [2, 2, 2], 4: [2, 2, 1, 1],
                                      6: [1] * 6}[nprocs]


@pytest.mark.parametrize('nprocs', ranks([3], fast=[3]))
def test_virtual_ranks_refuse_fewer_than_p_an_inexact_sum_and_one_gradient_set(mpi_world,
                                                                             nprocs):
    said = mpi_world(nprocs, 'check_exact', 'check_virtual_refusals', 5)
    fewer, inexact, one_set = said[0]
    assert 'virtual_ranks 2 is fewer than the job\'s 3 processes' in fewer, fewer
    assert 'leave exact_sum=False out' in inexact, inexact
    assert '5 virtual ranks on 3 processes' in one_set and 'mean_grad_sets' in one_set, one_set
    assert all(s == said[0] for s in said), said
