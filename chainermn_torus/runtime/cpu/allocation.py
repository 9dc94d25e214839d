"""Freed memory kept for the next iteration, so that arrays made again fault no page in.

An iteration makes and frees the same arrays at every step: activations, gradients, the
outputs of oneDNN's primitives and numba's kernels. glibc's malloc gives each array above
its mmap threshold (128 KiB, raised as arrays are freed, at most 32 MiB) pages of its own
and hands them back to the kernel when it is freed, so the next step faults every page in
again, zeroed, under the process's memory lock (threads wait for each other there).
Measured on ResNet-50 at 224 px, 2 threads: batch 8, 16,600 page faults and 0.11 s of
system time per iteration; batch 32 (the seeds' batch per process), 70,300 faults, 1.19 s
of system time, 3.73 s per iteration. With freed memory kept: 166 and none, 2.65 s at
batch 32 (0.71x), for a resident size 1.3 GB larger (2.3 -> 3.6 GB: the largest step's
arrays, kept with the gaps between them). docs/compute.md, "The fixed cost of an
iteration".

``keep()`` tells malloc (``mallopt``) to take every array from its heap, never from pages of
its own (``M_MMAP_MAX`` 0), and to keep freed memory instead of trimming it
(``M_TRIM_THRESHOLD``, ``M_TOP_PAD``). ``CHAINERMN_TORUS_KEEP_FREED_MEMORY=0`` leaves
malloc as it is (a node short of memory). Where the C library is not glibc, nothing is
changed, said once.
"""
import ctypes

from chainermn_torus import config
from chainermn_torus.process import STATE
from chainermn_torus.runtime import report

__all__ = ['keep', 'kept', 'release']

# glibc's malloc.h
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
_TOP_PAD = 64 << 20  # grow the heap 64 MiB beyond each need: fewer brk calls
# glibc's defaults (malloc.c: DEFAULT_MMAP_MAX, DEFAULT_TRIM_THRESHOLD, DEFAULT_TOP_PAD), what
# release() puts back; its dynamic mmap threshold stays off once an option was set.
_DEFAULTS = ((_M_MMAP_MAX, 65536), (_M_TRIM_THRESHOLD, 128 << 10), (_M_TOP_PAD, 128 << 10))


def kept():
    """Whether freed memory is kept in this process (``keep`` applied it)."""
    return STATE.allocation.get('kept', False)


def keep(given=None, rank=None):
    """Apply ``given`` (the launcher's ``--keep-freed-memory``), else
    ``CHAINERMN_TORUS_KEEP_FREED_MEMORY`` (default on), to this process: the first call
    decides. Returns whether freed memory is kept."""
    if 'kept' in STATE.allocation:
        return STATE.allocation['kept']
    on = config.current().pick('keep_freed_memory', given, '--keep-freed-memory')[0]
    STATE.allocation['kept'] = False
    if not on:
        return False
    try:
        libc = ctypes.CDLL(None)  # this process's C library, loaded already: no search
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc's, whose options these are
    except (OSError, AttributeError):
        report.say('freed memory is not kept: the C library is not glibc (each iteration '
                   'faults its new arrays in)', rank, key='allocation not glibc')
        return False
    done = _mallopt(mallopt, ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2 ** 31 - 1),
                              (_M_TOP_PAD, _TOP_PAD)))
    STATE.allocation['kept'] = done
    return done


def _mallopt(mallopt, options):
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(option, value) == 1 for option, value in options)


def release():
    """Undo ``keep``: malloc's options back to glibc's defaults (large arrays on pages of
    their own again, freed memory trimmed); the next ``keep`` decides anew."""
    if STATE.allocation.pop('kept', False):
        _mallopt(ctypes.CDLL(None).mallopt, _DEFAULTS)
