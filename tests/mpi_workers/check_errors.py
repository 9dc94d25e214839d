"""Bad input under mpiexec: every rank must raise a clear error, none may hang."""
import sys

import chainer
import numpy
from mpi4py import MPI

import chainermn_torus  # noqa: F401 registers the names; Chainer after it

import bound  # tests/mpi_workers

world = P = RANK = None  # set by bind (bound.py: a world's Dup, or MPI.COMM_WORLD)
bind, create = bound.binder(globals())


class Model(chainer.Link):
    def __init__(self, sizes):
        super().__init__()
        with self.init_scope():
            for i, n in enumerate(sizes):
                setattr(self, f'w{i}', chainer.Parameter(numpy.ones(n, numpy.float32)))
        for _, p in self.namedparams():
            p.grad = numpy.ones_like(p.data)


def expect_error(fn, *fragments):
    try:
        fn()
    except ValueError as e:
        msg = str(e)
        for f in fragments:
            assert f in msg, f'rank {RANK}: {f!r} missing from the message: {msg}'
        return msg
    raise AssertionError(f'rank {RANK}: no error raised (expected one naming {fragments})')


def check_all(comm, names=('pure_allreduce', 'rsaa', 'rsap')):
    bind(comm)
    msg = None  # rank 0's first message, returned as an example
    for name in names if P > 1 else []:
        comm = create(name)
        # Shapes differ on rank 1 (one layer larger): every rank raises, nobody hangs.
        sizes = [10, 20 + (5 if RANK == 1 else 0), 7]
        msg = expect_error(lambda: comm.multi_node_mean_grad(Model(sizes)),
                           'differ between ranks', 'rank 1', 'w1', '(25,)')
        # One rank has an extra array.
        sizes = [10, 20] + ([3] if RANK == P - 1 else [])
        expect_error(lambda: comm.multi_node_mean_grad(Model(sizes)), 'differ between ranks')
        # grad None on rank 0 only, without zero_fill: ranks disagree on what to average.
        model = Model([4, 5])
        if RANK == 0:
            model.w0.grad = None
        expect_error(lambda: comm.multi_node_mean_grad(model, zero_fill=False),
                     'differ between ranks', 'zero_fill=True')
        # Same for bcast_data.
        # Same for bcast_data, in shapes and dtypes (not the bytes it sends).
        text = expect_error(lambda: comm.bcast_data(Model([3, 3 + RANK])), 'parameters differ',
                            '/w1 shape=(3,) dtype=float32 vs /w1 shape=(4,)')
        assert 'zero_fill' not in text, text
        # The communicator still works after the errors.
        model = Model([10, 20, 7])
        for _, p in model.namedparams():
            p.grad[...] = RANK
        comm.multi_node_mean_grad(model)
        assert all(numpy.allclose(p.grad, (P - 1) / 2.0) for _, p in model.namedparams())
        comm.finalize()
        if RANK == 0:
            print('message example: ' + msg)
    # A grid that does not fit P, on every rank.
    expect_error(lambda: create('rsap', grid=(P + 1, 1)),
                 f'P = {P}', f'({P + 1}, 1)', 'shapes that fit')
    expect_error(lambda: create('rsaa', grid='two-by-two'), 'MxN')
    expect_error(lambda: create('bogus'), 'bogus', 'rsap', 'naive')
    expect_error(lambda: create('rsap', segment_size=-1), 'segment_size')
    expect_error(lambda: create('rsap', fp16=True), 'fp16', 'grid')
    # Variant options: bad values, and combinations that cannot work, say what is allowed.
    expect_error(lambda: create('rsap', sync='barrier'),
                 "'barrier'", "'fence'", "'notify'")
    expect_error(lambda: create('rsap', reduce_scatter='ring'),
                 "'ring'", "'accumulate'")
    expect_error(lambda: create('rsaa', shm='yes'), "'yes'", 'True')
    expect_error(lambda: create('rsap', shm=True, sync='notify'),
                 'shm=True', "sync='notify'")
    expect_error(lambda: create(
        'rsap', reduce_scatter='accumulate', allreduce_grad_dtype=numpy.float16),
        'accumulate', 'float16')
    expect_error(lambda: create(
        'rsap', reduce_scatter='accumulate', allreduce_grad_dtype='bfloat16'),
        'accumulate', 'bfloat16')
    expect_error(lambda: create('rsap', allreduce_grad_dtype='bfloat8'),
                 "'bfloat8'", "'bfloat16'")
    return msg  # the first mismatch's message (None at P = 1)


def main():
    bind(MPI.COMM_WORLD)
    msg = check_all(world, *([sys.argv[1:]] if sys.argv[1:] else []))
    print(msg)
    print(f'OK rank {RANK}', flush=True)


if __name__ == '__main__':
    main()
