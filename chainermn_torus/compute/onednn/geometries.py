"""The oneDNN objects made per layer geometry, kept for reuse, within a bound.

A geometry (shapes, strides, paddings, ...) gets its primitives at its first call: making a
convolution's three again costs 0.4-1.5 ms with oneDNN's own cache of generated code warm,
more the first time, where running them costs microseconds more than their arithmetic, so
every layer module keeps them. Every new input shape is a new geometry:
evaluation at another batch size, the last batch of an epoch, multi-scale crops,
variable-size inputs. Kept without a bound they grew with every shape; kept here, the least
recently used geometry is dropped beyond ``CHAINERMN_TORUS_ONEDNN_CACHE`` of them (its
primitives are made again if it recurs). The blocked copies primitives work on are not
per geometry (``primitives.scratch``: one buffer per thread), so what a geometry holds is its
primitives' generated code and descriptors (measured in docs/compute.md).

One cache for every layer module (``conv``, ``pooling``, ``lrn``, ``batchnorm``): the
bound is on what the process holds, whichever layers it runs.

oneDNN fixes the OpenMP thread count a primitive runs with when it makes it, so when the
thread budget changes (``runtime.cpu.threads.generation``: the launcher's placement, a bench
that measures several counts in one process) every geometry is made again, at the new
count.
"""
import atexit
import collections

from chainermn_torus import settings_table
from chainermn_torus.runtime.cpu import threads

__all__ = ['cached', 'bound', 'set_bound', 'clear', 'stats']

_KEPT = collections.OrderedDict()        # (kind, key) -> object, least recently used first
_STATS = {'made': 0, 'reused': 0, 'dropped': 0, 'bound': None, 'threads': None}


def bound():
    """How many geometries are kept: what ``set_bound`` was told (``compute.use``, with
    the settings' ``CHAINERMN_TORUS_ONEDNN_CACHE``), else the table's default."""
    if _STATS['bound'] is None:
        _STATS['bound'] = settings_table.SETTINGS['onednn_cache'].default
    return _STATS['bound']


def set_bound(n):
    """Keep at most ``n`` geometries from now on (the oldest beyond it dropped)."""
    _STATS['bound'] = settings_table.parse('count', n, 'onednn cache bound')
    _trim()


def _trim():
    limit = bound()
    while len(_KEPT) > limit:
        _KEPT.popitem(last=False)
        _STATS['dropped'] += 1


def cached(kind, key, make):
    """The object of ``kind`` ('conv', 'pooling', ...) for ``key``, made by ``make(*key)`` at
    its first call or after it was dropped."""
    entry = (kind, key)
    if _STATS['threads'] != threads.generation():  # made for another thread count
        _STATS['threads'] = threads.generation()
        _STATS['dropped'] += len(_KEPT)
        _KEPT.clear()
    found = _KEPT.get(entry)
    if found is not None:
        _KEPT.move_to_end(entry)
        _STATS['reused'] += 1
        return found
    found = make(*key)
    _KEPT[entry] = found
    _STATS['made'] += 1
    _trim()
    return found


def clear():
    """Drop every kept geometry (their primitives are freed with them)."""
    _KEPT.clear()


# Freed while oneDNN's binding is whole: left to the interpreter's end, a primitive's
# __del__ may run after the modules' names are cleared, and each says an ignored exception.
atexit.register(clear)


def stats():
    """{'kept', 'bound', 'made', 'reused', 'dropped', 'by kind'}: for the docs and the tests."""
    kinds = collections.Counter(kind for kind, _ in _KEPT)
    return {'kept': len(_KEPT), 'bound': bound(), 'made': _STATS['made'],
            'reused': _STATS['reused'], 'dropped': _STATS['dropped'], 'by kind': dict(kinds)}
