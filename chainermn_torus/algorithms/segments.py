"""How a packed buffer is cut into segments: what the communicators send one at a time.

Segments bound the memory a collective touches at once and let large arrays go straight
from the gradient (``communicators._packing``): 4 MiB by measurement (``config``,
``segment_bytes``). The simulator cuts the gradient sets the same way (``segment_sizes``).
"""
import collections
import math

from chainermn_torus.algorithms import gradient_sets

__all__ = ['plan_segments', 'split_plan', 'segments_between', 'segment_sizes']


def plan_segments(offsets, segment_elems, direct_min_elems=None):
    """Split a buffer into segments (lo, hi, index) of at most ``segment_elems`` elements.

    ``offsets``: where each array starts, then the buffer's size (a layout's offsets).
    ``index`` is the array a segment lies in when that array is large (at least
    ``direct_min_elems``, default a quarter segment) and so worth sending straight from the
    gradient; runs of small arrays form packed segments with index None. With
    ``segment_elems`` 0 the whole buffer is one packed segment.
    """
    offs = [int(o) for o in offsets]
    total = offs[-1]
    if total == 0:
        return []
    if not segment_elems:
        return [(0, total, None)]
    if direct_min_elems is None:
        direct_min_elems = max(1, segment_elems // 4)
    plan = []
    group = None  # start of a run of small arrays

    def flush(end):
        if group is not None and end > group:
            plan.extend((a, b, None) for a, b in segments_between(group, end, segment_elems))

    for i in range(len(offs) - 1):
        lo, hi = offs[i], offs[i + 1]
        if hi - lo >= direct_min_elems:
            flush(lo)
            group = None
            plan.extend((a, b, i) for a, b in segments_between(lo, hi, segment_elems))
        elif group is None:
            group = lo
        elif hi - group > segment_elems:
            flush(lo)
            group = lo
    flush(total)
    return plan


def split_plan(plan, bounds):
    """The segments of ``plan`` cut at ``bounds`` (sorted element offsets, first 0, last
    the buffer's size): one list of segments per range [bounds[k], bounds[k + 1])."""
    out = [[] for _ in range(len(bounds) - 1)]
    k = 0
    for lo, hi, index in plan:
        while lo < hi:
            while bounds[k + 1] <= lo:
                k += 1
            end = min(hi, int(bounds[k + 1]))
            out[k].append((lo, end, index))
            lo = end
    return out


def segments_between(lo, hi, segment_elems):
    return [(a, min(a + segment_elems, hi)) for a in range(lo, hi, segment_elems)]


def segment_sizes(model, segment_bytes, itemsize=4):
    """{elements: count} of the segments the communicators cut the model's buffer into.

    ``model``: a gradient set's name (its real parameter shapes, cut by ``plan_segments``
    as the communicators do), or a number of elements (cut into equal segments).
    ``segment_bytes`` None: one segment per parameter array, as ChainerMN's ``naive`` sends
    them (one MPI_Allreduce each). Segments are cut in bytes: a float16 buffer's hold
    twice the elements.
    """
    if segment_bytes is None:
        if not isinstance(model, str):
            raise ValueError('chainermn_torus: one segment per array needs a model\'s '
                             'arrays ({}), not a byte count'.format(
                                 ', '.join(gradient_sets.GRADIENT_SETS)))
        sizes = [math.prod(s) for _, s in gradient_sets.model_params(model)]
        return dict(collections.Counter(sizes))
    seg = segment_bytes // itemsize if segment_bytes else 0
    if isinstance(model, str):
        offsets = [0]
        for _, shape in gradient_sets.model_params(model):
            offsets.append(offsets[-1] + math.prod(shape))
        sizes = [hi - lo for lo, hi, _ in plan_segments(offsets, seg)]
    else:
        total = int(model)
        if not seg:
            sizes = [total]
        else:
            sizes = [min(seg, total - lo) for lo in range(0, total, seg)]
    return dict(collections.Counter(sizes))
