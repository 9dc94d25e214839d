"""The schedules the simulator plays are the calls the communicators make (real MPI jobs).

tests/mpi_workers/record_calls.py records every collective, put, fence, flush and
notification of each variant (float32 and float16, every grid, several segments with uneven
tails) and compares them with ``simulation.schedules``: a change to a communicator that the
schedules do not follow fails here, naming the call.
"""
import pytest

from conftest import assert_ok, run_mpi, worker


@pytest.mark.parametrize('nprocs', [3, pytest.param(4, marks=pytest.mark.slow),
                                    pytest.param(6, marks=pytest.mark.slow)])
def test_recorded_calls_equal_the_schedules(nprocs):
    # 3: rows of 3 (non-power-of-two put rounds, odd tails); 4: powers of two; 6: 2x3 and
    # 3x2 grids with both uneven rows and columns.
    proc = run_mpi(nprocs, [worker('record_calls.py')], timeout=300)
    assert_ok(proc, nprocs)
