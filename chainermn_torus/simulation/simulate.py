"""``simulate``: the time of one all-reduce call of a model's gradients, from SimGrid.

A call is the communicator's pass over its packed buffer: the packing copy, one schedule per
segment (``schedules``), and the copy back. Segments of the same size take the same time, so
each distinct size is simulated once (as one experiment of one SimGrid run, ``player``) and
counted as often as the buffer has it; with more than ``max_sizes`` distinct sizes, a few
are simulated (the largest, the smallest and the most frequent) and the others interpolated
linearly in their size (a segment's time is latency terms plus terms in its bytes).

SimGrid is found as installed for this Python, or in Debian's ``python3-simgrid`` location
(``/usr/lib/python3/dist-packages``, whose module is built for Debian's Python 3.11): see
``simgrid_env``.
"""
import functools
import json
import os
import subprocess
import sys

from chainermn_torus import settings_table
from chainermn_torus.algorithms import gradient_sets, schedule, segments

__all__ = ['available', 'simgrid_env', 'simulate', 'SimulationError', 'why_unavailable']

DEBIAN_DIST = '/usr/lib/python3/dist-packages'
# Past this many ranks, rounds are played in lock-step (player._play_lockstep): at 256
# fat-tree nodes it gave the actors' times to 1e-6 in 2-3x less wall time.
ACTOR_RANKS = 64


class SimulationError(RuntimeError):
    pass


def _path_env():
    return settings_table.SETTINGS['simgrid_path'].env


def _importable(env):
    code = (f'import os, sys; p = os.environ.get({_path_env()!r}); p and sys.path.append(p); '
            'import simgrid')
    return subprocess.run([sys.executable, '-c', code], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def simgrid_env():
    """The environment in which the player's child can import simgrid, or None.

    ``CHAINERMN_TORUS_SIMGRID_PATH`` names a folder to try first. Debian's module lives
    among every other Debian Python package, so its folder is appended to the child's
    sys.path (after the virtualenv's packages, never before: its
    numpy or setuptools must not shadow the venv's), not put on PYTHONPATH.
    """
    env = dict(os.environ)
    if _importable(env):  # installed for this Python, or the user's folder
        return env
    if os.path.isdir(DEBIAN_DIST) and any(n.startswith('simgrid.') and n.endswith('.so')
                                          for n in os.listdir(DEBIAN_DIST)):
        env[_path_env()] = DEBIAN_DIST
        if _importable(env):
            return env
    return None


@functools.lru_cache(maxsize=None)
def _env():
    return simgrid_env()


def _child_env(found):
    """This process's environment now (a plugin's path set since the first simulation
    included), with the SimGrid folder ``simgrid_env`` found."""
    env = dict(os.environ)
    if _path_env() in found:
        env[_path_env()] = found[_path_env()]
    return env


def available():
    return _env() is not None


def why_unavailable():
    return (f'SimGrid\'s Python module is not importable from {sys.executable} (install Debian\'s '
            'python3-simgrid, `make simgrid`, for Python 3.11; see docs/simulation.md)')


def _pick_sizes(counts, max_sizes):
    sizes = sorted(counts)
    if len(sizes) <= max_sizes:
        return sizes
    keep = {sizes[0], sizes[-1]}
    for s in sorted(sizes, key=lambda s: -counts[s] * s):
        if len(keep) >= max_sizes:
            break
        keep.add(s)
    return sorted(keep)


def _interpolate(times, size):
    known = sorted(times)
    if size in times:
        return times[size]
    lo = max(s for s in known if s < size)
    hi = min(s for s in known if s > size)
    w = (size - lo) / float(hi - lo)
    return times[lo] * (1 - w) + times[hi] * w


def simulate(machine, algorithm, model, M=1, itemsize=4, library='halving', node_aware=True,
             segment_bytes=4 << 20, max_sizes=None, mode=None, timeout=None, exact=False):
    """Seconds of one all-reduce call, with its parts; raises SimulationError.

    exact: the exact sum (``algorithms.schedule.Setup``): the floats in phase 1 (summed as
    integers by their receivers), int64 in phase 2 and the tails, the means in phase 3, one
    MAX all-reduce of the arrays' scales first, and locally a pass for the largest
    magnitudes.

    segment_bytes: the communicators' segment (0: the whole buffer at once; None: one
    all-reduce per parameter array, ChainerMN's ``naive``, with algorithm pure_allreduce).

    mode: 'actors' (one actor per rank), 'lockstep' (rounds start together: no context
    switches) or None: actors up to ACTOR_RANKS ranks, lock-step beyond.
    """
    env = _env()
    if env is None:
        raise SimulationError(why_unavailable())
    P = machine.nodes * machine.ranks_per_node
    # bad input fails here, not in the child
    setup = schedule.Setup(algorithm, P, M, itemsize, exact)
    # Segments are cut in bytes: a float16 buffer's hold twice the elements, an exact one's
    # (int64) half (communicators.engine).
    counts = segments.segment_sizes(model, segment_bytes, itemsize=setup.reduce_itemsize)
    if max_sizes is None:
        max_sizes = 16 if P <= 64 else (3 if segment_bytes is not None else 8)
    sizes = _pick_sizes(counts, max_sizes)
    # A variant a plugin added is known in the child once the plugin's module is imported.
    module = type(setup.variant.algorithm).__module__
    child_env = _child_env(env)
    request = {'machine': machine._asdict(), 'algorithm': algorithm, 'M': M,
               'simgrid_path': child_env.get(_path_env()),  # the folder simgrid_env found
               'modules': [] if module.startswith('chainermn_torus.') else [module],
               'itemsize': itemsize, 'exact': bool(exact),
               'arrays': len(gradient_sets.model_params(model)) if exact else 0,
               'library': library, 'node_aware': node_aware,
               'sizes': sizes, 'mode': mode or ('actors' if P <= ACTOR_RANKS else 'lockstep')}
    proc = subprocess.run([sys.executable, '-m', 'chainermn_torus.simulation.player'],
                          input=json.dumps(request), env=child_env,
                          capture_output=True, text=True, timeout=timeout)
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        raise SimulationError('chainermn_torus: the SimGrid run failed '
                              f'(exit {proc.returncode}): {proc.stderr.strip()[-2000:]}')
    if 'error' in result:
        raise ValueError(result['error'])
    times = {int(k): v for k, v in result['seconds'].items()}
    segments_s = sum(counts[s] * _interpolate(times, s) for s in counts)
    elems = sum(s * c for s, c in counts.items())
    # Packing into the buffer and the means back: a copy of the whole buffer each way, on
    # the cores a node's ranks share (all nodes' on the emulated cluster's shared cores).
    # ChainerMN's naive (one segment per array) packs nothing and checks no layout.
    sharers = machine.ranks_per_node / float(machine.cores)
    if machine.shared_cores:
        sharers = P / float(machine.shared_cores)
    # The exact sum: one more read of every value, for its array's largest (its encoding
    # and decoding are the schedule's: the receivers' sums, the division's pass).
    moved = (3 if exact else 2) * elems * itemsize
    copies = moved * machine.copy_s_per_B * max(1.0, sharers)
    once = result['per_call']  # the layout check (and shm's closing barrier)
    if segment_bytes is None:
        copies = once = 0.0
    return {'seconds': segments_s + copies + once, 'segments_s': segments_s, 'copies_s': copies,
            'once_s': once,
            'simulated_sizes': sizes, 'segment_counts': counts, 'segment_times': times,
            'messages': result['messages'], 'wall_s': result['wall_s'],
            'mode': result['mode']}
