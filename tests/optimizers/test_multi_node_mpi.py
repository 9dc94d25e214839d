"""The multi-node optimizer wrapper on real MPI ranks (tests/mpi_workers/check_optimizer.py).

Per communicator: the plain and double-buffered schedules, stock and fused updates, equal to
written-out references bit for bit; float16 communication identical on all ranks and close
to float32; snapshot and resume giving the same next steps; NaN on one rank reported by all;
parameters that change mid-training re-broadcast; an optimizer with no fused version refused.
"""
import pytest

from conftest import ranks

NAMES = ('rsap', 'rsaa', 'pure_allreduce', 'naive')


@pytest.mark.parametrize('nprocs', ranks([2, 3, 4, 5], fast=[2]))
@pytest.mark.parametrize('name', NAMES)
def test_wrapper(mpi_world, name, nprocs):
    # 5 ranks on 2 cores: a prime rank count (grid 5x1) and heavy oversubscription.
    checks = mpi_world(nprocs, 'check_optimizer', 'check_communicator', name, timeout=300)
    assert len(set(checks)) == 1 and checks[0] >= 4, checks
