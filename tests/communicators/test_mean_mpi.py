"""Real MPI jobs: exact means, bitwise identity, every grid, bad input (tests/mpi_workers)."""
import pytest

from chainermn_torus.algorithms.variants import VARIANTS, tested
from conftest import assert_ok, run_mpi, worker


# One job per (variant, P): a failure names the variant. The variants and their rank counts
# are the table's (algorithms.variants); two more specs cover what the table does not pin:
# rsaa's default on one node (shared memory) and rsap's two one-sided options together.
EXTRA = [('rsaa:shm=1', (1, 2, 3, 4)),  # the shm variant's code, which runs up to P = 8
         ('rsap:sync=notify,reduce_scatter=accumulate', (2, 3))]
CASES = tested() + EXTRA

# The fast tier: every variant at P = 2, and the message paths at P = 3 (odd row lengths,
# rsap's non-power-of-two put schedule).
FAST = {(v, 2) for v, _ in CASES[:-1]} | {('rsaa', 3), ('rsap', 3)}


def cases():
    return [pytest.param(v, n, marks=() if (v, n) in FAST else pytest.mark.slow)
            for v, counts in CASES for n in counts]


@pytest.mark.parametrize('variant, nprocs', cases())
def test_mean_matches_float64_reference_on_every_rank(variant, nprocs):
    # Every grid shape that fits P, segmented and whole, with uneven sizes, mixed dtypes,
    # grad None, repeated calls, size changes and buffer eviction; float16 communication,
    # and the polled mode of the double-buffering thread. rsap_notify: partner-only
    # synchronisation (flush + notification); rsap_acc: reduce-scatter by MPI_Accumulate;
    # P = 3 and 5 give non-power-of-two put schedules. rsap_pscw runs on 2 ranks only: at 4+
    # the MPICH 5.0.2 wheel hangs now and then in PSCW itself (scripts/repro_pscw_hang.py),
    # which is why 'notify' is the partner-only variant.
    proc = run_mpi(nprocs, [worker('check_mean.py'), variant], timeout=420)
    assert_ok(proc, nprocs)


def test_every_variant_of_the_table_is_tested():
    # The table feeds the planner, auto and the benchmark: a variant added there without
    # rank counts would reach users untested. A planner-only row (no benchmark row) models
    # a communicator another row tests with the same options.
    untested = [v.name for v in VARIANTS.values() if not v.test_ranks and v.bench is not None]
    assert not untested, untested
    for v in VARIANTS.values():
        if v.bench is None:
            assert any(w.test_ranks and (w.communicator, w.options) == (v.communicator, v.options)
                       for w in VARIANTS.values()), v.name


@pytest.mark.parametrize('nprocs', [2, 3])
def test_bad_input_raises_on_every_rank_without_hanging(nprocs):
    proc = run_mpi(nprocs, [worker('check_errors.py')], timeout=180)
    assert_ok(proc, nprocs)
    assert 'first difference: array #1: /w1 shape=(20,)' in proc.stdout
