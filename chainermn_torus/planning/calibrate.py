"""`chainermn-torus calibrate`: measure the planner's network figures on this machine/cluster.

Run under mpiexec with ranks on two nodes at least (one more on the first node gives the
intra-node figures too):

    mpiexec -n 4 -ppn 2 chainermn-torus calibrate --output network.json

Rank 0 ping-pongs with the first rank on another host and with the first rank on its own
host: 8 bytes for the latency (half the round trip) and a large message for the bandwidth
(beta = (half round trip - alpha) / bytes), and the same for an MPI_Put between fences
(beta_put: one-sided transfers can run slower than messages); then the time per round of
back-to-back one-sided rounds between nodes, synchronised by MPI_Win_fence (fence_inter) or
by MPI_Win_flush and a notification (flush_inter), which the simulator charges to rsap's put
rounds between nodes. The reduction rate (gamma) and the
memory copy rate (mem) are timed with numpy on rank 0. Medians of several repetitions. Every wait
has a deadline, so an unreachable peer ends in an error naming it instead of a hang.
"""
import socket
import statistics
import time

import numpy

__all__ = ['calibrate']

TAG = 4242


def _wait(req, deadline, what):
    while not req.Test():
        if time.monotonic() > deadline:
            raise RuntimeError(f'chainermn_torus calibrate: no reply from {what} within the '
                               'timeout; is the peer reachable (firewall, MPI interface)?'
                               )
        time.sleep(0)


def _pingpong(comm, peer, nbytes, reps, timeout, what, leader):
    from mpi4py import MPI
    buf = numpy.zeros(max(1, nbytes), numpy.uint8)
    times = []
    for _ in range(reps):
        deadline = time.monotonic() + timeout
        t0 = time.perf_counter()
        if leader:
            _wait(comm.Isend([buf, MPI.BYTE], peer, TAG), deadline, what)
            _wait(comm.Irecv([buf, MPI.BYTE], peer, TAG), deadline, what)
        else:
            _wait(comm.Irecv([buf, MPI.BYTE], peer, TAG), deadline, what)
            _wait(comm.Isend([buf, MPI.BYTE], peer, TAG), deadline, what)
        times.append((time.perf_counter() - t0) / 2)
    return statistics.median(times[1:] if len(times) > 2 else times)


def _put_rate(comm, peer, nbytes, reps):
    """Seconds for rank 0 to MPI_Put ``nbytes`` into ``peer``'s window (fence to fence)."""
    from mpi4py import MPI
    size = nbytes if comm.rank in (0, peer) else 0
    win = MPI.Win.Allocate(size, 1, comm=comm)
    src = numpy.ones(nbytes, numpy.uint8)
    times = []
    for _ in range(reps):
        comm.Barrier()
        win.Fence()
        t0 = time.perf_counter()
        if comm.rank == 0:
            win.Put([src, MPI.BYTE], peer, target=(0, nbytes, MPI.BYTE))
        win.Fence()
        times.append(time.perf_counter() - t0)
    win.Free()
    return statistics.median(times)


def _cross_partner(comm, hosts):
    """The rank with this rank's local index on the next host (every rank puts across)."""
    names = sorted(set(hosts), key=hosts.index)
    mine = [r for r, h in enumerate(hosts) if h == hosts[comm.rank]]
    nxt = [r for r, h in enumerate(hosts) if h == names[(names.index(hosts[comm.rank]) + 1)
                                                        % len(names)]]
    return nxt[mine.index(comm.rank) % len(nxt)]


def _sync_rounds(comm, hosts, rounds=20, reps=3):
    """Seconds per round of back-to-back one-sided rounds in which every rank puts 8 bytes
    to a rank on another node: (fence rounds, put + flush + notification rounds).

    Measured in a run of rounds, as rsap makes them, not one epoch alone: on the emulated
    cluster (MPICH over TCP) a lone fence epoch took 0.3 ms but a run of them 5-9 ms each.
    The median over ``reps`` runs of the mean per round.
    """
    from mpi4py import MPI
    target = _cross_partner(comm, hosts)
    targets = comm.allgather(target)
    origin = targets.index(comm.rank) if comm.rank in targets else None
    src = numpy.ones(8, numpy.uint8)
    fence, notify = [], []
    win = MPI.Win.Allocate(8, 1, comm=comm)
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(rounds):
            win.Fence()
            win.Put([src, MPI.BYTE], target, target=(0, 8, MPI.BYTE))
        win.Fence()
        fence.append((time.perf_counter() - t0) / rounds)
    win.Lock_all()
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        for k in range(rounds):
            win.Put([src, MPI.BYTE], target, target=(0, 8, MPI.BYTE))
            win.Flush(target)
            req = comm.Issend([None, 0, MPI.BYTE], target, tag=TAG + 1)
            if origin is not None:
                comm.Recv([None, 0, MPI.BYTE], origin, tag=TAG + 1)
            req.Wait()
        notify.append((time.perf_counter() - t0) / rounds)
    win.Unlock_all()
    win.Free()
    times = numpy.array([statistics.median(fence), statistics.median(notify)])
    comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
    return float(times[0]), float(times[1])


def _local_rates(nbytes, reps=5):
    a = numpy.ones(nbytes // 4, numpy.float32)
    b = numpy.ones_like(a)
    c = numpy.empty_like(a)
    add, copy = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        numpy.add(a, b, out=c)
        add.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        numpy.copyto(c, a)
        copy.append(time.perf_counter() - t0)
    return statistics.median(add) / a.nbytes, statistics.median(copy) / a.nbytes


def calibrate(comm, large=16 << 20, reps=9, timeout=20.0, name=None):
    """Measure on ``comm``; returns the network dict on rank 0 (None elsewhere)."""
    host = socket.gethostname()
    hosts = comm.allgather(host)
    if comm.size < 2:
        raise RuntimeError('chainermn_torus calibrate: needs 2 ranks or more (under mpiexec), '
                           'got 1')
    inter = next((r for r, h in enumerate(hosts) if h != hosts[0]), None)
    intra = next((r for r, h in enumerate(hosts) if h == hosts[0] and r != 0), None)
    result = {}
    for key, peer in (('inter', inter), ('intra', intra)):
        if peer is None:
            continue
        if comm.rank in (0, peer):
            other = peer if comm.rank == 0 else 0
            what = f'rank {other} on {hosts[other]}'
            a = _pingpong(comm, other, 8, reps, timeout, what, comm.rank == 0)
            t = _pingpong(comm, other, large, max(3, reps // 2), timeout, what, comm.rank == 0)
            result[key] = (a, max(t - a, 1e-12) / large)
        comm.Barrier()
    put = _put_rate(comm, inter, large, max(3, reps // 2)) if inter is not None else None
    # The synchronisation of one-sided rounds between nodes, which the simulator charges
    # to rsap's put rounds: it can cost far more than the latency (see _sync_rounds).
    fence, flush = _sync_rounds(comm, hosts) if inter is not None else (None, None)
    if comm.rank != 0:
        return None
    gamma, mem = _local_rates(64 << 20)
    notes = []
    if 'inter' not in result:
        notes.append('all ranks on one host: inter-node figures are the intra-node ones')
    if 'intra' not in result:
        notes.append('one rank per host: intra-node figures from a memory copy')
        result['intra'] = (1e-6, mem)
    if 'inter' not in result:
        result['inter'] = result['intra']
    return {'name': name or f'calibrated on {host} ({comm.size} ranks, {len(set(hosts))} hosts)',
            'alpha_inter': result['inter'][0], 'beta_inter': result['inter'][1],
            'alpha_intra': result['intra'][0], 'beta_intra': result['intra'][1],
            'gamma': gamma, 'mem': mem,
            'beta_put': None if put is None else max(put - result['inter'][0], 1e-12) / large,
            'fence_inter': fence, 'flush_inter': flush,
            'source': 'chainermn-torus calibrate, {}; {}'.format(
                time.strftime('%Y-%m-%d %H:%M'), '; '.join(notes) or 'two hosts measured')}
