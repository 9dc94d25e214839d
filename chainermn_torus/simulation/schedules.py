"""What each communicator sends, as data: the schedule the simulator plays.

Two levels, so that the simulator cannot drift from what runs:

* **calls**: the MPI calls a communicator makes for one segment of the packed buffer, in
  order, each with its group of ranks and its byte count (``Call``). They follow the code
  paths of ``communicators._torus`` / ``rsap`` / ``_shm`` / ``_half`` step by step, with the
  same split of a segment into M equal chunks and a tail, and rsap's put rounds come from
  ``communicators._schedule.put_rounds``, the function rsap itself runs. The tests run the
  real communicators under MPI, record every call they make, and compare them with these
  lists (tests/simulation).
* **rounds**: each call expanded into rounds of point-to-point messages
  ``(src, dst, nbytes)`` and local work ``(rank, kind, nbytes)``. MPI's own collectives are
  the library's business, so they are expanded by stand-in algorithms (``LIBRARIES``):
  ``halving`` (recursive halving and doubling: Rabenseifner's all-reduce, MPICH's choice for
  large messages), ``ring``, or ``doubling`` (all-reduce by recursive doubling of the whole
  buffer at every size, log2 P full exchanges: latency-optimal, not bandwidth-optimal; the
  other collectives as ``halving``), with the usual folding of the ranks beyond the largest
  power of two; MPI_Alltoall as pairwise exchange; a fence or a barrier as a dissemination
  barrier. ``messages()`` flattens a schedule to ``(src, dst, nbytes, round)`` rows.

A round may carry ``repeat`` > 1: the same pattern that many times in a row (a ring's
P - 1 identical steps). The player simulates it once and extends each rank's time by the
repeats, so that rings and pairwise exchanges of thousands of ranks stay playable. Pairwise
exchanges of more than ``MAX_DISTINCT`` steps play evenly spaced representative shifts.

Ranks are global ranks 0..P-1, placed node by node (rank r on node r // R) as the launcher
and ``_grid.Grid`` do: grid row r // M, position r % M.
"""
import collections
import math

from chainermn_torus.communicators._schedule import ceil_log2, put_rounds

__all__ = ['Call', 'Round', 'ALGORITHMS', 'LIBRARIES', 'segment_calls', 'expand',
           'node_aware', 'segment_rounds', 'rounds_of_calls', 'messages', 'segment_sizes',
           'Setup']

LIBRARIES = ('halving', 'ring', 'doubling')
# The simulated variants (communicators.variants names) and what each runs.
ALGORITHMS = ('pure_allreduce', 'rsaa', 'rsap', 'rsap_notify', 'shm')
MAX_DISTINCT = 8

# op: 'reduce_scatter' | 'allreduce' | 'allgather' | 'alltoall' | 'barrier' (MPI calls on
# ``group``), 'put' (group = (origin, target)), 'fence' (MPI_Win_fence over group, kind
# 'open' or 'close': the latter ends a round of puts), 'flush' (MPI_Win_flush of the origin
# to the target), 'notify' (a zero-byte message, group = (origin, target)), 'compute'
# (local work on each rank of group: kind 'reduce' = sums read two arrays and write one,
# 'copy' = memory traffic).
# nbytes: the call's buffer (a reduce-scatter's or all-gather's whole buffer, an
# all-to-all's send buffer), as the communicator passes it.
Call = collections.namedtuple('Call', 'op group nbytes kind')
Call.__new__.__defaults__ = (None,)


class Round(object):
    """Messages sent at the same step, the local work that follows them, and a repeat."""

    __slots__ = ('phase', 'messages', 'compute', 'repeat')

    def __init__(self, phase, messages=(), compute=(), repeat=1):
        self.phase = phase
        self.messages = list(messages)      # (src, dst, nbytes)
        self.compute = list(compute)        # (rank, kind, nbytes)
        self.repeat = int(repeat)

    def __repr__(self):
        return 'Round({!r}, {} messages, {} compute, repeat={})'.format(
            self.phase, len(self.messages), len(self.compute), self.repeat)


class Setup(collections.namedtuple('Setup', 'algorithm P M itemsize')):
    """algorithm (an ``ALGORITHMS`` name), P ranks, grid rows of M, bytes per element."""

    def __new__(cls, algorithm, P, M=1, itemsize=4):
        if algorithm not in ALGORITHMS:
            raise ValueError('chainermn_torus: no schedule for algorithm {!r}; simulated: '
                             '{}'.format(algorithm, ', '.join(ALGORITHMS)))
        if P < 1 or M < 1 or P % M:
            raise ValueError('chainermn_torus: grid rows of M = {} do not divide P = {} '
                             'ranks'.format(M, P))
        if itemsize not in (2, 4, 8):
            raise ValueError('chainermn_torus: itemsize must be 2 (float16), 4 or 8, got '
                             '{!r}'.format(itemsize))
        if algorithm == 'pure_allreduce':
            M = 1
        return super(Setup, cls).__new__(cls, algorithm, P, M, itemsize)

    @property
    def N(self):
        return self.P // self.M

    def rows(self):
        return [tuple(range(r * self.M, (r + 1) * self.M)) for r in range(self.N)]

    def columns(self):
        return [tuple(range(q, self.P, self.M)) for q in range(self.M)]


# --- level 1: the calls of one segment ----------------------------------------------------
def _reduce_calls(op, group, elems, itemsize):
    """A reducer's calls (``_reduction.MpiSum`` or ``_half.HalfReducer``) for one group."""
    p = len(group)
    if itemsize != 2:
        if op == 'allreduce' and p == 1:
            return []
        return [Call(op, group, elems * itemsize)]
    # float16: moved by MPI, summed by numba; the tail of an all-reduce in float32.
    if p == 1:
        return []
    if op == 'reduce_scatter':
        c = elems // p
        return [Call('alltoall', group, p * c * 2), Call('compute', group, p * c * 2, 'reduce')]
    if op == 'sum_small':
        return [Call('allreduce', group, elems * 4)]
    main = elems - elems % p
    calls = []
    if main:
        calls += _reduce_calls('reduce_scatter', group, main, 2)
        calls.append(Call('allgather', group, main * 2))
    if main < elems:
        calls.append(Call('allreduce', group, (elems - main) * 4))
    return calls


def _tail_calls(setup, tail):
    P = tuple(range(setup.P))
    op = 'sum_small' if setup.itemsize == 2 else 'allreduce'
    return (_reduce_calls(op, P, tail, setup.itemsize)
            + [Call('compute', P, tail * setup.itemsize, 'copy')])  # divide_by_size


def segment_calls(setup, elems):
    """The calls of every rank for one segment of ``elems`` elements, in program order.

    Calls that different groups make at the same step (every row's reduce-scatter) are
    listed one after another; ``calls_of(rank)`` picks one rank's sequence.
    """
    s, M = setup.itemsize, setup.M
    P = tuple(range(setup.P))
    if setup.algorithm == 'pure_allreduce':
        return _reduce_calls('allreduce', P, elems, s)
    rows, cols = setup.rows(), setup.columns()
    main = elems - elems % M
    c = main // M
    calls = []
    if c and setup.algorithm == 'shm' and M > 1:
        for step in range(M):  # reduce_in_turns: copy, then add, a barrier after each
            calls += [Call('compute', P, c * s, 'copy' if step == 0 else 'reduce')]
            calls += [Call('barrier', row, 0) for row in rows]
        for col in cols:
            calls += _reduce_calls('allreduce', col, c, s)
        calls.append(Call('compute', P, c * s, 'copy'))  # divide
        calls += [Call('barrier', row, 0) for row in rows]
        calls.append(Call('compute', P, (M - 1) * c * s, 'copy'))  # gather from the peers
    elif c:
        if M > 1:
            for row in rows:
                calls += _reduce_calls('reduce_scatter', row, main, s)
        for col in cols:
            calls += _reduce_calls('allreduce', col, c, s)
        calls.append(Call('compute', P, c * s, 'copy'))  # divide into place
        if M > 1:
            calls += _gather_calls(setup, rows, c)
    if main < elems:
        calls += _tail_calls(setup, elems - main)
    return calls


def _gather_calls(setup, rows, c):
    s = setup.itemsize
    if setup.algorithm == 'rsaa':
        return [Call('allgather', row, setup.M * c * s) for row in rows]
    rounds = put_rounds(setup.M)  # the schedule rsap runs
    calls = []
    fence = setup.algorithm == 'rsap'
    if fence:
        calls += [Call('fence', row, 0, 'open') for row in rows]
    for rnd in rounds:
        for row in rows:
            for o, t, a, b in rnd:
                calls.append(Call('put', (row[o], row[t]), (b - a) * c * s))
        if fence:
            calls += [Call('fence', row, 0, 'close') for row in rows]
        else:  # notify: flush each target put to in the round, then a zero-byte message
            pairs = sorted({(o, t) for o, t, a, b in rnd})
            for row in rows:
                calls += [Call('flush', (row[o], row[t]), 0) for o, t in pairs]
            for row in rows:
                calls += [Call('notify', (row[o], row[t]), 0) for o, t in pairs]
    return calls


def begin_calls(setup):
    """Calls once per all-reduce call, before the first segment: every rank checks that the
    ranks' layouts agree (``_packing.check_same_layout``, two int64 by MPI_Allreduce)."""
    if setup.P == 1:
        return []
    return [Call('allreduce', tuple(range(setup.P)), 16)]


def end_calls(setup):
    """Calls once per all-reduce call, after the last segment (shm's closing barrier)."""
    if setup.algorithm == 'shm' and setup.M > 1:
        return [Call('barrier', row, 0) for row in setup.rows()]
    return []


ONE_SIDED = ('put', 'flush', 'notify')


def calls_of(calls, rank):
    """One rank's calls, as the recorder in the tests sees them: the collectives of the
    groups it is in, and the one-sided calls and notifications it makes as origin."""
    return [c for c in calls if (c.group[0] == rank if c.op in ONE_SIDED else rank in c.group)]


def call_calls(setup, segments):
    """The calls of one whole all-reduce call over segments of the given sizes."""
    calls = begin_calls(setup)
    for elems in segments:
        calls += segment_calls(setup, elems)
    return calls + end_calls(setup)


# --- level 2: rounds of messages -----------------------------------------------------------
def _pow2_below(p):
    return 1 << (p.bit_length() - 1)


def _fold(group, nbytes, phase, reduce):
    """Ranks beyond the largest power of two hand their data to a partner first."""
    p, low = len(group), _pow2_below(len(group))
    if p == low:
        return []
    msgs = [(group[low + i], group[i], nbytes) for i in range(p - low)]
    comp = [(group[i], 'reduce', nbytes) for i in range(p - low)] if reduce else []
    return [Round(phase, msgs, comp)]


def _unfold(group, nbytes, phase):
    p, low = len(group), _pow2_below(len(group))
    if p == low:
        return []
    return [Round(phase, [(group[i], group[low + i], nbytes) for i in range(p - low)])]


def _halving(group, nbytes, phase, reduce):
    """Recursive halving over the first power-of-two ranks: halves of the data each step."""
    low = _pow2_below(len(group))
    rounds, size, d = [], nbytes, low // 2
    while d >= 1:
        size /= 2.0
        msgs = [(group[i], group[i ^ d], size) for i in range(low)]
        comp = [(group[i], 'reduce', size) for i in range(low)] if reduce else []
        rounds.append(Round(phase, msgs, comp))
        d //= 2
    return rounds


def _doubling(group, nbytes, phase):
    """Recursive doubling of pieces of nbytes / low: each step sends what it holds."""
    low = _pow2_below(len(group))
    rounds, size, d = [], nbytes / float(low), 1
    while d < low:
        rounds.append(Round(phase, [(group[i], group[i ^ d], size) for i in range(low)]))
        size *= 2
        d *= 2
    return rounds


def _ring(group, piece, phase, reduce):
    p = len(group)
    msgs = [(group[i], group[(i + 1) % p], piece) for i in range(p)]
    comp = [(g, 'reduce', piece) for g in group] if reduce else []
    return [Round(phase, msgs, comp, repeat=p - 1)]


def _shifts(p):
    """Pairwise exchange steps 1..p-1, or MAX_DISTINCT representatives with repeats."""
    steps = p - 1
    if steps <= MAX_DISTINCT:
        return [(s, 1) for s in range(1, p)]
    k = MAX_DISTINCT
    bounds = [round(i * steps / float(k)) for i in range(k + 1)]
    return [(1 + (bounds[i] + bounds[i + 1]) // 2, bounds[i + 1] - bounds[i])
            for i in range(k) if bounds[i + 1] > bounds[i]]


def _pairwise(group, piece, phase):
    p = len(group)
    return [Round(phase, [(group[i], group[(i + s) % p], piece) for i in range(p)], repeat=r)
            for s, r in _shifts(p)]


def _dissemination(group, phase):
    """A barrier: ceil(log2 p) rounds of zero-byte messages to rank + 1, 2, 4, ...

    Past 64 ranks the rounds are played as the first one repeated: a barrier costs
    latencies, and thousands of fences of thousands of ranks would dominate the run."""
    p, rounds, d = len(group), [], 1
    if p > 64:
        return [Round(phase, [(group[i], group[(i + 1) % p], 0) for i in range(p)],
                      repeat=ceil_log2(p))]
    while d < p:
        rounds.append(Round(phase, [(group[i], group[(i + d) % p], 0) for i in range(p)]))
        d *= 2
    return rounds


def expand(call, library='halving', phase=None):
    """The rounds of one call (``library`` chooses the stand-in for MPI's collectives)."""
    if library not in LIBRARIES:
        raise ValueError('chainermn_torus: library algorithm must be one of {}, got {!r}'.format(
            ', '.join(LIBRARIES), library))
    op, group, n = call.op, call.group, float(call.nbytes)
    phase = phase or op
    p = len(group)
    if op == 'compute':
        return [Round(phase, compute=[(g, call.kind, n) for g in group])] if n else []
    if op in ('put', 'notify'):
        return [Round(phase, [(group[0], group[1], n)])]
    if op == 'flush':  # waits on the origin for its puts to land: the player's 'sync' cost
        return [Round(phase, compute=[(group[0], 'flush', 0)])]
    if p == 1:
        return []
    if op == 'barrier':
        return _dissemination(group, phase)
    if op == 'fence':
        # A barrier, and where the fence closes a round of puts, the wait for them to land
        # (charged by the player where the row spans nodes: calibrate's fence_inter).
        close = [Round(phase, compute=[(g, 'fence', 0) for g in group])]
        return _dissemination(group, phase) + (close if call.kind == 'close' else [])
    if op == 'alltoall':
        return _pairwise(group, n / p, phase)
    if op == 'allreduce' and (n < 2048 or library == 'doubling'):
        # Recursive doubling of the whole buffer: MPICH's choice for short messages, and a
        # library that uses it for every size (Intel MPI's I_MPI_ADJUST_ALLREDUCE=1).
        low = _pow2_below(p)
        return (_fold(group, n, phase, True)
                + [Round(phase, [(group[i], group[i ^ d], n) for i in range(low)],
                         [(group[i], 'reduce', n) for i in range(low)])
                   for d in (1 << k for k in range(low.bit_length() - 1))]
                + _unfold(group, n, phase))
    if library == 'ring':
        piece = n / p
        if op == 'reduce_scatter':
            return _ring(group, piece, phase, True)
        if op == 'allgather':
            return _ring(group, piece, phase, False)
        return _ring(group, piece, phase, True) + _ring(group, piece, phase, False)
    if op == 'reduce_scatter':
        return (_fold(group, n, phase, True) + _halving(group, n, phase, True)
                + _unfold(group, n / p, phase))
    if op == 'allgather':
        return (_fold(group, n / p, phase, False) + _doubling(group, n, phase)
                + _unfold(group, n, phase))
    return (_fold(group, n, phase, True) + _halving(group, n, phase, True)
            + _doubling(group, n, phase) + _unfold(group, n, phase))


def node_aware(node_of, inner=None):
    """An ``expand`` that plays MPI's all-reduce as MPICH does on a communicator spanning
    several nodes with several of its ranks on one node (``node_of[rank]``): reduce inside
    each node to its first rank, all-reduce among those, broadcast inside each node
    (binomial trees). Other calls, and groups without such nodes, as ``inner``."""
    inner = inner or expand

    def expand_call(call, library='halving'):
        if call.op != 'allreduce' or len(call.group) < 2:
            return inner(call, library)
        by_node = collections.OrderedDict()
        for r in call.group:
            by_node.setdefault(node_of[r], []).append(r)
        if len(by_node) == 1 or all(len(v) == 1 for v in by_node.values()):
            return inner(call, library)
        n = float(call.nbytes)
        up, down, d = [], [], 1
        while d < max(len(v) for v in by_node.values()):
            msgs, comp = [], []
            for members in by_node.values():
                for i in range(d, len(members), 2 * d):
                    msgs.append((members[i], members[i - d], n))
                    comp.append((members[i - d], 'reduce', n))
            up.append(Round('node reduce', msgs, comp))
            down.insert(0, Round('node bcast', [(b, a, c) for a, b, c in msgs]))
            d *= 2
        leaders = tuple(v[0] for v in by_node.values())
        return up + inner(Call('allreduce', leaders, call.nbytes), library) + down
    return expand_call


def _merge(per_group):
    """Rounds of calls that run at the same step in different groups, merged index-wise."""
    out = []
    for rounds in per_group:
        for i, r in enumerate(rounds):
            if i == len(out):
                out.append(Round(r.phase, repeat=r.repeat))
            out[i].messages += r.messages
            out[i].compute += r.compute
    return out


def segment_rounds(setup, elems, library='halving'):
    """The rounds of one segment of ``elems`` elements."""
    return rounds_of_calls(segment_calls(setup, elems), library)


def rounds_of_calls(calls, library='halving', expand_call=None):
    """The rounds of a list of calls: consecutive calls on disjoint groups run side by
    side. ``expand_call(call, library)`` replaces ``expand`` (``node_aware``)."""
    expand_call = expand_call or expand
    rounds, batch, busy = [], [], set()
    for call in calls:
        members = set(call.group)
        # Puts (and notifications) between two fences all fly at once, as does local work.
        concurrent = call.op in ('put', 'notify', 'flush', 'compute')
        if batch and (call.op != batch[0].op or (members & busy and not concurrent)):
            rounds += _merge([expand_call(c, library) for c in batch])
            batch, busy = [], set()
        batch.append(call)
        busy |= members
    if batch:
        rounds += _merge([expand_call(c, library) for c in batch])
    return rounds


def messages(rounds):
    """(src, dst, nbytes, round) rows; a repeated round is listed once per repeat."""
    k = 0
    for r in rounds:
        for _ in range(r.repeat):
            for src, dst, n in r.messages:
                yield (src, dst, n, k)
            k += 1


# --- the segments of a model's buffer -------------------------------------------------------
def segment_sizes(model, segment_bytes, itemsize=4):
    """{elements: count} of the segments the communicators cut the model's buffer into.

    ``model``: 'resnet50' or 'mlp' (their real parameter shapes, cut by
    ``_packing.plan_segments`` as the communicators do), or a number of float32 elements
    (cut into equal segments). ``segment_bytes`` None: one segment per parameter array, as
    ChainerMN's ``naive`` sends them (one MPI_Allreduce each).
    """
    if segment_bytes is None:
        if not isinstance(model, str):
            raise ValueError('chainermn_torus: one segment per array needs a model\'s '
                             'arrays (resnet50, mlp), not a byte count')
        from chainermn_torus.bench.gradient_sets import model_params
        sizes = [math.prod(s) for _, s in model_params(model)]
        return dict(collections.Counter(sizes))
    seg = segment_bytes // itemsize if segment_bytes else 0
    if isinstance(model, str):
        from chainermn_torus.bench.gradient_sets import model_params
        from chainermn_torus.communicators import _packing
        layout = _packing.Layout([(n, s, 'f{}'.format(itemsize))
                                  for n, s in model_params(model)])
        plan = _packing.plan_segments(layout, seg)
        sizes = [hi - lo for lo, hi, _ in plan]
    else:
        total = int(model)
        if not seg:
            sizes = [total]
        else:
            sizes = [min(seg, total - lo) for lo in range(0, total, seg)]
    return dict(collections.Counter(sizes))


def total_bytes(rounds):
    return sum(n * r.repeat for r in rounds for _, _, n in r.messages)


def round_count(rounds):
    return sum(r.repeat for r in rounds)
