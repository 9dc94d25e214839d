"""BLAS / OpenMP / numba thread budget per rank.

With R ranks on a node of C cores, every rank running C BLAS threads puts R*C threads on C
cores, and they slow each other down (Kuroda et al. ran FlatMPI, several single-threaded ranks per
node, for this reason). The default budget gives each rank C/R threads:

* if the launcher bound this rank to a set of CPUs (its affinity mask is smaller than the
  machine), the budget is the number of CPUs in that mask: the launcher already divided;
* otherwise it is the node's physical cores divided by the ranks on this node (R from the
  communicator's ``intra_size``), at least 1.

``threads`` (or the environment variable ``CHAINERMN_TORUS_THREADS``) overrides it;
``CHAINERMN_TORUS_THREADS=off`` leaves the libraries' own settings alone. The budget is applied
to every BLAS/OpenMP pool threadpoolctl finds and to numba's pool (the fused and float16
kernels). Every entry point goes through ``ensure``: our communicators apply the default
budget when they are created (so unchanged ChainerMN scripts get it too), the examples and
the loader placement apply an explicit one; oversubscribed numba or BLAS pools were measured
100x slower (two ranks with two spinning numba threads each on two cores).
"""
import os

import psutil
from threadpoolctl import threadpool_info, threadpool_limits

from chainermn_torus import config, settings_table
from chainermn_torus.process import STATE
from chainermn_torus.runtime import report
from chainermn_torus.runtime.cpu import jit

__all__ = ['THREADS_ENV', 'default_threads', 'apply_thread_budget', 'describe_budget', 'ensure',
           'reapply', 'release', 'pools_in_force', 'generation']

THREADS_ENV = settings_table.SETTINGS['threads'].env


def _affinity():
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


# How many times the OpenMP thread count was changed in this process. oneDNN fixes the
# count a primitive runs with when it makes it: one made at 1 thread ran at 1 after the
# budget became 2 (8.3 ms, against 4.4 ms made anew), one made at 2 went on with 2 threads
# after the budget became 1. compute.onednn.geometries makes its primitives again when this
# moves (process.STATE.threads: 'generation', 'openmp').
def generation():
    return STATE.threads['generation']


def _applied(n):
    held = STATE.threads
    if n != held['openmp']:
        held['openmp'] = n
        held['generation'] += 1


def default_threads(intra_size=1):
    """(threads, reason) for a rank sharing its node with ``intra_size - 1`` others."""
    mask = _affinity()
    logical = psutil.cpu_count(logical=True) or len(mask)
    physical = psutil.cpu_count(logical=False) or logical
    if len(mask) < logical:
        return len(mask), f'affinity mask of {len(mask)} CPUs set by the launcher'
    n = max(1, physical // max(1, intra_size))
    return n, f'{physical} physical cores / {intra_size} ranks on this node'


def apply_thread_budget(threads=None, intra_size=1, source=None):
    """Limit BLAS/OpenMP and numba threads of this process to ``threads`` (``source``: the
    option or variable that gave it), else the settings' count; returns what was applied."""
    if threads is not None:
        n = settings_table.parse('threads', threads, source or 'threads')
        # a variable is named; an option or a caller's count is 'requested'
        reason = source if source == THREADS_ENV else 'requested'
    else:
        n, reason = config.current().pick('threads')
    numba = jit.numba()
    if n == 'off':
        return {'threads': None, 'reason': THREADS_ENV + '=off: libraries decide',
                'numba_threads': numba.get_num_threads() if numba else None,
                'pools': sorted({'{}:{}'.format(i.get('internal_api'), i.get('num_threads'))
                                 for i in threadpool_info()})}
    if n is None:
        n, reason = default_threads(intra_size)
    cpus = len(_affinity())
    if n > cpus:  # threads beyond the CPUs this rank may run on only wait for each other
        reason = f'{reason} {n}, capped at the {cpus} CPUs this rank may use'
        n = cpus
    numba_n = None
    if 'before' not in STATE.threads:  # what release() puts back
        STATE.threads['before'] = (numba.get_num_threads() if numba else None,
                                   {i['filepath']: i['num_threads'] for i in threadpool_info()})
    if numba is not None:
        numba_n = min(n, numba.config.NUMBA_NUM_THREADS)
        numba.set_num_threads(numba_n)  # first: it may load an OpenMP runtime (numba's layer)
    threadpool_limits(limits=n)
    _applied(n)
    pools = sorted({'{}:{}'.format(i.get('internal_api'), i.get('num_threads'))
                    for i in threadpool_info()})
    return {'threads': n, 'reason': reason, 'numba_threads': numba_n, 'pools': pools}


def pools_in_force():
    """{pool: threads} now: each BLAS/OpenMP library threadpoolctl finds (by its API, the
    largest where one loads twice) and numba's ('numba'), for checks and reports."""
    out = {}
    for info in threadpool_info():
        api = info.get('internal_api')
        out[api] = max(out.get(api, 0), info.get('num_threads') or 0)
    numba = jit.numba()
    if numba is not None:
        out['numba'] = numba.get_num_threads()
    return out


def describe_budget(budget, rank=None):
    who = '' if rank is None else f'rank {rank}: '
    if budget['threads'] is None:
        return '{}thread budget off ({}); pools {}'.format(who, budget['reason'],
                                                           ', '.join(budget['pools']))
    numba_part = ('{} numba threads'.format(budget['numba_threads'])
                  if budget['numba_threads'] is not None else 'no numba')
    return '{}{} BLAS/OpenMP threads, {} ({}); pools {}'.format(
        who, budget['threads'], numba_part, budget['reason'],
        ', '.join(budget['pools']) or 'none found')


def reapply():
    """The budget in force, again: for a library loaded after it was applied (oneDNN's
    OpenMP runtime), which threadpoolctl could not see then."""
    applied = STATE.threads['applied']  # the budget last applied through ensure()
    if applied is not None and applied['threads'] is not None:
        threadpool_limits(limits=applied['threads'])


def release():
    """Undo the budget: each pool found before it was first applied back to its count then
    (a pool loaded since keeps the budget's), numba's too; the next ``ensure`` applies anew."""
    before = STATE.threads.pop('before', None)
    STATE.threads['applied'] = None
    if before is None:
        return
    numba_n, pools = before
    numba = jit.numba()
    if numba is not None and numba_n is not None:
        numba.set_num_threads(numba_n)
    for info in threadpool_info():
        if info['filepath'] in pools:
            threadpool_limits(limits={info['prefix']: pools[info['filepath']]})
    _applied(max(pools.values(), default=None))


def ensure(comm=None, threads=None, source=None):
    """The budget of this process: applied on the first call, and again whenever ``threads``
    is given (an explicit request, the loader placement's CPU count); later calls without
    ``threads`` return what is in force. Printed by the first rank of each node.

    ``comm``: a ChainerMN communicator (ranks per node, who prints) or None (one rank, silent).
    """
    if STATE.threads['applied'] is not None and threads is None:
        return STATE.threads['applied']
    budget = apply_thread_budget(threads, comm.intra_size if comm is not None else 1, source)
    STATE.threads['applied'] = budget
    if comm is not None:  # a line per node
        report.say(describe_budget(budget, comm.rank), comm.intra_rank)
        if not jit.available():
            report.say(jit.FALLBACK_NOTE, comm.intra_rank)
    return budget
