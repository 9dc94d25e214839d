"""The schedules the simulator plays are the calls the communicators make (real MPI jobs).

tests/mpi_workers/record_calls.py records every collective, put, fence, flush and
notification of each variant (float32 and float16, every grid, several segments with uneven
tails) and compares them with ``simulation.schedules``: a change to a communicator that the
schedules do not follow fails here, naming the call.
"""
import pytest

from conftest import ranks


@pytest.mark.parametrize('nprocs', ranks([3, 4, 6], fast=[3]))
def test_recorded_calls_equal_the_schedules(mpi_world, nprocs):
    # 3: rows of 3 (non-power-of-two put rounds, odd tails); 4: 2 x 2 and 4 x 1; 6: rows
    # of 2, 3 and 6, columns of 3 and 2.
    counts = mpi_world(nprocs, 'record_calls', 'check_all', timeout=300)
    cases, calls = counts[0]
    assert cases >= 6 and calls > 0, counts
