"""rsap: Reduce-Scatter, All-reduce, Put (seed 003): rsaa with the last phase as MPI-3 RMA.

For each segment of the packed buffer (the shared steps 1-3 live in ``_torus``):
  1. reduce-scatter in the row, 2. all-reduce of the 1/M chunk in the column, 3. divide the
  chunk by P and store it at its place in the result buffer (the packed buffer itself), then
  4. put rounds: recursive doubling in the row. In round i, position q puts every chunk it
     holds into position q XOR 2^i's window at the same offset, so nothing is copied on the
     receiving side. MPI_Win_fence closes each round.

One window covers the packed buffer, whose memory MPI allocates (MPI_Win_allocate); it is
created with the buffer (creation is collective and costly) and reused on every call until
the model's layout changes.

M need not be a power of two. With M' the largest power of two <= M, the positions q >= M'
("extras") first put their chunk to q - M'; the first M' positions then run the doubling
rounds carrying two chunk ranges each (their own group, and the group shifted by M'); a last
round puts the full result to each extra. That costs two fences more than a power of two.

Variants (options, see the class): ``sync='pscw'`` synchronises each round with its partners
only; ``reduce_scatter='accumulate'`` does phase 1 one-sided too; ``shm`` (the default where
rows lie inside nodes) replaces phases 1 and 4 by shared-memory reads (``_shm``).
"""

import time

import numpy
from mpi4py import MPI

from chainermn_torus.algorithms.rsap import put_rounds
from chainermn_torus.communicators import _packing
from chainermn_torus.communicators._base import TorusCommunicatorBase
from chainermn_torus.communicators._torus import TorusPhases
from chainermn_torus.communicators._window import PutWindow

__all__ = ['RsapCommunicator']


def _window_of(buf):
    """The MPI window of a buffer whose memory is a PutWindow's, else None."""
    return buf.memory.win if isinstance(buf.memory, PutWindow) else None


SYNC_CHOICES = ('fence', 'notify', 'pscw')
REDUCE_SCATTER_CHOICES = ('collective', 'accumulate')
DEFAULT_SYNC = 'fence'
DEFAULT_REDUCE_SCATTER = 'collective'


def _choice(name, value, choices, default):
    if value is None:
        return default
    if value not in choices:
        raise ValueError('chainermn_torus: rsap {} must be one of {}, got {!r}'.format(
            name, ', '.join(repr(c) for c in choices), value))
    return value


class RsapCommunicator(TorusPhases, TorusCommunicatorBase):
    """rsap; options beyond rsaa's:

    sync: how the put rounds are separated. 'fence' (MPI_Win_fence over the row, as seed
        003); 'notify' (partners only, the paper's future work: a passive-target epoch held
        for the window's life, and per round Put, MPI_Win_flush, then a zero-byte message
        telling the target its data has landed); 'pscw' (the same idea with MPI's
        post/start/complete/wait: experimental, and says so through Chainer's experimental
        warning: it hangs now and then with the MPICH 5.0.2 wheel at four or more ranks,
        even in a 20-line pairwise loop, scripts/repro_pscw_hang.py, so 'notify' is the
        partner-only variant to use; kept for MPIs where PSCW works, tested on 2 ranks).
    reduce_scatter: phase 1 as 'collective' (MPI_Reduce_scatter_block) or 'accumulate'
        (every position MPI_Accumulate-s chunk k into position k's window, the other future
        work; the order in which contributions arrive varies, so the sum can differ in the
        last bit from run to run, though never between ranks: one rank sums each chunk).
    shm: as rsaa's; giving ``sync`` or ``reduce_scatter`` keeps the default (None) off,
        since with shm there are no puts.
    """

    name = 'rsap'
    gather_phase = 'put'

    def __init__(self, mpi_comm=None, grid=None, segment_size=None, allreduce_grad_dtype=None,
                 shm=None, sync=None, reduce_scatter=None):
        super(RsapCommunicator, self).__init__(mpi_comm, grid=grid, segment_size=segment_size,
                                               allreduce_grad_dtype=allreduce_grad_dtype)
        self.sync = _choice('sync', sync, SYNC_CHOICES, DEFAULT_SYNC)
        if self.sync == 'pscw':
            import chainer
            chainer.utils.experimental("chainermn_torus rsap sync='pscw' (hangs at 4+ ranks "
                                       "with MPICH 5.0.2: scripts/repro_pscw_hang.py)")
        self.reduce_scatter_mode = _choice('reduce_scatter', reduce_scatter,
                                           REDUCE_SCATTER_CHOICES, DEFAULT_REDUCE_SCATTER)
        self._options.update(sync=sync, reduce_scatter=reduce_scatter)
        explicit = sync is not None or reduce_scatter is not None
        if shm and explicit:
            raise ValueError(
                'chainermn_torus: rsap shm=True has no put or reduce-scatter messages, so '
                'sync={!r} / reduce_scatter={!r} do not apply; leave them out or set '
                'shm=False'.format(sync, reduce_scatter))
        self._setup_shm(shm, wanted_by_default=not explicit)
        if self.reduce_scatter_mode == 'accumulate' and self.allreduce_grad_dtype is not None \
                and self.allreduce_grad_dtype == numpy.float16:
            raise ValueError('chainermn_torus: rsap reduce_scatter=\'accumulate\' needs an MPI '
                             'sum, which float16 has not; use allreduce_grad_dtype float32 or '
                             'reduce_scatter=\'collective\'')
        pos = self.grid.pos
        # Only this position's puts, per round: the schedule is fixed by M.
        rounds = put_rounds(self.grid.M)
        self._my_rounds = [[(t, a, b) for (o, t, a, b) in rnd if o == pos] for rnd in rounds]
        self._groups = []
        self._notify_comm = None
        if self.sync == 'notify':
            # Notifications on their own communicator: they can never match user messages.
            self._notify_comm = self.grid.row_comm.Dup()
            self._sources = [sorted({o for (o, t, a, b) in rnd if t == pos}) for rnd in rounds]
        if self.sync == 'pscw':
            # Per round: the group this position puts to and the group that puts to it.
            world = self.grid.row_comm.Get_group()
            for rnd in rounds:
                targets = sorted({t for (o, t, a, b) in rnd if o == pos})
                origins = sorted({o for (o, t, a, b) in rnd if t == pos})
                self._groups.append((world.Incl(targets) if targets else None,
                                     world.Incl(origins) if origins else None))
            world.Free()

    def _describe_variant(self):
        if self.shm:
            return super(RsapCommunicator, self)._describe_variant()
        return ', puts synchronised by {}, reduce-scatter by {}'.format(
            {'fence': 'MPI_Win_fence', 'notify': 'flush + notification to each partner',
             'pscw': 'post/start/complete/wait'}[self.sync],
            'MPI_Reduce_scatter_block' if self.reduce_scatter_mode == 'collective'
            else 'MPI_Accumulate')

    def _row_reduce_scatter(self, part, src, buf, lo):
        win, op, mpi_type = _window_of(buf), buf.reducer.op, buf.mpi_type
        # Accumulate needs an MPI sum (float16 set later by set_config has none) and a window.
        if self.reduce_scatter_mode != 'accumulate' or op is None or win is None:
            return super(RsapCommunicator, self)._row_reduce_scatter(part, src, buf, lo)
        M, pos = self.grid.M, self.grid.pos
        c = part.size // M
        mine = part[pos * c:(pos + 1) * c]
        if src is not None:
            mine[...] = src[pos * c:(pos + 1) * c]  # the peers add into it
        origin = part if src is None else src
        passive = self.sync == 'notify'  # the window is in a passive epoch: no fences
        if passive:
            self.progress(self.grid.row_comm, 'Barrier')
        else:
            self._fence(win, MPI.MODE_NOPRECEDE)
        for step in range(1, M):  # start at the next position: targets spread out
            k = (pos + step) % M
            win.Accumulate([origin[k * c:(k + 1) * c], mpi_type], k,
                           target=(lo + k * c, c, mpi_type), op=op)
        if passive:
            win.Flush_all()
            self.progress(self.grid.row_comm, 'Barrier')
            win.Sync()
        else:
            win.Fence(MPI.MODE_NOSUCCEED)
        return mine

    def _fence(self, win, assertion):
        # A fence has no non-blocking form: when polling, everyone meets first in a polled
        # barrier, so that the fence itself does not spin waiting for late ranks.
        if self.progress.polling:
            self.progress(self.grid.row_comm, 'Barrier')
        win.Fence(assertion)

    def _row_gather(self, buf, lo, c):
        """Phase 3 as put rounds: chunks go straight into the partners' windows."""
        if self.grid.M == 1:
            return
        win, array, mpi_type = _window_of(buf), buf.array, buf.mpi_type
        if self.sync == 'pscw':
            return self._put_pscw(win, array, lo, c, mpi_type)
        if self.sync == 'notify':
            return self._put_notify(win, array, lo, c, mpi_type)
        self._fence(win, MPI.MODE_NOPRECEDE)
        last = len(self._my_rounds) - 1
        for i, puts in enumerate(self._my_rounds):
            for target, a, b in puts:
                start, n = lo + a * c, (b - a) * c
                win.Put([array[start:start + n], mpi_type], target,
                        target=(start, n, mpi_type))
            win.Fence(MPI.MODE_NOSUCCEED if i == last else 0)

    def _put_notify(self, win, array, lo, c, mpi_type):
        # No "ready" message is needed before a put: a partner's target region is free once
        # the partner has entered this call's reduce-scatter, which this rank's own
        # reduce-scatter result already depends on.
        comm = self._notify_comm
        for i, puts in enumerate(self._my_rounds):
            sent = []
            for target, a, b in puts:
                start, n = lo + a * c, (b - a) * c
                win.Put([array[start:start + n], mpi_type], target, target=(start, n, mpi_type))
                if target not in sent:
                    sent.append(target)
            requests = []
            for target in sent:
                win.Flush(target)  # the data is in the target's memory ...
                requests.append(comm.Issend([None, 0, MPI.BYTE], target, tag=i))  # ... say so
            for origin in self._sources[i]:
                self.progress.wait(comm.Irecv([None, 0, MPI.BYTE], origin, tag=i))
            for req in requests:
                self.progress.wait(req)
            if self._sources[i]:
                win.Sync()  # make the landed data visible to this rank's loads

    def _put_pscw(self, win, array, lo, c, mpi_type):
        # Each round is an access epoch to the positions this one puts to and an exposure
        # epoch to those that put to it. Posting before starting means no rank can wait on
        # a partner that waits on it. Wait returns once every origin's puts have landed, so
        # the next round may forward what this one received.
        for puts, (targets, origins) in zip(self._my_rounds, self._groups):
            if origins is not None:
                win.Post(origins)
            if targets is not None:
                win.Start(targets)
                for target, a, b in puts:
                    start, n = lo + a * c, (b - a) * c
                    win.Put([array[start:start + n], mpi_type], target,
                            target=(start, n, mpi_type))
                win.Complete()
            if origins is not None:
                if self.progress.polling:
                    while not win.Test():
                        time.sleep(self.progress.interval)
                else:
                    win.Wait()

    def finalize(self):
        for pair in self._groups:
            for g in pair:
                if g is not None and not MPI.Is_finalized():
                    g.Free()
        self._groups = []
        if self._notify_comm is not None and not MPI.Is_finalized():
            self._notify_comm.Free()
        self._notify_comm = None
        super(RsapCommunicator, self).finalize()

    def _new_buffer(self, layout, segment_elems):
        buf = self._shm_buffer(layout, segment_elems)
        if buf is not None:
            return buf
        if self.grid.M == 1 or layout.size == 0:
            return super(RsapCommunicator, self)._new_buffer(layout, segment_elems)
        # The buffer's memory is the window's (see _window: a Put to the same node is then
        # one memcpy); 'notify' holds one passive epoch for the window's life.
        window = PutWindow(self.grid.row_comm, layout.size, layout.dtype,
                           passive=self.sync == 'notify')
        buf = _packing.PackedBuffer(layout, segment_elems, array=window.array, memory=window)
        # Freed only by finalize() or buffer eviction, which every rank reaches at the same
        # point. Never from a garbage-collection finalizer: MPI_Win_free is collective, and
        # the collector runs at different moments on different ranks, so a free called from
        # it met other collectives on the other ranks and deadlocked (seen, 2 runs in 12 at
        # P=3). A communicator dropped without finalize() keeps its window until exit.
        return buf

