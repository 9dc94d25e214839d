"""Chainer's debug mode (``chainer.set_debug(True)``) for the packed-buffer communicators.

Every ChainerMN gradient communicator, in debug mode, checks the averaged gradients once the
all-reduce is done and raises ``ValueError('Parameters diverged after allreduce.')`` when one
is NaN or infinite (``MpiCommunicatorBase._ensure_all_finite``). Ours make the same check at
the same point: after the last segment of the call, before the means are handed back to the
gradients. The packed buffer holds bitwise identical means on every rank, so every rank
raises together and none is left waiting in a collective.

The message starts with ChainerMN's sentence, so code matching it keeps working, and goes on
to name the first array that holds a non-finite mean.

The check reads the buffer once, a segment at a time so that the boolean temporary stays
small (a whole ResNet-50 buffer would need a 25 MB one). Outside debug mode it costs one
``chainer.is_debug()`` call.
"""
import chainer
import numpy

__all__ = ['check_means_finite', 'DIVERGED']

DIVERGED = 'Parameters diverged after allreduce.'  # ChainerMN's message, word for word


def check_means_finite(buf, name):
    """In debug mode, raise ValueError if ``buf.means`` holds a NaN or an infinity."""
    if not chainer.is_debug():
        return
    bad = 0
    first = None
    for lo, hi, _ in buf.plan:
        finite = numpy.isfinite(buf.means[lo:hi])
        if finite.all():
            continue
        missing = finite.size - int(numpy.count_nonzero(finite))
        if first is None:
            first = lo + int(numpy.argmin(finite))
        bad += missing
    if bad:
        raise ValueError('{} ({}: {} non-finite mean{}, the first in {})'.format(
            DIVERGED, name, bad, '' if bad == 1 else 's', _array_at(buf.layout, first)))


def _array_at(layout, offset):
    """The name of the array that holds element ``offset`` of a packed buffer."""
    i = int(numpy.searchsorted(layout.offsets, offset, side='right')) - 1
    if 0 <= i < len(layout.entries):
        return layout.entries[i][0]
    return f'element {offset}'
