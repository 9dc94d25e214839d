"""Time spent in gradient communication, for any communicator (ours or ChainerMN's).

``time_gradient_communication(comm)`` wraps the instance's ``multi_node_mean_grad`` so that
examples can report the same figure for ``naive`` and for ``rsap``.
"""
import functools
import time

__all__ = ['time_gradient_communication']


def time_gradient_communication(comm):
    """Wrap comm.multi_node_mean_grad; returns a dict {'seconds': float, 'calls': int}."""
    stats = {'seconds': 0.0, 'calls': 0}
    inner = comm.multi_node_mean_grad

    @functools.wraps(inner)
    def timed(model, zero_fill=False):
        t0 = time.perf_counter()
        try:
            return inner(model, zero_fill)
        finally:
            stats['seconds'] += time.perf_counter() - t0
            stats['calls'] += 1

    comm.multi_node_mean_grad = timed
    return stats
