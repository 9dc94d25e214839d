"""ChainerMN's communicator API, run with every communicator of ours and with ChainerMN's naive.

Run under ``mpiexec -n P``, or in the test worlds (tests/communicators/test_conformance_mpi.py:
one test per variant and P = 2, 3, 4, 6).
Every case below is a function of a communicator; it runs once with ``naive`` and once with
the variant under test, on the same inputs, and the two results must match:

- ``=``   equal bit for bit (arrays: same dtype, shape and bytes; NaN matches NaN);
- ``~``   equal within the rounding of a different summation order or of float16 on the
          wire (only the gradient means; at P = 2 every float32/float64 variant must be ``=``,
          since a sum of two terms rounds once whatever the order and 1/2 is exact);
- ``E``   both raised, the same exception type and the same message (for Chainer's debug
          mode, the same first sentence: ours go on to name the array);
- ``X``   a mismatch: the job reports it and fails.

Options: ``--only NAME`` (a variant label, repeatable), ``--markdown PATH`` (rank 0 writes
the matrix there). Every rank prints ``OK rank R`` when the whole matrix matches.
"""
import argparse
import hashlib
import os
import traceback
import warnings

import chainer
import chainer.functions as CF
import chainer.links as L
import numpy
from mpi4py import MPI

import chainermn
import chainermn.functions
import chainermn.links
import chainermn_torus  # noqa: F401 registers our names

import bound  # tests/mpi_workers
from conformance_variants import variants

warnings.simplefilter('ignore', FutureWarning)  # chainer.utils.experimental, on every call
warnings.simplefilter('ignore', DeprecationWarning)  # allreduce_grad, on purpose

world = P = RANK = None  # set by bind (bound.py: a world's Dup, or MPI.COMM_WORLD)
bind, create = bound.binder(globals())
F16, F32, F64 = numpy.float16, numpy.float32, numpy.float64


# --- inputs, the same on every run (seeded by rank) ---------------------------------------
def rng(*seed):
    # hashlib, not hash(): str hashes differ between processes, and the ranks must agree.
    digest = hashlib.md5(repr(seed).encode()).digest()
    return numpy.random.RandomState(int.from_bytes(digest[:4], 'little'))


def arr(shape, dtype=F32, *seed):
    return rng(RANK, shape, numpy.dtype(dtype).str, *seed).standard_normal(shape).astype(dtype)


class Model(chainer.Chain):
    """Parameters of three dtypes, sizes that no grid divides evenly, one never used."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(7, 5, initialW=rng('W1').standard_normal((5, 7)))
            self.l2 = L.Linear(5, 3, initialW=rng('W2').standard_normal((3, 5)))
            self.h = chainer.Parameter(rng('h').standard_normal((3, 2)).astype(F16))
            self.d = chainer.Parameter(rng('d').standard_normal((11,)).astype(F64))
            self.unused = chainer.Parameter(numpy.zeros((4,), F32))


def set_grads(model, seed, none=()):
    for name, p in sorted(model.namedparams()):
        p.grad = None if name in none else arr(p.shape, p.dtype, 'grad', name, seed)


def grads_of(model):
    return {n: None if p.grad is None else p.grad.copy() for n, p in sorted(model.namedparams())}


def params_of(model):
    return {n: p.array.copy() for n, p in sorted(model.namedparams())}


# --- the cases: each returns what must match, and whether it is a mean ("~" allowed) -------
CASES = []


def case(name, mean=False, raises=False):
    """``raises``: a bad call, which must raise with naive (and then the same with ours)."""
    def deco(fn):
        CASES.append((name, fn, mean, raises))
        return fn
    return deco


@case('rank, size, intra/inter')
def c_ranks(comm):
    return (comm.rank, comm.size, comm.intra_rank, comm.intra_size, comm.inter_rank,
            comm.inter_size)


@case('get/set_config')
def c_config(comm):
    seen = [comm.get_config('batched_copy'), {k: comm.get_config()[k] for k in
                                              ('batched_copy', '_within_config_scope')}]
    comm.set_config('batched_copy', False)
    seen.append(comm.get_config('batched_copy'))
    comm.set_config('batched_copy', True)
    seen.append(comm.get_config('batched_copy'))
    return seen


@case('set_config unknown', raises=True)
def c_config_bad(comm):
    comm.set_config('no_such_option', 1)


@case('get_config unknown', raises=True)
def c_config_get_bad(comm):
    return comm.get_config('no_such_option')


def ring(send_fn, recv_fn):
    """Each rank sends to the next, one pair at a time (Ssend cannot deadlock this way)."""
    got = None
    for src in range(P):
        dst = (src + 1) % P
        if RANK == src:
            send_fn(dst)
        if RANK == dst:
            got = recv_fn(src)
    return got


@case('send/recv array')
def c_sendrecv(comm):
    return ring(lambda d: comm.send(arr((3, 4)), d, 7), lambda s: comm.recv(s, 7))


@case('send/recv float16')
def c_sendrecv16(comm):
    return ring(lambda d: comm.send(arr((5,), F16), d, 8), lambda s: comm.recv(s, 8))


@case('send/recv tuple')
def c_sendrecv_tuple(comm):
    return ring(lambda d: comm.send((arr((2,), F64), arr((3, 1), F64)), d, 9),
                lambda s: comm.recv(s, 9))


@case('send_obj/recv_obj')
def c_sendrecv_obj(comm):
    return ring(lambda d: comm.send_obj({'from': RANK, 'a': arr((2,))}, d, tag=3),
                lambda s: comm.recv_obj(s, tag=3))


@case('bcast')
def c_bcast(comm):
    return [comm.bcast(arr((4, 3), dt, 'b'), root=r) for r in range(P) for dt in (F32, F64)]


@case('gather')
def c_gather(comm):
    return [comm.gather(arr((RANK + 1, 2), F32, 'g', r), root=r) for r in range(P)]


@case('scatter (tuple)')
def c_scatter_tuple(comm):
    return [comm.scatter(tuple(arr((i + 1, 2), F32, 's', r) for i in range(P)), root=r)
            for r in range(P)]


@case('scatter (array)')
def c_scatter_array(comm):
    return [comm.scatter(arr((P, 3), F64, 'sa', r), root=r) for r in range(P)]


@case('allgather')
def c_allgather(comm):
    return comm.allgather(arr((RANK + 2,), F32, 'ag'))


@case('alltoall')
def c_alltoall(comm):
    return comm.alltoall(tuple(arr((RANK + 1, d + 1), F32, 'aa', d) for d in range(P)))


@case('allreduce')
def c_allreduce(comm):
    return [comm.allreduce(arr((6,), dt, 'ar')) for dt in (F32, F64)] + \
        [comm.allreduce(numpy.arange(5, dtype=numpy.int32) * (RANK + 1))]


@case('bcast_obj, gather_obj, allreduce_obj')
def c_obj(comm):
    # ChainerMN's bcast_obj wants None on every rank but the root.
    return ([comm.bcast_obj({'r': RANK, 'x': arr((2,))} if RANK == r else None, root=r)
             for r in range(P)]
            + [comm.gather_obj(('rank', RANK), root=r) for r in range(P)]
            + [comm.allreduce_obj(RANK + 1), comm.allreduce_obj(arr((3,), F64, 'ao'))])


@case('alltoall, wrong length', raises=True)
def c_bad_alltoall(comm):
    comm.alltoall((arr((2,)),) * (P + 1))


@case('allreduce, tuple', raises=True)
def c_bad_allreduce(comm):
    comm.allreduce((arr((2,)), arr((2,))))


@case('gather, int8', raises=True)
def c_bad_gather(comm):
    comm.gather(numpy.zeros(3, numpy.int8), root=0)


@case('allgather, int8', raises=True)
def c_bad_allgather(comm):
    comm.allgather(numpy.zeros(3, numpy.int8))


@case('split', mean=True)
def c_split(comm):
    sub = comm.split(RANK % 2, -RANK)
    try:
        model = Model()
        set_grads(model, 'split')
        sub.multi_node_mean_grad(model)
        return [type(sub) is type(comm), sub.rank, sub.size, grads_of(model)]
    finally:
        sub.finalize()


@case('bcast_data')
def c_bcast_data(comm):
    model = Model()
    for name, p in model.namedparams():
        p.array[...] = arr(p.shape, p.dtype, 'data', name)  # differs by rank
    comm.bcast_data(model)
    return params_of(model)


def averaged(comm, seed, bad=None, debug=False, more_none=(), call='multi_node_mean_grad',
             **kwargs):
    """Gradients after one averaging call; ``bad`` is put into /l2/W on the last rank."""
    model = Model()
    set_grads(model, seed, none={'/unused'} | set(more_none))
    if bad is not None and RANK == P - 1:
        model.l2.W.grad[1, 2] = bad
    with chainer.using_config('debug', debug):
        getattr(comm, call)(model, **kwargs)
    return grads_of(model)


@case('multi_node_mean_grad', mean=True)
def c_mean(comm):
    # The second call reuses the first call's buffers (same layout).
    return [averaged(comm, 'mean'), averaged(comm, 'mean2')]


@case('multi_node_mean_grad zero_fill', mean=True)
def c_mean_zero_fill(comm):
    return averaged(comm, 'zf', more_none={'/l2/b'} if RANK % 2 else (), zero_fill=True)


@case('allreduce_grad (deprecated)', mean=True)
def c_allreduce_grad(comm):
    return averaged(comm, 'old', call='allreduce_grad')


@case('debug mode: finite', mean=True)
def c_debug_ok(comm):
    return averaged(comm, 'dbg', debug=True)


@case('debug mode: NaN on one rank', raises=True)
def c_debug_nan(comm):
    averaged(comm, 'nan', bad=numpy.nan, debug=True)


@case('debug off: inf averaged', mean=True)
def c_nodebug_nan(comm):
    return averaged(comm, 'nan', bad=numpy.inf)


@case('functions.bcast fwd+bwd')
def c_f_bcast(comm):
    out = []
    for root in range(P):
        x = chainer.Variable(arr((3, 2), F32, 'fb', root)) if RANK == root else None
        y = chainermn.functions.bcast(comm, x, root)
        CF.sum(y * (RANK + 1)).backward()
        out.append((y.array, None if x is None else x.grad))
    return out


@case('functions.gather fwd+bwd')
def c_f_gather(comm):
    out = []
    for root in range(P):
        x = chainer.Variable(arr((2, 3), F32, 'fg', root))
        ys = chainermn.functions.gather(comm, x, root)
        if RANK == root:
            sum(CF.sum(y * (i + 1)) for i, y in enumerate(ys)).backward()
            out.append(([y.array for y in ys], x.grad))
        else:
            ys.backward()
            out.append((ys.array, x.grad))
    return out


@case('functions.scatter fwd+bwd')
def c_f_scatter(comm):
    out = []
    for root in range(P):
        xs = [chainer.Variable(arr((2,), F32, 'fs', root, i)) for i in range(P)] \
            if RANK == root else None
        y = chainermn.functions.scatter(comm, xs, root)
        CF.sum(y * (RANK + 2)).backward()
        out.append((y.array, None if xs is None else [x.grad for x in xs]))
    return out


@case('functions.allgather fwd+bwd')
def c_f_allgather(comm):
    x = chainer.Variable(arr((2, 2), F32, 'fag'))
    ys = chainermn.functions.allgather(comm, x)
    sum(CF.sum(y * (i + 1 + RANK)) for i, y in enumerate(ys)).backward()
    return [y.array for y in ys], x.grad


@case('functions.alltoall fwd+bwd')
def c_f_alltoall(comm):
    xs = [chainer.Variable(arr((3,), F32, 'fat', d)) for d in range(P)]
    ys = chainermn.functions.alltoall(comm, xs)
    sum(CF.sum(y * y) for y in ys).backward()
    return [y.array for y in ys], [x.grad for x in xs]


@case('functions.send/recv fwd+bwd')
def c_f_p2p(comm):
    # Rank 0 sends x to rank 1, which returns x * 2 to rank 0; the loss is on rank 0.
    if RANK == 0:
        x = chainer.Variable(arr((4,), F32, 'p2p'))
        phi = chainermn.functions.send(x, comm, rank=1)
        y = chainermn.functions.recv(comm, rank=1, delegate_variable=phi)
        CF.sum(y * y).backward()
        return y.array, x.grad
    if RANK == 1:
        x = chainermn.functions.recv(comm, rank=0)
        phi = chainermn.functions.send(x * 2, comm, rank=0)
        phi.backward()
        return x.array
    return None


class Stage(chainer.Chain):
    def __init__(self, n_in, n_out, seed):
        super().__init__()
        with self.init_scope():
            self.l = L.Linear(n_in, n_out, initialW=rng('stage', seed).standard_normal(
                (n_out, n_in)))

    def forward(self, x):
        return CF.tanh(self.l(x))


@case('MultiNodeChainList fwd+bwd')
def c_chain_list(comm):
    # A ring: rank 0 -> 1 -> ... -> P-1 -> rank 0, which computes the loss.
    model = chainermn.MultiNodeChainList(comm)
    if RANK == 0:
        model.add_link(Stage(4, 5, 0), rank_in=None, rank_out=1)
        model.add_link(Stage(5, 2, 'last'), rank_in=P - 1, rank_out=None)
        y = model(numpy.linspace(-1, 1, 12, dtype=F32).reshape(3, 4))
        loss = CF.sum(y * y)
        loss.backward()
        out = [loss.array]
    else:
        model.add_link(Stage(5, 5, RANK), rank_in=RANK - 1, rank_out=(RANK + 1) % P)
        model().backward()
        out = []
    return out + [{n: p.grad for n, p in sorted(model.namedparams())}]


@case('MultiNodeBatchNormalization fwd+bwd')
def c_mnbn(comm):
    bn = chainermn.links.MultiNodeBatchNormalization(3, comm)
    x = chainer.Variable(arr((4 + RANK, 3), F32, 'bn'))
    y = bn(x)
    CF.sum(y * arr((4 + RANK, 3), F32, 'bnw')).backward()
    return y.array, x.grad, bn.avg_mean, bn.avg_var, bn.gamma.grad, bn.beta.grad


def _dataset():
    data = numpy.linspace(-2, 2, 23 * 4, dtype=F32).reshape(23, 4)
    labels = (numpy.arange(23) % 3).astype(numpy.int32)
    return chainer.datasets.TupleDataset(data, labels)


@case('scatter_dataset')
def c_scatter_dataset(comm):
    out = []
    for shuffle in (False, True):
        sub = chainermn.scatter_dataset(_dataset() if RANK == 0 else None, comm,
                                        shuffle=shuffle, seed=5)
        out.append([sub[i] for i in range(len(sub))])
    return out


@case('multi-node evaluator')
def c_evaluator(comm):
    sub = chainermn.scatter_dataset(_dataset() if RANK == 0 else None, comm)
    model = L.Classifier(L.Linear(4, 3, initialW=rng('eval').standard_normal((3, 4))))
    it = chainer.iterators.SerialIterator(sub, 4, repeat=False, shuffle=False)
    ev = chainermn.create_multi_node_evaluator(chainer.training.extensions.Evaluator(it, model),
                                               comm)
    return ev()  # the extension's call: a reporter scope around evaluate()


@case('multi-node optimizer step', mean=True)
def c_optimizer(comm):
    model = Model()
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.MomentumSGD(0.1), comm)
    opt.setup(model)
    for step in range(2):
        model.cleargrads()
        set_grads(model, ('opt', step), none={'/unused'})
        opt.update()
    return params_of(model)


@case('multi-node / synchronized iterators')
def c_iterators(comm):
    data = _dataset()
    it = chainermn.iterators.create_multi_node_iterator(
        chainer.iterators.SerialIterator(data, 5, shuffle=False) if RANK == 0 else None, comm)
    first = [next(it) for _ in range(2)]
    numpy.random.seed(11)  # rank 0 draws the shared seed from numpy's global generator
    sync = chainermn.iterators.create_synchronized_iterator(
        chainer.iterators.SerialIterator(data, 5, shuffle=True), comm)
    return first, [next(sync) for _ in range(2)]


# --- comparison ---------------------------------------------------------------------------
class Mismatch(Exception):
    pass


def compare(ref, got, tol, path='result'):
    """'=' if equal bit for bit, '~' if only within ``tol`` (a function of the reference);
    raises Mismatch naming the first difference."""
    if isinstance(ref, numpy.ndarray) or isinstance(got, numpy.ndarray):
        if not (isinstance(ref, numpy.ndarray) and isinstance(got, numpy.ndarray)):
            raise Mismatch(f'{path}: {type(ref).__name__} vs {type(got).__name__}')
        if ref.dtype != got.dtype or ref.shape != got.shape:
            raise Mismatch(f'{path}: {ref.dtype} {ref.shape} vs {got.dtype} {got.shape}')
        if ref.tobytes() == got.tobytes() or numpy.array_equal(ref, got, equal_nan=True):
            return '='
        if tol is None or ref.dtype.kind != 'f':
            worst = float(numpy.nanmax(numpy.abs(ref.astype(F64) - got.astype(F64))))
            raise Mismatch(f'{path}: values differ (max |diff| {worst:.3g})')
        a, b = ref.astype(F64), got.astype(F64)
        with numpy.errstate(invalid='ignore'):
            bound, diff = tol(ref), numpy.abs(a - b)
            ok = (a == b) | (numpy.isnan(a) & numpy.isnan(b)) | (diff <= bound)
        if ok.all():
            return '~'
        i = numpy.unravel_index(numpy.argmin(ok), ok.shape)
        raise Mismatch(f'{path}: at {i} naive {ref[i]!r}, ours {got[i]!r} '
                       f'(bound {float(bound[i]):.3g})')
    if isinstance(ref, dict) and isinstance(got, dict):
        if set(ref) != set(got):
            raise Mismatch(f'{path}: keys {sorted(ref)} vs {sorted(got)}')
        marks = [compare(ref[k], got[k], tol, f'{path}[{k!r}]') for k in ref]
        return '~' if '~' in marks else '='
    if isinstance(ref, (list, tuple)) and isinstance(got, (list, tuple)):
        if type(ref) is not type(got) or len(ref) != len(got):
            raise Mismatch(f'{path}: {type(ref).__name__} of {len(ref)} vs {type(got).__name__} '
                           f'of {len(got)}')
        marks = [compare(a, b, tol, f'{path}[{i}]') for i, (a, b) in
                 enumerate(zip(ref, got))]
        return '~' if '~' in marks else '='
    if isinstance(ref, numpy.generic) or isinstance(got, numpy.generic):
        return compare(numpy.asarray(ref), numpy.asarray(got), tol, path)
    if ref != got and not (ref != ref and got != got):
        raise Mismatch(f'{path}: {ref!r} vs {got!r}')
    return '='


def mean_tolerance(half):
    """Bound on |ours - naive| for a mean of P values of magnitude ~|x| (the inputs are
    standard normal, so 8 bounds every |g| here): each sum rounds at most P times, float16
    on the wire rounds each contribution and each partial sum once more."""
    eps = numpy.finfo(F16 if half else F32).eps
    scale = 8.0 * (P + 2)

    def tol(ref):
        e = eps if ref.dtype != F16 else max(eps, numpy.finfo(F16).eps)
        return e * (scale + 2 * numpy.abs(ref.astype(F64)))
    return tol


def run(fn, comm):
    try:
        return 'ok', fn(comm)
    except Exception as e:  # the exception is the result: compared with naive's
        if os.environ.get('CONFORMANCE_TRACE'):
            traceback.print_exc()
        return 'raised', e


def first_sentence(message):
    return str(message).split(' (', 1)[0]


def check(name, fn, mean, raises, label, ours, naive, options):
    kind_ref, ref = run(fn, naive)
    kind, got = run(fn, ours)
    if (kind_ref == 'raised') != raises:
        raise Mismatch('the case itself is wrong: with naive it {}'.format(
            f'raised {ref!r}' if kind_ref == 'raised' else 'returned'))
    if kind_ref == 'raised' or kind == 'raised':
        if kind_ref != kind:
            raise Mismatch('naive {} but {} {}: {}'.format(
                'raised ' + repr(ref) if kind_ref == 'raised' else 'returned',
                label, 'raised' if kind == 'raised' else 'returned',
                ''.join(traceback.format_exception(type(got), got, got.__traceback__))
                if kind == 'raised' else repr(got)[:300]))
        if not isinstance(got, type(ref)):
            raise Mismatch(f'naive raised {type(ref).__name__}, {label} '
                           f'raised {type(got).__name__}: {got}')
        if str(got) != str(ref) and first_sentence(got) != str(ref):
            raise Mismatch(f'messages differ: naive {str(ref)!r}, {label} {str(got)!r}')
        return 'E'
    half = options.get('allreduce_grad_dtype') is F16
    exact_expected = not mean or (P == 2 and not half)
    return compare(ref, got, None if exact_expected else mean_tolerance(half))


def check_matrix(comm, only=None, case_names=None):
    """The matrix on comm for the variants labelled ``only`` (default: all) and the cases
    ``case_names`` (default: all). Raises listing every rank's mismatches; returns
    (markdown table, number of cases)."""
    bind(comm)
    naive = create('naive')
    matrix, failures = {}, []
    todo = [v for v in variants(P) if not only or v[0] in only]
    for label, name, options in todo:
        ours = create(name, **options)
        for case_name, fn, mean, raises in CASES:
            if case_names and case_name not in case_names:
                continue
            if os.environ.get("CONFORMANCE_TRACE"):
                print("rank", RANK, label, case_name, flush=True)
            try:
                mark = check(case_name, fn, mean, raises, label, ours, naive, options)
            except Mismatch as e:
                mark = 'X'
                failures.append(f'rank {RANK}: {case_name} / {label}: {e}')
            # Every rank's mark: a cell is as good as its worst rank.
            marks = world.allgather(mark)
            cell = 'X' if 'X' in marks else '~' if '~' in marks else marks[0]
            matrix[(case_name, label)] = cell
        ours.finalize()
    naive.finalize()
    failures = sum(world.allgather(failures), [])
    table = render(matrix, [v[0] for v in todo])
    if failures:
        raise AssertionError('\n'.join(['FAIL ' + line for line in failures] + [table]))
    return table, len({c for c, _ in matrix})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--only', action='append')
    parser.add_argument('--case', action='append', help='run only these cases (by name)')
    parser.add_argument('--markdown')
    args = parser.parse_args()
    bind(MPI.COMM_WORLD)
    table, cases = check_matrix(world, args.only, args.case)
    if RANK == 0:
        print(table, flush=True)
        if args.markdown:
            with open(args.markdown, 'w') as f:
                f.write(LEGEND.format(P=P) + table)
    digest = hashlib.md5(table.encode()).hexdigest()[:8]
    print(f'OK rank {RANK} ({cases} cases, matrix {digest})', flush=True)


LEGEND = """# ChainerMN's communicator API x our communicators, P = {P}

Written by `make conformance` (`mpiexec -n {P} python tests/mpi_workers/check_conformance.py
--markdown ...`). Each case runs with ChainerMN's `naive` and with the variant, same inputs:
`=` equal bit for bit; `~` within the rounding of another summation order (P > 2) or of
float16 on the wire (gradient means only); `E` both raised the same exception and message
(for debug mode, the same first sentence); `X` would be a mismatch and fails the job.

"""


def render(matrix, labels):
    head = f'| API (P = {P}) | ' + ' | '.join(labels) + ' |'
    rule = '|---|' + '|'.join(':-:' for _ in labels) + '|'
    rows = ['| {} | {} |'.format(name, ' | '.join(matrix[(name, line)] for line in labels))
            for name, _, _, _ in CASES if (name, labels[0]) in matrix]
    return '\n'.join([head, rule] + rows) + '\n'


if __name__ == '__main__':
    main()
