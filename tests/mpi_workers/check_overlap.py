"""Run by tests/optimizers/test_overlap_mpi.py under mpiexec -n P: every check raises.

overlap=True against the synchronous wrapper, same communicator and options, for every
communicator and float32/float16:
* a model whose backward order is not its parameters' (sorted-name) order, with a parameter
  used twice, an unused one, and two branches whose backward order differs between ranks
  and between steps: bit for bit where the elements keep their places in the segments
  (P = 2, pure_allreduce, float16), else within float rounding;
* a model whose arrays are all sent straight from the gradients (segments never cross
  arrays, so overlap's buffer holds every segment of the synchronous one): bit for bit on
  every communicator and P;
plus snapshot/resume, update() without a loss function, a NaN on one rank, a parameter added
mid-training, and the refusals.
"""
import faulthandler
import io
import sys

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from mpi4py import MPI

import chainermn
import chainermn_torus  # noqa: F401 registers our communicators
from chainermn_torus.optimizers import NonFiniteGradientError

import bound  # tests/mpi_workers

world = P = RANK = None  # set by bind (bound.py: a world's Dup, or MPI.COMM_WORLD)
bind, create = bound.binder(globals())
CHECKS = [0]
STEP = [0]


class Branchy(chainer.Chain):
    """Names sort a < b < c < p < q < unused; backward runs c, b (used twice), p/q in an
    order that depends on rank and step, then a; 'unused' gets no gradient."""

    def __init__(self, seed):
        super().__init__()
        numpy.random.seed(seed)  # different initial weights per rank: bcast must fix it
        with self.init_scope():
            self.a = L.Linear(12, 40)
            self.p = L.Linear(40, 40)
            self.q = L.Linear(40, 40)
            self.b = L.Linear(40, 33)
            self.c = L.Linear(33, 4)
            self.unused = L.Linear(3, 3)

    def forward(self, x, t):
        h = F.tanh(self.a(x))
        if (STEP[0] + RANK) % 2:
            h = self.p(h) + self.q(h)
        else:
            h = self.q(h) + self.p(h)
        h = F.relu(self.b(h)) + F.tanh(self.b(h))
        return F.softmax_cross_entropy(self.c(h), t)


class Big(chainer.Chain):
    def __init__(self, seed):
        super().__init__()
        numpy.random.seed(seed)
        with self.init_scope():
            self.l1 = L.Linear(12, 30)
            self.l2 = L.Linear(30, 20)
            self.l3 = L.Linear(20, 8)

    def forward(self, x, t):
        return F.softmax_cross_entropy(self.l3(F.relu(self.l2(F.relu(self.l1(x))))), t)


def batch(step, rank=None):
    rank = RANK if rank is None else rank
    rng = numpy.random.RandomState(1000 * step + rank)
    return rng.standard_normal((5, 12)).astype(numpy.float32), rng.randint(0, 4, 5).astype(
        numpy.int32)


def params_of(model):
    return [p.array.copy() for _, p in sorted(model.namedparams())]


def train(make, name, overlap, dtype=None, steps=6, segment_size=1024, bucket_bytes=1000,
          optimizer=chainer.optimizers.Adam, own_backward=False, options=None):
    comm = create(name, allreduce_grad_dtype=dtype,
                                         segment_size=segment_size, **(options or {}))
    model = make(RANK)
    kw = dict(overlap=True, bucket_bytes=bucket_bytes) if overlap else {}
    opt = chainermn.create_multi_node_optimizer(optimizer(), comm, **kw).setup(model)
    for step in range(steps):
        STEP[0] = step
        x, t = batch(step)
        if own_backward:
            model.cleargrads()
            model(x, t).backward()
            opt.update()
        else:
            opt.update(model, x, t)
    if overlap:
        opt.finalize()
    comm.finalize()
    return params_of(model), opt


def compare(a, b, label, exact):
    assert len(a) == len(b)
    diff = max(float(numpy.abs(x - y).max()) for x, y in zip(a, b))
    if exact:
        assert all((x == y).all() for x, y in zip(a, b)), \
            f'{label}: not bit for bit equal to the synchronous wrapper (max diff {diff:.3g})'
    else:
        assert diff <= 1e-6, f'{label}: differs from the synchronous wrapper by {diff:.3g}'
    digests = world.allgather(b''.join(x.tobytes() for x in b))
    assert len(set(digests)) == 1, f'{label}: parameters differ between ranks'
    CHECKS[0] += 1


# The variants (algorithms.variants) whose phases differ: shared-memory rows (the
# default here, one node), put rounds with fences, put rounds with notifications, gathers.
VARIANTS = {'rsap': [{}, {'shm': False}, {'sync': 'notify'}], 'rsaa': [{}, {'shm': False}],
            'pure_allreduce': [{}], 'auto': [{}]}


def check_against_sync(name):
    for options in VARIANTS[name]:
        label = '{}({})'.format(name, options or '')
        for dtype in (None, numpy.float16):
            ref, _ = train(Branchy, name, False, dtype, options=options)
            got, _ = train(Branchy, name, True, dtype, options=options)
            # Elements change places (backward order vs name order); the reduce-scatter of
            # rsaa/rsap sums a block in an order that depends on the block's owner.
            same_places = P == 2 or name == 'pure_allreduce' or dtype is not None
            compare(ref, got, '{} {} Branchy'.format(label, dtype and 'float16'), same_places)
            ref, _ = train(Big, name, False, dtype, segment_size=1024, options=options)
            got, _ = train(Big, name, True, dtype, segment_size=1024, bucket_bytes=2000,
                           options=options)
            compare(ref, got, '{} {} Big'.format(label, dtype and 'float16'), True)


def check_plan_order(name):
    comm = create(name)
    model = Branchy(RANK)
    opt = chainermn.create_multi_node_optimizer(
        chainer.optimizers.SGD(), comm, overlap=True, bucket_bytes=1000).setup(model)
    for step in range(2):
        STEP[0] = step
        opt.update(model, *batch(step))
    names = opt.mode.state.plan.names
    # Backward order: the last layer first, the first layer last, the unused one after all.
    assert names[:2] == ['/c/W', '/c/b'] and names[2:4] == ['/b/W', '/b/b'], names
    assert names[-4:] == ['/a/W', '/a/b', '/unused/W', '/unused/b'], names
    assert len(opt.mode.state.plan.bounds) > 3, opt.mode.state.plan.bounds  # several buckets
    assert opt.timings['communicate'] > 0
    opt.finalize()
    comm.finalize()
    CHECKS[0] += 1


def check_own_backward(name):
    ref, _ = train(Branchy, name, False)
    got, _ = train(Branchy, name, True, own_backward=True)
    compare(ref, got, name + ' update() without lossfun', True)


def check_resume(name):
    comm = create(name)
    model = Big(RANK)
    opt = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(), comm, overlap=True, bucket_bytes=500).setup(model)
    for step in range(3):
        opt.update(model, *batch(step))
    saved = io.BytesIO()
    chainer.serializers.save_npz(saved, model)
    state = io.BytesIO()
    chainer.serializers.save_npz(state, opt)
    for step in range(3, 6):
        opt.update(model, *batch(step))
    want = params_of(model)
    saved.seek(0)
    state.seek(0)
    chainer.serializers.load_npz(saved, model)
    chainer.serializers.load_npz(state, opt)
    for step in range(3, 6):
        opt.update(model, *batch(step))
    compare(want, params_of(model), name + ' resumed', True)
    opt.finalize()
    comm.finalize()


def check_nan(name):
    comm = create(name)
    model = Big(RANK)
    opt = chainermn.create_multi_node_optimizer(
        chainer.optimizers.SGD(), comm, overlap=True, check_finite=True).setup(model)
    opt.update(model, *batch(0))
    x, t = batch(1)
    if RANK == P - 1:
        x[0, 0] = numpy.nan
    try:
        opt.update(model, x, t)
    except NonFiniteGradientError as e:
        assert 'overlap' in str(e) and 'NaN/Inf' in str(e), e
    else:
        raise AssertionError(f'a NaN on rank {P - 1} was not reported on rank {RANK}')
    opt.finalize()
    comm.finalize()
    CHECKS[0] += 1


def check_new_parameter(name):
    comm = create(name)
    model = Big(RANK)
    opt = chainermn.create_multi_node_optimizer(
        chainer.optimizers.Adam(), comm, overlap=True, bucket_bytes=600).setup(model)
    for step in range(3):
        opt.update(model, *batch(step))
    with model.init_scope():
        model.extra = L.Linear(None, 3)  # an uninitialised parameter appears...
    opt.update(model, *batch(3))
    model.extra(numpy.ones((1, 2), numpy.float32))  # ...and gets initialised
    model.extra.W.array[...] = RANK  # differently on every rank
    for step in range(4, 7):
        opt.update(model, *batch(step))
    assert '/extra/W' in opt.mode.state.plan.names
    digests = world.allgather(b''.join(x.tobytes() for x in params_of(model)))
    assert len(set(digests)) == 1, name + ' added parameter: differs between ranks'
    opt.finalize()
    comm.finalize()
    CHECKS[0] += 1


def check_refusals():
    naive = create('naive')
    for kwargs, words in (({}, 'one of our communicators'),):
        try:
            chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), naive,
                                                  overlap=True, **kwargs)
        except ValueError as e:
            assert words in str(e), e
        else:
            raise AssertionError('overlap with naive accepted')
    comm = create('rsap')
    for kwargs, words in (({'zero_fill': False}, 'zero_fill=True'),
                          ({'double_buffering': True}, 'choose one'),
                          ({'bucket_bytes': 'lots'}, 'bucket_bytes')):
        try:
            chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm,
                                                  overlap=True, **kwargs)
        except ValueError as e:
            assert words in str(e), (kwargs, e)
        else:
            raise AssertionError(f'overlap accepted {kwargs}')
    comm.finalize()
    CHECKS[0] += 1


def check_communicator(comm, name):
    """Every overlap check with the communicator ``name`` on comm; returns their number."""
    bind(comm)
    CHECKS[0] = 0
    STEP[0] = 0
    check_against_sync(name)
    check_plan_order(name)
    check_own_backward(name)
    check_resume(name)
    check_nan(name)
    check_new_parameter(name)
    return CHECKS[0]


def check_refusals_on(comm):
    bind(comm)
    CHECKS[0] = 0
    check_refusals()
    return CHECKS[0]


def main():
    faulthandler.dump_traceback_later(200, exit=True)
    bind(MPI.COMM_WORLD)
    checks = sum(check_communicator(world, name)
                 for name in sys.argv[1:] or ['rsap', 'rsaa', 'pure_allreduce'])
    checks += check_refusals_on(world)
    print(f'OK rank {RANK} checks {checks}', flush=True)


if __name__ == '__main__':
    main()
