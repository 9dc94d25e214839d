"""What the tests ask of the package beyond what the package itself uses: each function
reads or resets one piece of its state, so that the package keeps no code for tests alone
(issue 74; scripts/structure_figures.py counts what is left)."""
import os

from chainermn_torus.algorithms import schedule
from chainermn_torus.compute.onednn import geometries
from chainermn_torus.errors import UnsafePath
from chainermn_torus.process import STATE
from chainermn_torus.runtime.files import shared_paths
from chainermn_torus.simulation import schedules as simulated


def forget_said():
    """Say every keyed line again (``report.say(..., key=)``): a process that runs one check
    after another (tests/mpi_workers/world_loop.py)."""
    STATE.said.clear()


def call_calls(setup, segments, arrays=0):
    """The calls of one whole all-reduce call over segments of the given sizes (``arrays``:
    the model's, whose scales the exact sum all-reduces first)."""
    calls = schedule.begin_calls(setup, arrays)
    for elems in segments:
        calls += schedule.segment_calls(setup, elems)
    return calls + schedule.end_calls(setup)


ONE_SIDED = ('put', 'flush', 'notify')  # the calls an origin makes alone


def calls_of(calls, rank):
    """One rank's calls, as tests/mpi_workers/record_calls.py records them: the collectives
    of the groups it is in, and the one-sided calls and notifications it makes as origin."""
    return [c for c in calls if (c.group[0] == rank if c.op in ONE_SIDED else rank in c.group)]


def set_onednn_bound(n):
    """Keep at most ``n`` oneDNN geometries from now on (the oldest beyond it dropped)."""
    geometries.set_bound(n)


def original_of(owner, name):
    """What ``owner.name`` was before the package's first patch of it (itself if none)."""
    for patch in STATE.patches:
        if patch.owner is owner and patch.name == name:
            return patch.original
    return getattr(owner, name)


def directory_problem(path, trusted=False, shared=False):
    """Why the directory ``path`` may not be entered, or None (FileNotFoundError where it
    does not exist): the judgement ``shared_paths`` makes of one directory, without
    following it."""
    try:
        fd = shared_paths._opened(path, shared_paths._DIRECTORY)
    except UnsafePath as e:
        return 'it is ' + str(e)
    except NotADirectoryError:
        return f'it is {shared_paths.what_is_there(os.lstat(path))}, not a directory'
    try:
        return shared_paths.problem(os.fstat(fd), trusted=trusted, directory=True,
                                    shared=shared)
    finally:
        os.close(fd)


def segment_rounds(setup, elems, library='halving'):
    """The simulator's rounds of one segment of ``elems`` elements."""
    return simulated.rounds_of_calls(schedule.segment_calls(setup, elems), library)


def round_count(rounds):
    return sum(r.repeat for r in rounds)
