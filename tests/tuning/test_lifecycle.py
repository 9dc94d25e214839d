"""auto's choices as one object (tuning.lifecycle.Choices), without MPI: a job of one rank
(tuning.collective_steps.OneRank) standing for rank 0 of 2 nodes x 2 ranks, candidates that record
their calls. The look-up, the trials, the decision, the record, the retirement of the losers and
the partial record at exit; on real ranks: test_tune.py and test_auto.py."""
import atexit
import json
import time

import pytest

from chainermn_torus.planning import planner
from chainermn_torus.tuning import candidates, lifecycle, memory
from chainermn_torus.tuning.collective_steps import OneRank, Shape
from chainermn_torus.tuning.lifecycle import TUNE_MIN_BYTES, Choices, TuneInputs

SHAPE = Shape(size=4, rank=0, ranks_per_node=2, nodes=2, uniform=True)
NBYTES = 4 << 20


class Candidate:
    """A communicator made for a key: its calls counted, rsaa's 5 ms faster than the rest
    (2 ms: a remembered choice's check compares its median with the recorded one)."""

    def __init__(self, key):
        self.key, self.calls, self.finalized = key, 0, False

    def run(self):
        self.calls += 1
        time.sleep(0.002 if self.key[0] == 'rsaa' else 0.007)

    def finalize(self):
        self.finalized = True


def settings(tmp_path, tune='on'):
    return TuneInputs(network=planner.PRESETS['ofp'], network_source='preset', simulate=False,
                    tune=tune, tune_dir=str(tmp_path), segment_bytes=4 << 20,
                    segment_given=False, mpi_library='MPICH Version: test')


@pytest.fixture
def made():
    return []


@pytest.fixture
def choices_of(made):
    made_choices = []

    def make(tmp_path, tune='on'):
        def candidate(key):
            made.append(Candidate(key))
            return made[-1]
        c = Choices(SHAPE, settings(tmp_path, tune), OneRank(), candidate)
        made_choices.append(c)
        return c
    yield make
    for c in made_choices:  # this test's exit handlers are not the test process's
        atexit.unregister(c.at_exit)


def call(choices, nbytes=NBYTES, signature='abc'):
    choices.call(nbytes, lambda: signature, lambda comm: comm.run())


def test_tuning_measures_decides_remembers_and_retires_the_losers(tmp_path, choices_of, made):
    c = choices_of(tmp_path)
    calls = 0
    while NBYTES not in c.chosen:
        call(c)
        calls += 1
        assert calls < 100
    assert NBYTES in c.tuned and not c.measuring
    chosen = c.chosen[NBYTES]
    assert chosen[0] == 'rsaa' and c.tuned[NBYTES]['calls'] == calls
    assert {candidates.label(m.key) for m in made} >= {'shm 2x2', 'rsap 2x2', 'pure_allreduce'}
    key = memory.Key(2, 2, 'MPICH Version: test', 'abc', NBYTES)
    assert (tmp_path / key.file_name()).exists()
    # The losers stay while the choice runs twice (double buffering may read their means).
    call(c)
    assert sum(not m.finalized for m in made) > 1
    call(c)
    assert [m.key for m in made if not m.finalized] == [chosen]
    assert list(c.made) == [chosen]
    c.finalize()
    assert all(m.finalized for m in made) and not c.made


def test_the_next_job_of_the_shape_takes_the_remembered_choice(tmp_path, choices_of, made):
    first = choices_of(tmp_path)
    while NBYTES not in first.chosen:
        call(first)
    first.finalize()
    del made[:]
    second = choices_of(tmp_path)
    call(second)
    # The file names the segment: the default's size where the tuning kept the default.
    assert second.chosen[NBYTES][:2] == first.chosen[NBYTES][:2] and not second.measuring
    assert second.chosen[NBYTES][2] == (first.chosen[NBYTES][2] or 4 << 20)
    assert [m.key for m in made] == [second.chosen[NBYTES]] and made[0].calls == 1
    # Another model (signature) of the same size is another file: measured afresh.
    del made[:]
    third = choices_of(tmp_path)
    call(third, signature='another')
    assert NBYTES in third.measuring


def _tuned_then_next_job(tmp_path, choices_of, made, rewrite=None):
    first = choices_of(tmp_path)
    while NBYTES not in first.chosen:
        call(first)
    first.finalize()
    if rewrite is not None:
        key = memory.Key(2, 2, 'MPICH Version: test', 'abc', NBYTES)
        path = tmp_path / key.file_name()
        data = json.loads(path.read_text())
        rewrite(data)
        path.write_text(json.dumps(data))
    del made[:]
    second = choices_of(tmp_path)
    for _ in range(1 + lifecycle.CHECK_CALLS):
        call(second)
    return first, second


def _scaled(data, factor):
    """The file's recorded figures times ``factor``: the check compares this job's calls
    with them, and this test's calls (sleeps) stretch with the machine's load, so each test
    sets the side of RECHECK they must fall on."""
    figures = data['figures']
    figures['chosen_ms'] *= factor
    for row in figures['candidates']:
        if row['median_ms'] is not None:
            row['median_ms'] *= factor


def test_a_remembered_choice_is_checked_and_kept_where_it_runs_as_recorded(
        tmp_path, choices_of, made, capsys):
    # Recorded on a machine ten times slower than this job's calls can run, however busy.
    first, second = _tuned_then_next_job(tmp_path, choices_of, made,
                                         lambda data: _scaled(data, 10.0))
    out = capsys.readouterr().out
    assert 'MB: the remembered rsaa' in out and 'kept' in out.splitlines()[-1], out
    assert second.chosen[NBYTES][:2] == first.chosen[NBYTES][:2]
    assert not second.checking and not second.measuring


def test_a_remembered_choice_that_runs_slower_is_tuned_again(tmp_path, choices_of, made,
                                                             capsys):
    """Issue 82: a choice rewritten to the worst candidate (as a tuning under noise could
    leave it) is measured against the best figure its tuning recorded, and tuned again."""
    def worst(data):
        data['choice'] = {'algorithm': 'pure_allreduce', 'grid': None,
                          'segment_bytes': 4 << 20}
        _scaled(data, 0.5)  # however busy the machine was while the first job tuned
    first, second = _tuned_then_next_job(tmp_path, choices_of, made, worst)
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if 'MB: the remembered' in line]
    assert len(said) == 1 and 'the remembered pure_allreduce' in said[0] and \
        'so it is tuned again' in said[0], out
    assert NBYTES in second.measuring  # the tuning, on the next calls, without it
    assert 'pure_allreduce' not in {candidates.label(k) for k in
                                    second.measuring[NBYTES][0].keys}
    calls = 0
    while NBYTES not in second.chosen:
        call(second)
        calls += 1
        assert calls < 100
    assert second.chosen[NBYTES][0] == 'rsaa'
    # The new choice is what the next job of the shape finds.
    key = memory.Key(2, 2, 'MPICH Version: test', 'abc', NBYTES)
    assert json.loads((tmp_path / key.file_name()).read_text())['choice']['algorithm'] == 'rsaa'


def test_tune_off_and_small_buffers_keep_the_prediction(tmp_path, choices_of, made):
    off = choices_of(tmp_path, tune='off')
    call(off)
    call(off)
    (nbytes, rows), = off.log
    assert nbytes == NBYTES and off.chosen[NBYTES] == candidates.key(rows[0])[:2] + (None,)
    assert len(made) == 1 and made[0].calls == 2 and not off.measuring
    on = choices_of(tmp_path)
    call(on, nbytes=TUNE_MIN_BYTES - 4)
    assert not on.measuring and TUNE_MIN_BYTES - 4 in on.chosen


def test_a_job_ended_while_measuring_records_it_and_frees_every_candidate(
        tmp_path, choices_of, made, capsys):
    c = choices_of(tmp_path)
    call(c)
    call(c)
    assert NBYTES in c.measuring
    c.at_exit()
    err = capsys.readouterr().err
    assert 'the job ended after 2 gradient call(s) of 4.2 MB, before the tuning decided' in err
    assert all(m.finalized for m in made) and not c.made and not c.measuring
    key = memory.Key(2, 2, 'MPICH Version: test', 'abc', NBYTES)
    choice, _, _, message, _ = memory.load(key, SHAPE.size, str(tmp_path))
    assert choice is None and 'before the tuning decided: measuring afresh' in message


def test_overlap_buckets_take_a_remembered_choice_else_the_prediction(tmp_path, choices_of):
    c = choices_of(tmp_path)
    predicted = c.for_buckets(NBYTES, lambda: 'abc')
    assert NBYTES in c.chosen and not c.measuring  # not timed: the prediction
    tuned = choices_of(tmp_path / 'other')
    while NBYTES not in tuned.chosen:
        call(tuned)
    later = choices_of(tmp_path / 'other')
    assert later.for_buckets(NBYTES, lambda: 'abc').key[:2] == tuned.chosen[NBYTES][:2]
    assert predicted.key == c.chosen[NBYTES]
