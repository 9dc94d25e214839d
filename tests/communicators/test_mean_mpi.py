"""Real MPI ranks: exact means, bitwise identity, every grid, bad input (tests/mpi_workers).

The checks run in the session's worlds (tests/mpi_world.py): one test per (variant, P).
"""
import sys

import pytest

from chainermn_torus.algorithms import variants as table
from conftest import ranks, WORKERS

sys.path.insert(0, WORKERS)
from conformance_variants import tested as mean_job_variants  # noqa: E402 (no MPI: only the table)

# Every variant of the table at its rank counts (P = 1..8), and two specs the table does
# not pin: rsaa's default on one node (shared memory) and rsap's two one-sided options
# together.
EXTRA = [('rsaa:shm=1', table.ONE_TO_EIGHT),
         ('rsap:sync=notify,reduce_scatter=accumulate', table.ONE_TO_EIGHT)]
CASES = mean_job_variants() + EXTRA

# The fast tier: every variant at P = 2, the message paths at P = 3 (odd row lengths,
# rsap's non-power-of-two put schedule).
FAST = {(v, 2) for v, _ in CASES} | {('rsaa', 3), ('rsap', 3)}
# P = 6 is there for its grids of two sizes (2x3, 3x2) and its node-shared rows of three: the
# grid layouts (rsaa, rsap) and the shared rows (shm, rsaa:shm=1). rsap's other ways of
# synchronising and accumulating, and pure_allreduce (no grid), add no case there that
# P = 3 (odd rows) and 4 (a 2x2 grid) do not, and run at P = 5, 7 and 8 in `make test-wide`.
AT_SIX = ('rsaa', 'rsap', 'shm', 'rsaa:shm=1')


def cases():
    return [pytest.param(v, n, marks=() if (v, n) in FAST else pytest.mark.slow,
                         id=f'{v}-P{n}')
            for v, counts in CASES for n in counts if n != 6 or v in AT_SIX]


@pytest.mark.parametrize('variant, nprocs', cases())
def test_mean_matches_float64_reference_on_every_rank(mpi_world, variant, nprocs):
    # Every grid shape that fits P, segmented and whole, with uneven sizes, mixed dtypes,
    # grad None, repeated calls, size changes and buffer eviction; float16 communication,
    # and the polled mode of the double-buffering thread. rsap_notify: partner-only
    # synchronisation (flush + notification); rsap_acc: reduce-scatter by MPI_Accumulate;
    # P = 3, 5, 6, 7 give non-power-of-two put schedules.
    checks = mpi_world(nprocs, 'check_mean', 'check_spec', variant, timeout=420)
    assert len(set(checks)) == 1 and checks[0] >= 10, checks


def test_every_variant_of_the_table_is_tested():
    # The table feeds the planner, auto and the benchmark: a variant added there without
    # rank counts would reach users untested. A planner-only row (no benchmark row) models
    # a communicator another row tests with the same options.
    untested = [v.name for v in table.VARIANTS.values() if not v.test_ranks and v.bench is not None]
    assert not untested, untested
    for v in table.VARIANTS.values():
        if v.bench is None:
            assert any(w.test_ranks and (w.communicator, w.options) == (v.communicator, v.options)
                       for w in table.VARIANTS.values()), v.name


@pytest.mark.parametrize('nprocs', ranks([2, 3], fast=[2]))
def test_bad_input_raises_on_every_rank_without_hanging(mpi_world, nprocs):
    messages = mpi_world(nprocs, 'check_errors', 'check_all', timeout=180)
    assert 'first difference: array #1: /w1 shape=(20,)' in messages[0], messages[0]
