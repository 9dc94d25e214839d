"""Run by tests/optimizers/test_multi_node_mpi.py under mpiexec -n P: every check raises.

Each rank trains a small MLP on its own reproducible batches. References are computed with
the same communicator (so the averaging's rounding is the same), which makes most checks
exact: double buffering must equal an explicit 1-step-stale schedule bit for bit.
"""
import faulthandler
import hashlib
import io
import sys
import time

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from mpi4py import MPI

import chainermn
import chainermn_torus  # noqa: F401 registers the names; Chainer after it
from chainermn_torus.optimizers import NonFiniteGradientError, is_fused

import bound  # tests/mpi_workers

world = P = RANK = None  # set by bind (bound.py: a world's Dup, or MPI.COMM_WORLD)
bind, create = bound.binder(globals())
CHECKS = [0]


class MLP(chainer.Chain):
    def __init__(self, seed):
        super().__init__()
        numpy.random.seed(seed)  # different initial weights per rank: bcast must fix it
        with self.init_scope():
            self.l1 = L.Linear(12, 9)
            self.l2 = L.Linear(9, 4)

    def forward(self, x, t):
        return F.softmax_cross_entropy(self.l2(F.tanh(self.l1(x))), t)


def batch(step, rank=None):
    rank = RANK if rank is None else rank
    rng = numpy.random.RandomState(1000 * step + rank)
    return rng.standard_normal((5, 12)).astype(numpy.float32), rng.randint(0, 4, 5).astype(
        numpy.int32)


def params_of(model):
    return [p.array.copy() for _, p in sorted(model.namedparams())]


def digest(arrays):
    h = hashlib.md5()
    for a in arrays:
        h.update(numpy.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def same_on_all_ranks(arrays, label):
    d = world.allgather(digest(arrays))
    assert len(set(d)) == 1, f'{label}: parameters differ between ranks'


def make_optimizer(name, opt='adam'):
    return {'adam': lambda: chainer.optimizers.Adam(alpha=0.01),
            'momentum': lambda: chainer.optimizers.MomentumSGD(lr=0.1),
            'rmsprop': lambda: chainer.optimizers.RMSprop(lr=0.01)}[opt]()


def train(comm, steps, opt='adam', sleep=False, **wrapper_kw):
    model = MLP(seed=RANK)
    optimizer = chainermn.create_multi_node_optimizer(make_optimizer(opt), comm, **wrapper_kw)
    optimizer.setup(model)
    for step in range(steps):
        if sleep and RANK == 0:
            time.sleep(0.003 * (step % 3))  # ranks run at different speeds
        x, t = batch(step)
        optimizer.update(model, x, t)
    if hasattr(optimizer, 'finalize'):
        optimizer.finalize()
    return model, optimizer


def reference(comm, steps, stale, opt='adam'):
    """The schedule written out: bcast at step 0, then mean of (stale) grads + stock update."""
    model = MLP(seed=RANK)
    optimizer = make_optimizer(opt).setup(model)
    comm.bcast_data(model)
    previous = None
    for step in range(1, steps):
        x, t = batch(step)
        model.cleargrads()
        model(x, t).backward()
        if stale:
            fresh = [p.grad.copy() for _, p in sorted(model.namedparams())]
            if previous is None:
                previous = fresh
                continue  # the first step after the broadcast only starts the all-reduce
            for (_, p), g in zip(sorted(model.namedparams()), previous):
                p.grad = g
            previous = fresh
        comm.multi_node_mean_grad(model, True)
        optimizer.update()
    return model


def check_equal(a, b, label, exact=True):
    for i, (x, y) in enumerate(zip(a, b)):
        if exact:
            assert numpy.array_equal(x, y), (f'{label}: param {i} differs '
                                             f'by {numpy.abs(x - y).max()}')
        else:
            assert numpy.allclose(x, y, rtol=1e-5, atol=1e-6), (f'{label}: param {i} off '
                                                                f'by {numpy.abs(x - y).max()}')
    CHECKS[0] += 1


def check_schedules(name):
    comm = create(name)
    steps = 7
    for fused in (False, True):
        for db in (False, True):
            label = f'{name} fused={fused} double_buffering={db} P={P}'
            model, opt = train(comm, steps, fused=fused, double_buffering=db, sleep=db)
            assert is_fused(opt.actual_optimizer) == fused, label
            ref = reference(comm, steps, stale=db)
            # The fused kernels repeat Chainer's arithmetic: equal to the bit.
            check_equal(params_of(model), params_of(ref), label)
            same_on_all_ranks(params_of(model), label)
            updates = steps - 2 if db else steps - 1
            assert opt.actual_optimizer.t == updates, (label, opt.actual_optimizer.t)
            if fused and name != 'naive':
                # Gradients are views of the communicator's buffer: one kernel call per step.
                assert opt.actual_optimizer.flat_steps == updates, (
                    label, opt.actual_optimizer.flat_steps)
    if name != 'naive':
        # The polling mode of the background thread computes the same schedule.
        model, _ = train(comm, steps, fused=True, double_buffering=True, sleep=True,
                         background_poll=2e-5)
        # The polled thread calls MPI's non-blocking collectives (MPI_Iallreduce,
        # MPI_Ireduce_scatter_block, ...) where the reference's blocking path calls the
        # blocking ones. MPI does not promise that both add in the same order: MPICH's do;
        # Intel MPI 2021.17's MPI_Iallreduce at P = 4 and Open MPI 5.0.11's reduce-scatter
        # at P = 5 do not (last-bit differences). Elsewhere the result is checked to be
        # close; the schedule itself is checked bit for bit by the blocking runs above.
        same_order = MPI.Get_library_version().startswith('MPICH')
        check_equal(params_of(model), params_of(reference(comm, steps, stale=True)),
                    f'{name} double buffering, polling thread', exact=same_order)
    for kind in ('momentum', 'rmsprop'):
        model, _ = train(comm, 5, opt=kind, fused=True, double_buffering=True)
        check_equal(params_of(model), params_of(reference(comm, 5, True, kind)),
                    f'{name} {kind} fused double buffering')


def check_fp16(name):
    comm16 = create(name, allreduce_grad_dtype=numpy.float16)
    comm32 = create(name)
    for db in (False, True):
        m16, _ = train(comm16, 6, fused=True, double_buffering=db)
        m32, _ = train(comm32, 6, fused=True, double_buffering=db)
        label = f'{name} fp16 double_buffering={db}'
        same_on_all_ranks(params_of(m16), label)
        # Adam's step is alpha-sized whatever the gradient's scale: float16 gradients move
        # each weight by at most a few rounding-sized fractions of alpha differently.
        for a, b in zip(params_of(m16), params_of(m32)):
            assert numpy.abs(a - b).max() < 0.01 * 6 * 0.05, (label, numpy.abs(a - b).max())
        CHECKS[0] += 1
    # A finite gradient that float16 cannot carry after the 1/P scaling (1e6 / P > 65504):
    # check_finite stops every rank before anything is sent or updated, naming rank 1 and
    # the array, instead of corrupting every replica with an Inf one step earlier.
    if P > 1:
        for db in (False, True):
            model, opt = checked_after_two_steps(comm16, db)
            before, label = params_of(model), f'{name} fp16 overflow db={db}'
            model.cleargrads()
            model(*batch(2)).backward()
            if RANK == 1:
                model.l2.W.grad[0, 0] = 1e6 * P
            try:
                opt.update()
            except NonFiniteGradientError as e:
                text = str(e)
                assert 'rank(s) 1:' in text and '/l2/W (1 of 36 values' in text, text
                assert 'beyond float16' in text and 'allreduce_grad_dtype' in text, text
            else:
                raise AssertionError('float16 overflow on rank 1 not reported')
            assert all((a == b).all() for a, b in zip(before, params_of(model))), label
            if db:
                opt.finalize()
        CHECKS[0] += 1
        check_mean_overflow(name, comm16)
        check_float32_mean_overflow(name, comm32)


def checked_after_two_steps(comm, double_buffering):
    """A model and an Adam wrapper with check_finite, past the broadcast and one update."""
    model = MLP(seed=RANK)
    opt = chainermn.create_multi_node_optimizer(
        make_optimizer('adam'), comm, check_finite=True,
        double_buffering=double_buffering).setup(model)
    opt.update(model, *batch(0))
    opt.update(model, *batch(1))
    return model, opt


def check_mean_overflow(name, comm16):
    # Every rank's gradient 0.9 x 65504 x P: each share g / P fits in float16 and passes the
    # check before averaging, but the mean is P x 0.9 x 65504 > 65504: Inf in float16. The
    # check after averaging stops every rank before the update (with double buffering, at
    # the next step, before the stale means are applied): the parameters stay finite.
    for db in (False, True):
        model, opt = checked_after_two_steps(comm16, db)
        if db:
            opt.wait()
        before, label = params_of(model), f'{name} fp16 mean overflow db={db}'
        raised = None
        for step in (2, 3) if db else (2,):
            model.cleargrads()
            model(*batch(step)).backward()
            if step == 2:
                model.l2.W.grad[0, 0] = 0.9 * 65504 * P
            try:
                opt.update()
            except NonFiniteGradientError as e:
                raised = (step, str(e))
                break
        assert raised is not None, label + ': the overflowing mean was not reported'
        step, text = raised
        assert step == (3 if db else 2), (label, step)
        assert "beyond float16's range (|mean| > 65504)" in text and '/l2/W (1 of 36' in text, \
            text
        assert 'not the data' in text and 'Nothing was updated' in text, text
        if db:
            assert 'previous step (double buffering)' in text, text
            # The step-2 update applied step 1's (finite) means: compare with what it
            # applied, not with 'before'; what matters is that nothing is non-finite.
            assert all(numpy.isfinite(a).all() for a in params_of(model)), label
            opt.finalize()
        else:
            assert all((a == b).all() for a, b in zip(before, params_of(model))), label


def check_float32_mean_overflow(name, comm32):
    # 0.9 x float32's largest on every rank: a communicator that sums before scaling makes
    # Inf (stopped before the update, the sum named); one that scales first averages to
    # 0.9 x the largest, finite. Either way no NaN/Inf reaches the parameters.
    big = 0.9 * float(numpy.finfo(numpy.float32).max)
    model, opt = checked_after_two_steps(comm32, False)
    model.cleargrads()
    model(*batch(2)).backward()
    model.l2.W.grad[0, 0] = big
    try:
        opt.update()
    except NonFiniteGradientError as e:
        assert f'the sum over the {P} ranks overflowed the transfer dtype' in str(e), e
        assert 'Nothing was updated' in str(e), e
    assert all(numpy.isfinite(a).all() for a in params_of(model)), name + ' float32 overflow'


def snapshot(obj):
    f = io.BytesIO()
    chainer.serializers.save_npz(f, obj)
    return f.getvalue()


def load(obj, data):
    chainer.serializers.load_npz(io.BytesIO(data), obj)


def check_resume(name):
    comm = create(name)
    for db in (False, True):
        label = f'{name} resume double_buffering={db}'
        model = MLP(seed=RANK)
        opt = chainermn.create_multi_node_optimizer(make_optimizer('adam'), comm,
                                                    double_buffering=db, fused=True).setup(model)
        for step in range(5):
            opt.update(model, *batch(step))
        saved_model, saved_opt = snapshot(model), snapshot(opt)
        for step in range(5, 8):
            opt.update(model, *batch(step))
        uninterrupted = params_of(model)
        if db:
            opt.finalize()
        # A new process would do this: build everything again, load, go on.
        model2 = MLP(seed=100 + RANK)
        opt2 = chainermn.create_multi_node_optimizer(make_optimizer('adam'), comm,
                                                     double_buffering=db, fused=True)
        opt2.setup(model2)
        load(model2, saved_model)
        load(opt2, saved_opt)
        for step in range(5, 8):
            opt2.update(model2, *batch(step))
        if db:
            opt2.finalize()
        check_equal(params_of(model2), uninterrupted, label)


def check_background_error(comm):
    # An error in the background all-reduce (here: rank 1's loss does not use l2, and with
    # zero_fill=False the ranks disagree on what to average) reaches every rank's training
    # loop at the next update, with the layout message, instead of hanging.
    model = MLP(seed=RANK)
    opt = chainermn.create_multi_node_optimizer(make_optimizer('adam'), comm, zero_fill=False,
                                                double_buffering=True).setup(model)

    def loss(x, t):
        if RANK == 1:
            return F.sum(model.l1(x))
        return model(x, t)
    opt.update(loss, *batch(0))  # broadcast
    opt.update(loss, *batch(1))  # starts the all-reduce that fails in the thread
    try:
        opt.update(loss, *batch(2))
    except ValueError as e:
        assert 'differ between ranks' in str(e) and 'l2' in str(e), str(e)
    else:
        raise AssertionError('the background error was not re-raised')
    opt.finalize()


def check_bad_input(name):
    comm = create(name)
    # An optimizer without a fused version.
    try:
        chainermn.create_multi_node_optimizer(chainer.optimizers.AdaGrad(), comm, fused=True)
    except ValueError as e:
        assert 'AdaGrad' in str(e) and 'Adam' in str(e), str(e)
    else:
        raise AssertionError('fused AdaGrad should be refused')
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.AdaGrad(), comm,
                                                fused='auto')
    assert not is_fused(opt.actual_optimizer)
    # NaN on rank 1 only: every rank raises, naming rank 1.
    for db in (False, True):
        model = MLP(seed=RANK)
        opt = chainermn.create_multi_node_optimizer(
            make_optimizer('adam'), comm, check_finite=True, double_buffering=db).setup(model)
        opt.update(model, *batch(0))
        opt.update(model, *batch(1))
        x, t = batch(2)
        if RANK == 1:
            x[0, 0] = numpy.nan
        try:
            opt.update(model, x, t)
        except NonFiniteGradientError as e:
            assert 'rank(s) 1:' in str(e) and 'l1/W' in str(e), str(e)
        else:
            raise AssertionError('NaN gradient on rank 1 not reported')
        if db:
            opt.finalize()
    if name != 'naive':  # ChainerMN's naive does not compare layouts across ranks
        check_background_error(comm)
    # Parameters that change mid-training: re-broadcast, replicas stay equal.
    model = MLP(seed=RANK)
    opt = chainermn.create_multi_node_optimizer(make_optimizer('adam'), comm,
                                                double_buffering=True, fused=True).setup(model)
    for step in range(4):
        opt.update(model, *batch(step))
    with model.init_scope():
        model.extra = L.Linear(None, 3)  # an uninitialised parameter appears...
    opt.update(model, *batch(4))
    model.extra(numpy.ones((1, 2), numpy.float32))  # ...and gets initialised
    model.extra.W.array[...] = RANK  # differently on every rank
    for step in range(5, 9):
        opt.update(model, *batch(step))
    opt.finalize()
    same_on_all_ranks(params_of(model), name + ' changed parameters')
    CHECKS[0] += 1


def check_communicator(comm, name):
    """Every check of the wrapper with the communicator ``name`` on comm; returns their
    number."""
    bind(comm)
    CHECKS[0] = 0
    check_schedules(name)
    if name != 'naive':
        check_fp16(name)
    check_resume(name)
    check_bad_input(name)
    return CHECKS[0]


def main():
    # A hang shows every thread's stack (this rank's) instead of only the test's timeout.
    faulthandler.dump_traceback_later(200, exit=True)
    bind(MPI.COMM_WORLD)
    checks = sum(check_communicator(world, name)
                 for name in sys.argv[1:] or ['rsap', 'rsaa', 'pure_allreduce', 'naive'])
    print(f'OK rank {RANK} checks {checks}', flush=True)


if __name__ == '__main__':
    main()
