"""Run by tests/communicators/test_exact_sum.py in a test world of P ranks: the exact sum
(``exact_sum=True``) gives, on every rank, for every communicator, grid, segment size and
rsap mode, the bits of the exact sum computed here without MPI (``fixed_point`` over every
rank's reproducible gradients): the result cannot depend on the algorithm or the order. With
V virtual ranks on P processes (each process hands in the gradient sets of those it holds)
the bits are those of the same reference over the V sets: they cannot depend on P either.
"""
import hashlib

import chainermn_torus  # noqa: F401 first: then Chainer's import scans no packages

import numpy

from chainermn_torus.algorithms import fixed_point, virtual_ranks
from chainermn_torus.algorithms.variants import takes_grid
from chainermn_torus.communicators import _packing
from chainermn_torus.errors import ConfigError

import bound  # tests/mpi_workers
from check_mean import BIG, MIXED, UNEVEN, Model, grads_of, grids, parse_spec

world = P = RANK = None  # set by bind
bind, create = bound.binder(globals())

# Values the grid cannot hold, and the extremes it must: a NaN on rank 1 (array 0) and an
# infinity on rank 0 (array 2) make those arrays' means NaN; zeros everywhere stay zeros;
# float32's largest values on every rank sum without overflow.
SPECIAL = [((5,), 'f'), ((300,), 'f'), ((7,), 'f'), ((9,), 'f'), ((11,), 'f')]


def gradients(specs, rank, seed):
    grads = grads_of(specs, rank, seed)
    if specs is SPECIAL:
        if rank == 1 % P:
            grads[0][2] = numpy.nan
        if rank == 0:
            grads[2][0] = numpy.inf
        grads[3][...] = 0
        grads[4][...] = numpy.float32(3.4e38) * (1 - 0.01 * rank)
    return grads


_REFERENCES = {}


def reference(specs, seed, none_on=(), terms=None):
    """The exact means, computed on each rank from every rank's gradients (None: zeros);
    ``terms``: that many virtual ranks' instead of P ranks'. Kept: every configuration of a
    world checks against the same ones."""
    key = (tuple(specs), seed, tuple(sorted(none_on)), terms or P, P)
    if key not in _REFERENCES:
        _REFERENCES[key] = _reference(specs, seed, none_on, terms or P)
    return _REFERENCES[key]


def _reference(specs, seed, none_on, terms):
    carrier = _packing.transfer_dtype([d for _, d in specs])
    every = [gradients(specs, r, seed) for r in range(terms)]
    means = []
    for i, (shape, dtype) in enumerate(specs):
        xs = [numpy.zeros(shape, dtype) if (i, r) in none_on else every[r][i]
              for r in range(terms)]
        # numpy's max: a NaN anywhere makes it NaN (Python's max depends on the order)
        top = numpy.array([numpy.abs(x.astype(numpy.float64)).max() if x.size else 0.0
                           for x in xs]).max()
        s = int(fixed_point.scales([top], terms)[0])
        total = sum(fixed_point.encode(x.reshape(-1), s) for x in xs)
        mean = fixed_point.decode(total, s, terms, out=numpy.empty(total.size, carrier))
        means.append(mean.reshape(shape).astype(dtype))
    return means


def run_case(comm, specs, seed, none_on=()):
    """One call; asserts the reference's bits; returns the means' bytes."""
    model = Model(specs)
    mine = gradients(specs, RANK, seed)
    for i, (_, p) in enumerate(sorted(model.namedparams())):
        p.grad = None if (i, RANK) in none_on else mine[i].copy()
    comm.multi_node_mean_grad(model, zero_fill=bool(none_on))
    got = [p.grad for _, p in sorted(model.namedparams())]
    want = reference(specs, seed, none_on)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.tobytes() == w.tobytes(), (
            f'seed {seed} array {i} ({w.dtype}): not the exact sum\'s bits; '
            f'max difference {numpy.nanmax(numpy.abs(g.astype("d") - w.astype("d")))}')
    return b''.join(g.tobytes() for g in got)


def run_cases(comm):
    digest = hashlib.sha256()
    for seed, specs in enumerate((UNEVEN, MIXED, BIG, SPECIAL, UNEVEN), 1):
        digest.update(run_case(comm, specs, seed))
    # zero_fill: a gradient None on some ranks counts as zeros there
    digest.update(run_case(comm, UNEVEN, 40, none_on={(1, 0), (4, 0), (4, P - 1)}))
    # overlap's path: buckets at array bounds, each with its own MAX all-reduce
    specs = UNEVEN
    mine = gradients(specs, RANK, 50)
    model = Model(specs)
    named = sorted(model.namedparams())
    for (_, p), g in zip(named, mine):
        p.grad = g.copy()
    layout = _packing.Layout([(n, p.data.shape, p.data.dtype) for n, p in named])
    bounds = [0, int(layout.offsets[2]), int(layout.offsets[3]), layout.size]
    buf = comm.mean_grads_by_bucket(named, bounds, lambda b: None)
    want = numpy.concatenate([w.reshape(-1) for w in reference(specs, 50)])
    assert buf.means.tobytes() == want.tobytes(), 'buckets: not the exact sum\'s bits'
    digest.update(buf.means.tobytes())
    # a flat array (benchmarks' path)
    flat = grads_of([((20011,), 'f')], RANK, 60)[0]
    comm.mean_array(flat)
    assert flat.tobytes() == reference([((20011,), 'f')], 60)[0].tobytes(), 'mean_array'
    digest.update(flat.tobytes())
    return digest.hexdigest()


def check_exact(comm, specs):
    """Every spec of ``specs``, every grid that fits P, whole and segmented, and a polling
    clone: one digest of all the means, the same for every configuration and every rank.
    Returns the number of configurations."""
    bind(comm)
    digests = {}
    for spec in specs:
        name, options = parse_spec(spec)
        shapes = [None] + grids(P) if takes_grid(name) else [None]
        for grid in shapes:
            # Whole and segmented up to P = 3; from P = 4 on segmented only: what grows with
            # P (the grids, the put schedules, the tails) is cut by segments too, and every
            # pass costs seconds on an oversubscribed machine (the worlds' time).
            for segment in (0, 64 * 1024) if P <= 3 else (64 * 1024,):
                kwargs = dict(options, segment_size=segment, exact_sum=True)
                if grid is not None:
                    kwargs['grid'] = grid
                ours = create(name, **kwargs)
                assert 'exact sum' in ours.describe(), ours.describe()
                digests[f'{spec} grid={grid} segment={segment}'] = run_cases(ours)
                # Phase 3 moves the decoded means (1.5x the bytes) wherever there are rows,
                # but with MPI_Accumulate, which sums the integers in rsap's window.
                means = ours.grid is not None and ours.grid.M > 1 and \
                    options.get('reduce_scatter') != 'accumulate'
                gathered = {b.gathers_means for b in ours.engine.buffers.values()}
                assert gathered == {means}, (spec, grid, gathered)
                kinds = {type(b.rows).__name__ for b in ours.engine.buffers.values()}
                assert not means or options.get('shm') is not True or kinds == {'ShmRows'}, \
                    (spec, grid, kinds)
                # Phase 1 by messages (_exact_scatter) or in the node-shared rows: the blocks
                # as floats, one term a process; MPI_Accumulate sums integers in its window.
                by_messages = {b.rows is not None and b.rows.phase1_by_reducer
                               for b in ours.engine.buffers.values()}
                floats = {b.sends_floats for b in ours.engine.buffers.values()}
                assert by_messages == {means and kinds != {'ShmRows'}}, (spec, grid, kinds)
                assert floats == {means}, (spec, grid, kinds, floats)
                ours.finalize()
        base = create(name, segment_size=64 * 1024, exact_sum=True, **options)
        polling = base.clone(poll_interval=1e-5)
        assert polling.exact_sum and polling.engine.exact
        digests[f'{spec} polling'] = run_cases(polling)
        polling.finalize()
        base.finalize()
    assert len(set(digests.values())) == 1, digests
    everyone = world.allgather(next(iter(digests.values())))
    assert len(set(everyone)) == 1, everyone
    return len(digests)


def refusals(*attempts):
    """Each attempt (a callable) must raise ConfigError in one line: their messages."""
    said = []
    for attempt in attempts:
        try:
            attempt()
        except ConfigError as e:
            assert '\n' not in str(e), str(e)
            said.append(str(e))
            continue
        raise AssertionError(f'{attempt.__name__}: not refused')
    return said


def with_comm(name, call, **options):
    """``call(comm)`` on a new communicator, finalized whatever happens."""
    ours = create(name, **options)
    try:
        call(ours)
    finally:
        ours.finalize()


def check_refusals(comm):
    """float16/bfloat16 on the wire, with the exact sum, refused on every rank in one line."""
    bind(comm)

    def option():
        create('rsap', exact_sum=True, allreduce_grad_dtype=numpy.float16)

    def set_config():
        with_comm('pure_allreduce', lambda c: c.set_config('allreduce_grad_dtype', 'bfloat16'),
                  exact_sum=True)

    def not_a_flag():
        create('rsaa', exact_sum='sometimes')
    return refusals(option, set_config, not_a_flag)


def check_virtual(comm, virtual, specs):
    """V = ``virtual`` virtual ranks: every spec, each process handing in the gradient sets of
    the virtual ranks it holds (``mean_grad_sets``), gives the reference's bits over V sets.
    Returns this process's virtual ranks."""
    bind(comm)
    for spec in specs:
        name, options = parse_spec(spec)
        ours = create(name, virtual_ranks=virtual, segment_size=64 * 1024, **options)
        assert list(ours.held) == list(virtual_ranks.held(virtual, P, RANK)), ours.held
        assert ours.exact_sum and f'{virtual} virtual ranks on {P}' in ours.describe()
        for seed, specs_ in enumerate((UNEVEN, MIXED, BIG), 70):
            model = Model(specs_)
            sets = [gradients(specs_, v, seed) for v in ours.held]
            for (_, p), g in zip(sorted(model.namedparams()), sets[0]):
                p.grad = g.copy()
            ours.mean_grad_sets(model, sets[1:])
            # Where some process sums several terms, phase 1 by messages carries integers.
            assert not any(b.sends_floats for b in ours.engine.buffers.values()) \
                or virtual == P, spec
            want = reference(specs_, seed, terms=virtual)
            for i, ((_, p), w) in enumerate(zip(sorted(model.namedparams()), want)):
                assert p.grad.tobytes() == w.tobytes(), (
                    f'{spec} V={virtual} P={P} seed {seed} array {i}: not the exact bits')
        ours.finalize()
    return list(ours.held)


def check_virtual_refusals(comm, virtual):
    """What virtual ranks refuse, on every rank alike, in one line each."""
    bind(comm)

    def fewer():
        create('rsap', virtual_ranks=P - 1)

    def inexact():
        create('rsaa', virtual_ranks=virtual, exact_sum=False)

    def one_set():
        model = Model(UNEVEN)
        for (_, p), g in zip(sorted(model.namedparams()), gradients(UNEVEN, RANK, 1)):
            p.grad = g
        with_comm('pure_allreduce', lambda c: c.multi_node_mean_grad(model),
                  virtual_ranks=virtual)
    return refusals(fewer, inexact, one_set)
