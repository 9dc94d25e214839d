"""Run by tests/simulation/test_schedules_mpi.py under mpiexec -n P (P >= 2).

The simulator plays ``algorithms.schedule``; this job checks that those are the calls the
communicators really make. Each variant averages a model whose arrays cut into several
segments with uneven tails; the second call is recorded on every rank: every collective
through the communicator's ``progress`` (the only way its phases call MPI), every put,
fence and flush on its window, every notification, each with its group (as world ranks)
and bytes. The record must equal ``package_probes.calls_of(call_calls(...), rank)`` exactly.
"""
import sys

import chainer
import numpy
from mpi4py import MPI

from chainermn_torus.algorithms import schedule as schedules
from chainermn_torus.communicators import create_variant
from chainermn_torus.communicators._progress import BLOCKING, Progress

import bound  # tests/mpi_workers
import package_probes  # tests/ (world_loop.py puts it on the path)

world = P = RANK = None  # set by bind (bound.py: a world's Dup, or MPI.COMM_WORLD)
bind, _ = bound.binder(globals())


NAMES = {'Reduce_scatter_block': 'reduce_scatter', 'Allreduce': 'allreduce',
         'Allgather': 'allgather', 'Alltoall': 'alltoall', 'Alltoallv': 'alltoall',
         'Barrier': 'barrier'}


def group_of(comm):
    return tuple(comm.Get_group().Translate_ranks(list(range(comm.size)), world.Get_group()))


def nbytes(name, args):
    if name == 'Barrier':
        return 0
    if name in ('Reduce_scatter_block', 'Alltoall', 'Alltoallv'):
        return args[0][0].nbytes  # the send buffer (the exact sum's: none of it to itself)
    return args[1][0].nbytes      # all-reduce / all-gather: the (in-place) buffer


class Recorder(Progress):
    """A wait that stands between a communicator and MPI: records, then makes the real
    call (the communicator is made with it, so every strategy holds it)."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def __call__(self, comm, name, *args, **kwargs):
        self.log.append((NAMES[name], group_of(comm), nbytes(name, args)))
        return BLOCKING(comm, name, *args, **kwargs)


class WindowRecorder:
    def __init__(self, win, row, log):
        self.win, self.row, self.log = win, row, log

    def Put(self, origin, rank, *args, **kwargs):
        self.log.append(('put', (RANK, self.row[rank]), origin[0].nbytes))
        return self.win.Put(origin, rank, *args, **kwargs)

    def Fence(self, assertion=0):
        self.log.append(('fence', self.row, 0))
        return self.win.Fence(assertion)

    def Flush(self, target):
        self.log.append(('flush', (RANK, self.row[target]), 0))
        return self.win.Flush(target)

    def __getattr__(self, name):
        return getattr(self.win, name)


class NotifyRecorder:
    def __init__(self, comm, row, log):
        self.comm, self.row, self.log = comm, row, log

    def Issend(self, buf, dest, tag=0):
        self.log.append(('notify', (RANK, self.row[dest]), 0))
        return self.comm.Issend(buf, dest, tag=tag)

    def __getattr__(self, name):
        return getattr(self.comm, name)


class Model(chainer.Link):
    def __init__(self, sizes):
        super().__init__()
        with self.init_scope():
            for i, n in enumerate(sizes):
                setattr(self, f'p{i:02d}', chainer.Parameter(
                    numpy.zeros(n, numpy.float32)))
        rng = numpy.random.RandomState(RANK)
        for _, p in sorted(self.namedparams()):
            p.grad = rng.standard_normal(p.data.shape).astype(numpy.float32)


def _parts(obj):
    """``obj`` and the package's objects it holds, depth first (bound methods' owners too)."""
    if obj is None:
        return []
    out, todo = [], [obj]
    while todo:
        o = todo.pop()
        if any(o is seen for seen in out):
            continue
        out.append(o)
        for v in vars(o).values():
            v = getattr(v, '__self__', v)
            if type(v).__module__.startswith('chainermn_torus.communicators') \
                    and hasattr(v, '__dict__'):
                todo.append(v)
    return out


def check(variant, grid, wire):
    """``wire``: None (float32), 'fp16' or 'exact' (exact_sum=True)."""
    sizes = [1003, 250, 7, 2501, 96, 5]  # several segments of 1000 elements, uneven tails
    kwargs = {'segment_size': 4000}
    if wire == 'fp16':
        kwargs['allreduce_grad_dtype'] = numpy.float16
    elif wire == 'exact':
        kwargs['exact_sum'] = True
    log = []
    comm = create_variant(variant, world, grid=grid, progress=Recorder(log), **kwargs)
    model = Model(sizes)
    comm.multi_node_mean_grad(model)  # makes the buffer (and window) before recording
    del log[:]
    row = group_of(comm.grid.row_comm) if comm.grid is not None else None
    for buf in list(comm.engine.buffers.values()):
        # The window and rsap's notification comm the row phases (_rsap_modes) were handed.
        for part in _parts(buf.rows) + [buf.memory]:
            if getattr(part, 'win', None) is not None and hasattr(part, 'my_rounds') \
                    or type(part).__name__ == 'AccumulateReduceScatter':
                part.win = WindowRecorder(part.win, row, log)
            if getattr(part, 'notify_comm', None) is not None:
                part.notify_comm = NotifyRecorder(part.notify_comm, row, log)
    comm.multi_node_mean_grad(model)
    (buf,) = comm.engine.buffers.values()
    segments = [hi - lo for lo, hi, _ in buf.plan]
    algorithm = 'shm' if getattr(comm, 'shm', False) else variant
    setup = schedules.Setup(algorithm, P, grid[0] if grid else 1, 2 if wire == 'fp16' else 4,
                            exact=wire == 'exact')
    expected = [tuple(c[:3]) for c in package_probes.calls_of(
        package_probes.call_calls(setup, segments, len(sizes)), RANK) if c.op != 'compute']
    got = [(op, tuple(g), n) for op, g, n in log]
    if got != expected:
        first = next(i for i, (a, b) in enumerate(zip(got + [None] * len(expected),
                                                          expected + [None] * len(got)))
                     if a != b)
        raise AssertionError(f'{variant} grid {grid} {wire or "float32"} rank {RANK}: call {first} '
                             f'differs: recorded {got[first] if first < len(got) else None}, '
                             f'schedule {expected[first] if first < len(expected) else None} '
                             f'({len(got)} recorded, {len(expected)} in the schedule)')
    comm.finalize()
    return len(got)


def check_all(comm):
    """Every variant, grid and dtype on comm; returns (cases, calls compared)."""
    bind(comm)
    grids = [(m, P // m) for m in range(2, P + 1) if P % m == 0] + [(1, P)]
    total = 0
    wires = (None, 'fp16', 'exact')
    cases = [('pure_allreduce', None, w) for w in wires]
    for g in grids:
        cases += [(v, g, w) for v in ('rsaa', 'rsap') for w in wires]
        if g[0] > 1:
            cases += [('rsap_notify', g, None), ('shm', g, None), ('shm', g, 'exact')]
    for variant, grid, wire in cases:
        total += check(variant, grid, wire)
    return len(cases), total


def main():
    cases, total = check_all(MPI.COMM_WORLD)
    world.Barrier()
    print(f'OK rank {RANK} ({cases} cases, {total} calls compared)')
    sys.stdout.flush()


if __name__ == '__main__':
    main()
