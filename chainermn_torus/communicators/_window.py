"""An MPI-3 RMA window over memory that MPI allocates, owned by one object.

rsap's put rounds write straight into the partners' packed buffers, so the buffer's memory
is the window's: ``MPI_Win_allocate`` lets MPICH place it in shared memory, and a Put to a
rank of the same node becomes one memcpy (measured at P=2, 102 MB: 3.1 ms against 10.4 ms
for a window created over numpy memory, and 5.0 ms for MPI_Allgather). Creating and freeing
a window are collective: every rank of the row must call them at the same point.

As mpi4py.util's synchronisation objects do with theirs, a ``PutWindow`` allocates its
window, frees it with ``free()``, and says so when used after that.
"""
import atexit

import numpy
from mpi4py import MPI

from chainermn_torus.process import STATE
from chainermn_torus.runtime import report
from chainermn_torus.runtime.files import devshm

__all__ = ['PutWindow', 'check_node_room', 'populate_or_free']


def check_node_room(comm, nbytes, what):
    """Collective over ``comm``: /dev/shm of each node holds ``nbytes`` per rank of ``comm``
    on it (whole pages, plus MPI's bookkeeping), or every rank raises
    runtime.files.devshm.SharedMemoryFull. Returns (what, bytes needed on the node) for
    ``populate``."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        local = node.size
    finally:
        node.Free()
    needed = devshm.pages(nbytes) * local + devshm.MPI_MARGIN
    what = (f'{what} ({local} rank(s) on this node x {report.format_bytes(nbytes)}, in whole '
            f'pages, + {report.format_bytes(devshm.MPI_MARGIN)} for MPI)')
    devshm.check_room(needed, what, comm=comm)
    return what, needed


def populate_or_free(win, array, comm, what, needed):
    """Back ``array``'s pages now (devshm.populate); on failure free ``win`` on every rank
    (collective, as the allocation was) and raise."""
    try:
        devshm.populate(array, what, needed, comm=comm)
    except devshm.SharedMemoryFull:
        win.Free()
        raise


# The windows not freed yet, oldest first (process.STATE.windows; strong references: a
# window MPI holds is never given back by the collector). At the process's normal exit they
# are freed before mpi4py's MPI_Finalize (atexit runs the hooks registered last first, and
# mpi4py registered its own when MPI was imported): left to MPI_Finalize they made UCX print
# 6 warnings per job ("was not returned to mpool ucp_rkeys", "destroying inuse region").
# Freeing is collective; every rank of a window's row made and freed the same windows at the
# same points, so the ones left are the same on each, freed in the same order.


def _free_at_exit():
    while STATE.windows and not MPI.Is_finalized():
        STATE.windows[0].free()


atexit.register(_free_at_exit)  # after mpi4py's (imported above): it runs before it


class PutWindow:
    """``size`` elements of ``dtype`` on every rank of ``comm``, as ``array`` and ``win``.

    ``passive``: one passive-target epoch (``MPI_Win_lock_all``) for the window's life, for
    synchronisation by flush and messages instead of fences.
    """

    def __init__(self, comm, size, dtype, passive=False, purpose=''):
        dtype = numpy.dtype(dtype)
        # MPICH backs the window of the ranks of a node with one /dev/shm mapping: check
        # that it fits there first, on every rank (a full /dev/shm is a SIGBUS later).
        what, needed = check_node_room(comm, size * dtype.itemsize,
                                       "rsap's RMA window" + purpose)
        self._win = MPI.Win.Allocate(size * dtype.itemsize, disp_unit=dtype.itemsize,
                                     info=MPI.INFO_NULL, comm=comm)
        self.array = numpy.frombuffer(self._win.tomemory(), dtype=dtype, count=size)
        populate_or_free(self._win, self.array, comm, what, needed)
        self.passive = passive
        self.before_free = []  # called before the memory goes (the buffers' views detached)
        if passive:
            self._win.Lock_all(MPI.MODE_NOCHECK)
        STATE.windows.append(self)

    @property
    def win(self):
        if self._win is None:
            raise RuntimeError('chainermn_torus: this RMA window was already freed')
        return self._win

    def free(self):
        """Free the window (collective); a second call does nothing."""
        hooks, self.before_free = self.before_free, []
        for hook in hooks:
            hook()
        win, self._win, self.array = self._win, None, None
        if self in STATE.windows:
            STATE.windows.remove(self)
        if win is None or MPI.Is_finalized() or win == MPI.WIN_NULL:
            return
        if self.passive:
            win.Unlock_all()
        win.Free()
