"""rsap's phases 1 and 3 for one buffer (``PutRows``) and its modes as strategies, each made
with the buffer, handed the row communicator, the wait (``_progress``) and the window it
needs, owning what it makes (a communicator, groups) until ``free()``.

How the put rounds are synchronised (phase 3, ``sync``):
  fence   MPI_Win_fence over the row opens the epoch and closes every round (Tamura & Hanawa);
  notify  partners only, the paper's future work: a passive-target epoch held for the
          window's life; per round Put, MPI_Win_flush, then a zero-byte message telling the
          target its data has landed (on a duplicate of the row communicator, so it can
          never match a user's message);
  pscw    the same idea with MPI's post/start/complete/wait: experimental (it hangs now and
          then with the MPICH 5.0.2 wheel at four or more ranks, even in a 20-line pairwise
          loop, scripts/repro_pscw_hang.py), kept for MPIs where PSCW works.
How the row reduce-scatter is done (phase 1, ``reduce_scatter``):
  collective  MPI_Reduce_scatter_block, as rsaa (``engine.MessageRows``);
  accumulate  every position MPI_Accumulate-s chunk k into position k's window (the other
              future work; the order in which contributions arrive varies, so the sum can
              differ in the last bit from run to run, though never between ranks: one rank
              sums each chunk).

Each round's puts come from ``algorithms.rsap.put_rounds``: a position puts chunk range
[a, b) of the segment to ``target`` at the same offset in its window.
"""
import time

import chainer
from mpi4py import MPI

from chainermn_torus.communicators.engine import MessageRows
from chainermn_torus.communicators._window import PutWindow

__all__ = ['PutRows', 'SYNCS', 'REDUCE_SCATTERS', 'FenceSync', 'NotifySync', 'PscwSync',
           'AccumulateReduceScatter']


class PutRows:
    """Phases 1 and 3 of rsap for one buffer whose memory is an RMA window's: the window
    (``_window.PutWindow``, allocated here, for ``size`` elements of ``dtype``) is the
    buffer's memory, freed with the buffer. Freed only by the engine's eviction or its
    ``free()``, which every rank reaches at the same point; never from a garbage-collection
    finalizer: MPI_Win_free is collective, and the collector runs at different moments on
    different ranks, so a free called from it met other collectives on the other ranks and
    deadlocked (seen, 2 runs in 12 at P=3). A communicator dropped without finalize() keeps
    its window until exit.

    ``means``: the window holds only what phase 3 puts, the exact sum's decoded means
    (``_exact``), and phase 1 goes by messages into numpy's memory."""

    scatter_name, gather_name = 'reduce_scatter', 'put'
    reads_peer_floats = False  # (the node-shared rows' exact sum: ``_shm``)

    def __init__(self, row_comm, progress, size, dtype, rounds, sync, reduce_scatter,
                 purpose='', means=False):
        # 'notify' holds one passive epoch for the window's life.
        window = PutWindow(row_comm, size, dtype, passive=SYNCS[sync].passive,
                           purpose=purpose)
        self.memory = window
        self.array, self.means = (None, window.array) if means else (window.array, None)
        win = window.win
        self.sync = SYNCS[sync](row_comm, progress, win, rounds)
        messages = MessageRows(row_comm, progress)
        # Phase 1 by the buffer's reducer (messages), or in the window (accumulate).
        self.phase1_by_reducer = reduce_scatter == 'collective'
        if reduce_scatter == 'collective':
            self.reduce_scatter = messages.reduce_scatter
        else:
            self.reduce_scatter = REDUCE_SCATTERS[reduce_scatter](
                row_comm, progress, win, self.sync.passive, messages.reduce_scatter)

    def gather(self, buf, lo, c):
        """Phase 3 as put rounds: chunks go straight into the partners' windows."""
        array, mpi_type = buf.gathered   # the buffer, or the exact sum's means
        self.sync.put_rounds(array, lo, c, mpi_type)

    def end_call(self):
        pass

    def free(self):
        self.sync.free()  # the window is the buffer's memory: PackedBuffer.release frees it


def fence(row_comm, progress, win, assertion):
    # A fence has no non-blocking form: when polling, everyone meets first in a polled
    # barrier, so that the fence itself does not spin waiting for late ranks.
    if progress.interval is not None:  # polling (read as a value: no call on the hot path)
        progress(row_comm, 'Barrier')
    win.Fence(assertion)


def _puts(win, array, lo, c, mpi_type, puts):
    for target, a, b in puts:
        start, n = lo + a * c, (b - a) * c
        win.Put([array[start:start + n], mpi_type], target, target=(start, n, mpi_type))


class _Sync:
    """Owns what its synchronisation needs, for one window of the row."""

    passive = False  # the window holds one passive-target epoch for its life

    def __init__(self, row_comm, progress, win, rounds):
        self.row_comm, self.progress, self.win = row_comm, progress, win
        self.pos = pos = row_comm.rank
        # Only this position's puts, per round: the schedule is fixed by M.
        self.my_rounds = [[(t, a, b) for (o, t, a, b) in rnd if o == pos] for rnd in rounds]

    def free(self):
        pass


class FenceSync(_Sync):
    describe = 'MPI_Win_fence'

    def put_rounds(self, array, lo, c, mpi_type):
        win = self.win
        fence(self.row_comm, self.progress, win, MPI.MODE_NOPRECEDE)
        last = len(self.my_rounds) - 1
        for i, puts in enumerate(self.my_rounds):
            _puts(win, array, lo, c, mpi_type, puts)
            win.Fence(MPI.MODE_NOSUCCEED if i == last else 0)


class NotifySync(_Sync):
    describe = 'flush + notification to each partner'
    passive = True

    def __init__(self, row_comm, progress, win, rounds):
        super().__init__(row_comm, progress, win, rounds)
        pos = self.pos
        # Notifications on their own communicator: they can never match user messages.
        self.notify_comm = row_comm.Dup()
        self.sources = [sorted({o for (o, t, a, b) in rnd if t == pos}) for rnd in rounds]

    def put_rounds(self, array, lo, c, mpi_type):
        # No "ready" message is needed before a put: a partner's target region is free once
        # the partner has entered this call's reduce-scatter, which this rank's own
        # reduce-scatter result already depends on.
        comm, progress, win = self.notify_comm, self.progress, self.win
        for i, puts in enumerate(self.my_rounds):
            _puts(win, array, lo, c, mpi_type, puts)
            sent = []
            for target, _, _ in puts:
                if target not in sent:
                    sent.append(target)
            requests = []
            for target in sent:
                win.Flush(target)  # the data is in the target's memory ...
                requests.append(comm.Issend([None, 0, MPI.BYTE], target, tag=i))  # ... say so
            for origin in self.sources[i]:
                progress.wait(comm.Irecv([None, 0, MPI.BYTE], origin, tag=i))
            for req in requests:
                progress.wait(req)
            if self.sources[i]:
                win.Sync()  # make the landed data visible to this rank's loads

    def free(self):
        if self.notify_comm is not None and not MPI.Is_finalized():
            self.notify_comm.Free()
        self.notify_comm = None


class PscwSync(_Sync):
    describe = 'post/start/complete/wait'

    @staticmethod
    def warn():
        """Chainer's experimental-feature warning, when a communicator chooses it."""
        chainer.utils.experimental("chainermn_torus rsap sync='pscw' (hangs at 4+ ranks "
                                   "with MPICH 5.0.2: scripts/repro_pscw_hang.py)")

    def __init__(self, row_comm, progress, win, rounds):
        super().__init__(row_comm, progress, win, rounds)
        pos = self.pos
        # Per round: the group this position puts to and the group that puts to it.
        world = row_comm.Get_group()
        self.groups = []
        for rnd in rounds:
            targets = sorted({t for (o, t, a, b) in rnd if o == pos})
            origins = sorted({o for (o, t, a, b) in rnd if t == pos})
            self.groups.append((world.Incl(targets) if targets else None,
                                world.Incl(origins) if origins else None))
        world.Free()

    def put_rounds(self, array, lo, c, mpi_type):
        # Each round is an access epoch to the positions this one puts to and an exposure
        # epoch to those that put to it. Posting before starting means no rank can wait on
        # a partner that waits on it. Wait returns once every origin's puts have landed, so
        # the next round may forward what this one received.
        progress, win = self.progress, self.win
        for puts, (targets, origins) in zip(self.my_rounds, self.groups):
            if origins is not None:
                win.Post(origins)
            if targets is not None:
                win.Start(targets)
                _puts(win, array, lo, c, mpi_type, puts)
                win.Complete()
            if origins is not None:
                if progress.polling:
                    while not win.Test():
                        time.sleep(progress.interval)
                else:
                    win.Wait()

    def free(self):
        for pair in self.groups:
            for g in pair:
                if g is not None and not MPI.Is_finalized():
                    g.Free()
        self.groups = []


class AccumulateReduceScatter:
    """Phase 1 by MPI_Accumulate into the row partners' windows; ``collective`` (rsaa's
    reduce-scatter) where the buffer has no MPI sum (float16 set later by set_config)."""

    describe = 'MPI_Accumulate'

    def __init__(self, row_comm, progress, win, passive, collective):
        self.row_comm, self.progress, self.win = row_comm, progress, win
        self.passive = passive  # the window is in a passive epoch: no fences
        self.collective = collective

    def __call__(self, part, src, buf, lo):
        op, mpi_type, win = buf.reducer.op, buf.mpi_type, self.win
        if op is None:
            return self.collective(part, src, buf, lo)
        row_comm, progress = self.row_comm, self.progress
        M, pos = row_comm.size, row_comm.rank
        c = part.size // M
        mine = part[pos * c:(pos + 1) * c]
        if src is not None:
            mine[...] = src[pos * c:(pos + 1) * c]  # the peers add into it
        origin = part if src is None else src
        if self.passive:
            progress(row_comm, 'Barrier')
        else:
            fence(row_comm, progress, win, MPI.MODE_NOPRECEDE)
        for step in range(1, M):  # start at the next position: targets spread out
            k = (pos + step) % M
            win.Accumulate([origin[k * c:(k + 1) * c], mpi_type], k,
                           target=(lo + k * c, c, mpi_type), op=op)
        if self.passive:
            win.Flush_all()
            progress(row_comm, 'Barrier')
            win.Sync()
        else:
            win.Fence(MPI.MODE_NOSUCCEED)
        return mine


SYNCS = {'fence': FenceSync, 'notify': NotifySync, 'pscw': PscwSync}
# 'collective' is rsaa's own (MessageRows.reduce_scatter); a mode's needs are said here:
# accumulate needs an MPI sum (refused for a float16 transfer).
REDUCE_SCATTERS = {'collective': None, 'accumulate': AccumulateReduceScatter}
NEEDS_MPI_SUM = ('accumulate',)
