"""Where a training step's time goes, for any communicator (ours or ChainerMN's).

One wrapper, used by the examples and the benchmarks alike: ``time_calls(owner, name,
stats, key)`` replaces ``owner.name`` by a wrapper that adds each call's wall-clock seconds
to ``stats[key]`` (an instance attribute shadowing the method, so only this object is
timed). ``time_gradient_communication(comm)`` is that for ``multi_node_mean_grad``, so that
the examples report the same figure for ``naive`` and for ``rsap``.
"""
import functools

from chainermn_torus.communicators import capabilities
from chainermn_torus.runtime import timeline
from chainermn_torus.runtime.chainer_glue import patches

__all__ = ['timed', 'time_calls', 'untime', 'time_gradient_communication']


def timed(fn, stats, key, count_key=None):
    """``fn`` wrapped: each call adds its seconds to ``stats[key]`` (and 1 to
    ``stats[count_key]`` when given), also when it raises."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        # not on the timeline: the communicators record their own phases there
        with timeline.timed(None, stats, key, count_key):
            return fn(*args, **kwargs)
    return wrapper


def time_calls(owner, name, stats, key, count_key=None):
    """Time every call of ``owner.name`` into ``stats``; returns ``stats``. An instance
    patch of the group ``timing`` (``runtime.chainer_glue.patches``): ``untime(owner)``
    undoes it."""
    patches.apply(owner, name, timed(getattr(owner, name), stats, key, count_key), 'timing',
                  f'the time spent in {name} is reported')
    return stats


def untime(owner):
    """Undo every ``time_calls`` on ``owner``."""
    return patches.uninstall('timing', owner=owner)


def time_gradient_communication(comm):
    """Wrap comm.multi_node_mean_grad (and, with virtual ranks, ``mean_grad_sets``, which
    the step calls instead); returns a dict {'seconds': float, 'calls': int}."""
    stats = time_calls(comm, 'multi_node_mean_grad', {'seconds': 0.0, 'calls': 0},
                       'seconds', 'calls')
    if capabilities.virtual_ranks(comm) is not None:
        time_calls(comm, 'mean_grad_sets', stats, 'seconds', 'calls')
    return stats
