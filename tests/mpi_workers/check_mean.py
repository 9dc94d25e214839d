"""Run by tests/communicators/test_mean_mpi.py under mpiexec -n P: every check raises on failure.

For each of our communicators (and every grid shape that fits P) it checks the averaged
gradients against a float64 reference computed from every rank's (reproducible) inputs, and
that all ranks hold bitwise identical results.
"""
import hashlib
import sys

import chainermn_torus  # noqa: F401 first: then Chainer's import scans no packages

import chainer
import numpy
from mpi4py import MPI

from chainermn_torus.algorithms.variants import VARIANTS, takes_grid
from conformance_variants import tested
from chainermn_torus.communicators import _dtypes
from chainermn_torus.errors import Unsupported

import bound  # tests/mpi_workers

world = P = RANK = None  # set by bind (bound.py: a world's Dup, or MPI.COMM_WORLD)
bind, create = bound.binder(globals())
CHECKS = [0]


class Model(chainer.Link):
    def __init__(self, specs):
        super().__init__()
        with self.init_scope():
            for i, (shape, dtype) in enumerate(specs):
                setattr(self, f'p{i:02d}', chainer.Parameter(
                    numpy.zeros(shape, dtype=dtype)))


def grads_of(specs, rank, seed):
    rng = numpy.random.RandomState(seed * 7919 + rank)
    return [rng.standard_normal(shape).astype(dtype) * (1 + rank) for shape, dtype in specs]


def set_grads(model, grads, none=()):
    for i, (_, p) in enumerate(sorted(model.namedparams())):
        p.grad = None if i in none else grads[i].copy()


def check_mean(model, specs, seed, none_on=None, zero_fill=False, none_all=()):
    """none_on: {param index: set of ranks whose grad is None}; none_all: None everywhere.
    Sets this rank's gradients; returns the float64 reference (mean, sum of |g|) and the
    indices this rank leaves None. The reference sums every rank's own contribution with
    MPI_Allreduce in float64 on the world (not the communicator under test): each rank draws
    only its own inputs, so the reference costs O(P), not O(P^2), on an oversubscribed
    machine."""
    none_on = none_on or {}
    own = grads_of(specs, RANK, seed)
    mine = {i for i, ranks in none_on.items() if RANK in ranks} | set(none_all)
    # One MPI_Allreduce for every array's (g, |g|): on an oversubscribed machine each
    # collective costs scheduling rounds, whatever its size.
    flat = [numpy.zeros(shape) if i in mine else own[i].astype(numpy.float64)
            for i, (shape, dtype) in enumerate(specs)]
    both = numpy.concatenate([numpy.concatenate([g.ravel(), numpy.abs(g).ravel()])
                              for g in flat])
    world.Allreduce(MPI.IN_PLACE, both, op=MPI.SUM)
    ref, at = [], 0
    for g in flat:
        ref.append((both[at:at + g.size].reshape(g.shape) / P,
                    both[at + g.size:at + 2 * g.size].reshape(g.shape)))
        at += 2 * g.size
    set_grads(model, own, none=mine)
    return ref, mine


def verify(model, specs, ref, skipped, label, half=False):
    carrier = numpy.float64 if any(numpy.dtype(d) == numpy.float64 for _, d in specs) \
        else numpy.float32
    eps_t = numpy.finfo(carrier).eps
    digest = hashlib.md5()
    for i, (_, p) in enumerate(sorted(model.namedparams())):
        if i in skipped:
            assert p.grad is None, f'{label}: param {i} should keep grad None'
            continue
        mean, abs_total = ref[i]
        assert p.grad is not None and p.grad.shape == mean.shape, label
        assert p.grad.dtype == specs[i][1], f'{label}: dtype {specs[i][1]} became {p.grad.dtype}'
        got = p.grad.astype(numpy.float64)
        # float sum error grows with the number of terms; the cast back adds one rounding.
        tol = 2 * eps_t * abs_total + 2 * numpy.finfo(p.grad.dtype).eps * numpy.abs(mean) \
            + 1e-300
        if half:
            # float16 or bfloat16 on the wire: each contribution g/P is rounded once when
            # packed, the row sum and the column sum once each (summed in float32, see
            # _half); every rounding is at most half a spacing of a value bounded by
            # abs_total / P (or the subnormal spacing for tiny values).
            eps16, tiny = HALF_EPS['float16' if half is True else half]
            tol = tol + 3 * (eps16 * abs_total / P + tiny)
        err = numpy.abs(got - mean)
        assert (err <= tol).all(), (f'{label}: param {i} off the float64 mean by {err.max()} '
                                    f'(tolerance {tol[err > tol].min()})')
        digest.update(numpy.ascontiguousarray(p.grad).tobytes())
    digests = world.allgather(digest.hexdigest())
    assert len(set(digests)) == 1, f'{label}: results differ between ranks: {digests}'
    CHECKS[0] += 1


UNEVEN = [((7,), 'f'), ((13, 5), 'f'), ((1031,), 'f'), ((3, 3, 3, 3), 'f'), ((4099,), 'f'),
          ((1,), 'f')]
MIXED = [((33,), 'e'), ((1001,), 'f'), ((17, 3), 'd'), ((5,), 'e')]
HALF = [((33,), 'e'), ((257, 3), 'e')]
BIG = [((3,), 'f'), ((70001,), 'f'), ((11,), 'f'), ((130003,), 'f'), ((5, 7), 'f')]
OTHER_SIZE = [((7,), 'f'), ((20011,), 'f')]
# Up to this P every case runs; above it, the cases of one rank's own buffers and windows (a
# repeated call on the same buffer, gradients written into its views, a change of size and
# back, eviction, the deprecated alias, float16 on the mixed layouts) are left out: nothing
# in them depends on P, and each costs a pass of collectives on an oversubscribed machine.
# What grows with P (the tails of uneven sizes, the put schedules, None on some ranks, the
# float16 sums of P terms) runs at every P.
BUFFER_CASES_UP_TO = 4


def run_cases(comm, label):
    seed = [0]

    def case(specs, zero_fill=False, none_on=None, none_all=(), model=None):
        seed[0] += 1
        model = model or Model(specs)
        ref, mine = check_mean(model, specs, seed[0], none_on, zero_fill, none_all)
        comm.multi_node_mean_grad(model, zero_fill=zero_fill)
        skipped = set(none_all) if not zero_fill else set()
        verify(model, specs, ref, skipped, f'{label} seed {seed[0]}')
        return model

    buffers = P <= BUFFER_CASES_UP_TO  # the cases of one rank's own buffers (see above)
    m = case(UNEVEN)
    if buffers:
        case(UNEVEN, model=m)        # repeated call: same buffer (and window)
        # Gradients are now views of the buffer; write new values into them in place.
        ref, _ = check_mean(m, UNEVEN, 99)
        for (_, p), g in zip(sorted(m.namedparams()), grads_of(UNEVEN, RANK, 99)):
            p.grad[...] = g
        comm.multi_node_mean_grad(m)
        verify(m, UNEVEN, ref, set(), label + ' in-place views')
    case(MIXED)
    case(HALF)
    case(BIG)
    if buffers:
        case(OTHER_SIZE)             # the model changes size: new buffer
        case(UNEVEN, model=m)        # and back
        kept = [p.grad.copy() for _, p in sorted(m.namedparams())]
        for extra in range(5):       # more layouts than buffers kept: eviction
            case([((11 + extra,), 'f'), ((3,), 'f')])
        # m's buffer was evicted (and rsap's window memory freed): its grads got their own
        # copy.
        for (_, p), k in zip(sorted(m.namedparams()), kept):
            assert numpy.array_equal(p.grad, k), \
                label + ': grads changed when the buffer was freed'
    # zero_fill: ranks 0 (and 2) leave some gradients None; zero_fill=True averages zeros in.
    case(UNEVEN, zero_fill=True, none_on={1: {0}, 4: {0, 2}})
    # grad None everywhere and zero_fill=False: skipped, as ChainerMN does.
    case(UNEVEN, zero_fill=False, none_all=(0, 3))
    if not buffers:
        return
    case(UNEVEN, zero_fill=True, none_all=(0, 3))
    # allreduce_grad is the deprecated alias.
    model = Model(HALF)
    ref, _ = check_mean(model, HALF, 1234)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        comm.allreduce_grad(model)
    verify(model, HALF, ref, set(), label + ' allreduce_grad')


# dtype on the wire -> (its spacing at 1, half its smallest subnormal step: the rounding of
# tiny values)
HALF_EPS = {'float16': (2.0 ** -10, 2.0 ** -24), 'bfloat16': (2.0 ** -7, 2.0 ** -133)}


def check_fp16(name, grid, segment, options=None, dtype='float16'):
    wire = numpy.float16 if dtype == 'float16' else 'bfloat16'
    kwargs = dict(options or {}, segment_size=segment, allreduce_grad_dtype=wire)
    if grid is not None:
        kwargs['grid'] = grid
    if dtype == 'bfloat16' and _dtypes._ml_dtypes() is None:
        # a Python without ml_dtypes (the aarch64 one): refused in one line, on every rank
        try:
            create(name, **kwargs)
        except Unsupported as e:
            assert 'pip install "ml_dtypes<0.6"' in str(e) and '\n' not in str(e), str(e)
            return
        raise AssertionError('bfloat16 without ml_dtypes was not refused')
    comm = create(name, **kwargs)
    label = f'{name} {dtype} grid={grid} segment={segment} P={P}'
    layouts = (UNEVEN, BIG, MIXED, UNEVEN) if P <= BUFFER_CASES_UP_TO else (UNEVEN, BIG)
    for seed, specs in enumerate(layouts, 500):
        model = Model(specs)
        ref, _ = check_mean(model, specs, seed)
        comm.multi_node_mean_grad(model)
        verify(model, specs, ref, set(), f'{label} seed {seed}', half=dtype)
    dtypes = {buf.array.dtype.name for buf in comm.engine.buffers.values()}
    assert dtypes == {dtype}, f'{label}: buffers carry {dtypes}'
    # Large values: scaled by 1/P before the sum, so P * 60000 does not overflow float16;
    # bfloat16 carries float32's range: 1e38 travels (and 3e38 * P would too).
    big = 60000.0 if dtype == 'float16' else 1e38
    model = Model([((1001,), 'f')])
    p = next(model.params())
    p.grad = numpy.full(1001, big, numpy.float32)
    comm.multi_node_mean_grad(model)
    assert numpy.isfinite(p.grad).all() and abs(p.grad - big).max() <= big * 2 ** -7, (
        label, p.grad[:3])
    comm.finalize()


def check_bcast_data(comm, label):
    specs = MIXED + UNEVEN
    model = Model(specs)
    for i, (_, p) in enumerate(sorted(model.namedparams())):
        p.array[...] = numpy.random.RandomState(1000 * RANK + i).standard_normal(
            p.shape).astype(p.dtype)
    before = [p.array for _, p in sorted(model.namedparams())]
    comm.bcast_data(model)
    expect = [numpy.random.RandomState(i).standard_normal(specs[i][0]).astype(specs[i][1])
              for i in range(len(specs))]
    for i, (_, p) in enumerate(sorted(model.namedparams())):
        assert p.array is before[i], label + ': bcast_data must write into the same arrays'
        assert p.array.tobytes() == expect[i].tobytes(), f'{label}: param {i} differs from rank 0'
    CHECKS[0] += 1


def check_api(comm, label):
    # The rest of the CommunicatorBase API comes from ChainerMN's MPI base class.
    assert comm.size == P and comm.rank == RANK
    assert comm.bcast_obj({'r': 0} if RANK == 0 else None) == {'r': 0}
    assert comm.allreduce_obj(RANK) == P * (P - 1) // 2
    gathered = comm.gather_obj(RANK)
    assert gathered == (list(range(P)) if RANK == 0 else None)
    x = numpy.full(3, RANK, numpy.float32)
    assert numpy.allclose(comm.allreduce(x), P * (P - 1) / 2)
    if P >= 2:
        if RANK == 0:
            comm.send(numpy.arange(4, dtype=numpy.float32), dest=1, tag=5)
        elif RANK == 1:
            assert comm.recv(source=0, tag=5).tolist() == [0, 1, 2, 3]
    if P >= 4:
        sub = comm.split(RANK % 2, RANK)
        assert type(sub) is type(comm) and sub.size == (P + 1 - RANK % 2) // 2
        members = [r for r in range(P) if r % 2 == RANK % 2]
        a = numpy.full(1001, RANK, numpy.float32)
        sub.mean_array(a)
        assert numpy.allclose(a, numpy.mean(members)), (a[:3], members)
        sub.finalize()
    CHECKS[0] += 1


def grids(p):
    """Every grid of p ranks; from p = 5 on only the two-dimensional ones: 1xP and Px1 are
    the same code paths as at p <= 4 (one phase empty), and each shape costs a full pass on
    an oversubscribed machine (the full tier's time budget)."""
    shapes = [(m, p // m) for m in range(1, p + 1) if p % m == 0]
    if p >= 5:
        shapes = [(m, n) for m, n in shapes if m > 1 and n > 1] or shapes
    return [f'{m}x{n}' for m, n in shapes]


_VALUES = {'0': False, '1': True, 'none': None}


def parse_spec(spec):
    """A variant of the table ("rsap_notify" -> ('rsap', {'sync': 'notify'})) or a spec
    "rsap:sync=pscw,shm=0" -> ('rsap', {'sync': 'pscw', 'shm': False})."""
    if spec in VARIANTS:
        return VARIANTS[spec].communicator, dict(VARIANTS[spec].options)
    name, _, opts = spec.partition(':')
    options = {}
    for item in filter(None, opts.split(',')):
        key, _, value = item.partition('=')
        options[key] = _VALUES.get(value, value)
    return name, options


def check_spec(comm, spec):
    """Every check of one variant (or spec) on comm: every grid shape that fits, segmented
    and whole, float16, the polled mode. Returns the number of checks."""
    bind(comm)
    CHECKS[0] = 0
    name, options = parse_spec(spec)
    shapes = [None] + grids(P) if takes_grid(name) else [None]
    # Small segments so that the big arrays are split, sent straight from the gradients and
    # packed in several pieces; the default (MiBs) would send every test model whole.
    # Whole (segment 0) and segmented (64 KiB) up to P = 4; from P = 5 on segmented only:
    # the uneven tails and put schedules that grow with P are cut by the segments too, and
    # each pass costs seconds on an oversubscribed machine.
    segments = (0, 64 * 1024) if P <= 4 else (64 * 1024,)
    for grid in shapes:
        for segment in segments:
            kwargs = dict(options, segment_size=segment)
            if grid is not None:
                kwargs['grid'] = grid
            ours = create(name, **kwargs)
            label = f'{spec} grid={grid} segment={segment} P={P}'
            run_cases(ours, label)
            if segment == segments[0]:
                check_bcast_data(ours, label)
                check_api(ours, label)
            ours.finalize()
        if options.get('reduce_scatter') == 'accumulate':
            continue  # float16 has no MPI sum to accumulate with (refused, check_errors)
        for segment in segments:
            check_fp16(name, grid, segment, options)
        check_fp16(name, grid, segments[-1], options, 'bfloat16')
    # The double-buffering thread's mode: every collective polled (MPI_Test + sleep).
    base = create(name, segment_size=64 * 1024, **options)
    polling = base.clone(poll_interval=1e-5)
    assert polling.progress.polling and type(polling) is type(base)
    run_cases(polling, f'{name} polling P={P}')
    if options.get('reduce_scatter') == 'accumulate':
        for c in (polling, base):
            c.finalize()
        return CHECKS[0]
    half = create(name, segment_size=64 * 1024, allreduce_grad_dtype=numpy.float16,
                  **options)
    half_polling = half.clone(poll_interval=1e-5)
    for seed, specs in enumerate((UNEVEN, BIG), 900):
        model = Model(specs)
        ref, _ = check_mean(model, specs, seed)
        half_polling.multi_node_mean_grad(model)
        verify(model, specs, ref, set(), f'{name} fp16 polling seed {seed}',
               half=True)
    for c in (polling, base, half_polling, half):
        c.finalize()
    return CHECKS[0]


def main():
    # rsaa/rsap default to shared-memory row phases on one node; shm=0 pins the messages.
    bind(MPI.COMM_WORLD)
    checks = sum(check_spec(world, spec)
                 for spec in sys.argv[1:] or [name for name, _ in tested()])
    print(f'OK rank {RANK} checks {checks}', flush=True)


if __name__ == '__main__':
    main()
