"""The tuning as one object (tuning.tuner.Tuner), fed times, no MPI: the stages, the choice,
its figures and cost, and the line rank 0 says. On real ranks: test_tune.py."""
import numpy
import pytest

from chainermn_torus.planning import planner
from chainermn_torus.tuning import candidates
from chainermn_torus.tuning.tuner import Tuner

NBYTES = 4 << 20
ROWS = planner.plan(2, 2, NBYTES, planner.PRESETS['ofp'])  # 2 nodes x 2 ranks
SEGMENT = 4 << 20


def one_rank(seconds):
    return numpy.asarray(seconds, dtype=numpy.float64)


def run(tuner, ms, made_s=0.002):
    """Feed the tuner each candidate's time (``ms``: label -> ms, or a function of the key)
    until it decides; returns the calls made and this rank's seconds spent."""
    calls, spent, made = 0, 0.0, set()
    while not tuner.done:
        key = tuner.next_key()
        took = (ms(key) if callable(ms) else ms[candidates.label(key)]) / 1e3
        first = 0.0 if key in made else made_s
        made.add(key)
        tuner.record(key, first, took)
        calls += 1
        spent += first + took
        assert calls < 100
    return calls, spent


def test_stage_one_measures_each_kind_and_stage_two_the_winners_shapes():
    tuner = Tuner(ROWS, 'planner', NBYTES, SEGMENT, one_rank, node_grid=(2, 2))
    assert [candidates.label(k) for k in tuner.keys] == [
        'shm 2x2', 'rsaa 2x2', 'rsap 2x2', 'pure_allreduce']
    ms = {'shm 2x2': 5.0, 'rsaa 2x2': 3.0, 'rsap 2x2': 4.0, 'pure_allreduce': 9.0,
          'rsaa 4x1': 3.5, 'rsaa 2x2, segment 1 MiB': 2.0, 'rsaa 2x2, segment whole': 3.2,
          'rsaa 1x4': 6.0}
    calls, spent = run(tuner, ms)
    assert tuner.choice == ('rsaa', (2, 2), 1 << 20)
    f = tuner.figures()
    assert f['chosen'] == 'rsaa 2x2, segment 1 MiB' and f['chosen_ms'] == pytest.approx(2.0)
    assert f['predicted'] == 'shm 2x2' and f['predicted_ms'] == pytest.approx(5.0)
    assert f['calls'] == calls == tuner.calls()
    stages = {r['candidate']: r['stage'] for r in f['candidates']}
    assert stages['pure_allreduce'] == 1 and stages['rsaa 2x2, segment 1 MiB'] == 2
    # pure_allreduce is out at the finalists' cut, after 3 counted calls (never after 1)
    dropped = {r['candidate']: r['dropped'] for r in f['candidates'] if r['dropped']}
    assert dropped['pure_allreduce'] == '3.00x the best, not among the 2 fastest after 3 ' \
        'calls'
    # the cost: what was spent beyond the choice's first call and as many calls at its time
    assert f['cost_s'] == pytest.approx(spent - (0.002 + 0.002) - (calls - 1) * 0.002)


def test_the_summary_says_the_choice_the_miss_and_the_cost():
    tuner = Tuner(ROWS, 'simulated', NBYTES, SEGMENT, one_rank, node_grid=(2, 2))
    run(tuner, lambda key: 1.0 if key[0] == 'rsap' else 4.0)
    line = tuner.summary(2, 2, 'remembered in /x')
    f = tuner.figures()
    assert line.startswith('tuned 4.2 MB on 2 nodes x 2 ranks in {} calls -> {} (1.00 ms); '
                           'predicted shm 2x2 (simulated), measured 4.00 ms'.format(
                               f['calls'], f['chosen']))
    assert 'rsap 2x2 1.00 ms' in line and line.endswith('remembered in /x')
    assert "the tuning cost {:.3f} s beyond the choice's time".format(f['cost_s']) in line


def test_the_slowest_ranks_times_decide():
    # This rank finds rsaa fastest; another rank is slow in rsaa: the max across ranks
    # (what ``agree`` returns on every rank) makes rsap the choice everywhere.
    def slowest(mine):
        other = numpy.array(mine)
        for i, k in enumerate(tuner.keys):
            if k[0] == 'rsaa' and not numpy.isnan(other[i]):
                other[i] = 0.010
        return numpy.fmax(mine, other) if len(mine) == len(tuner.keys) else mine
    tuner = Tuner(ROWS, 'planner', NBYTES, SEGMENT, lambda a: slowest(a), node_grid=(2, 2))
    run(tuner, lambda key: {'rsaa': 1.0, 'rsap': 2.0}.get(key[0], 5.0))
    assert tuner.choice[0] == 'rsap'


def test_a_given_segment_size_is_not_tuned_and_a_stray_record_is_refused():
    tuner = Tuner(ROWS, 'planner', NBYTES, SEGMENT, one_rank, segments=False,
                  node_grid=(2, 2))
    run(tuner, lambda key: 1.0 if key == ('shm', (2, 2), None) else 3.0)
    assert tuner.choice == ('shm', (2, 2), None)
    assert all(k[2] is None for k in tuner.measured_keys())
    fresh = Tuner(ROWS, 'planner', NBYTES, SEGMENT, one_rank, node_grid=(2, 2))
    with pytest.raises(ValueError) as e:
        fresh.record(('rsap', (2, 2), None), 0.0, 0.001)
    assert 'expected a call of shm 2x2, got rsap 2x2' in str(e.value)


def test_one_kind_only_goes_straight_to_its_refinements():
    rows = [r for r in ROWS if r['algorithm'] == 'rsap']
    tuner = Tuner(rows, 'planner', NBYTES, SEGMENT, one_rank, node_grid=(2, 2))
    assert tuner.stage == 2 and tuner.keys[0] == ('rsap', (2, 2), None)
    run(tuner, lambda key: 1.0 if key[1] == (4, 1) else 2.0)
    assert tuner.choice == ('rsap', (4, 1), None)
