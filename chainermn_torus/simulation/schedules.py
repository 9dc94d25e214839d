"""The calls of a schedule (``algorithms.schedule``) as rounds of messages: what the
simulator plays.

Each call expands into rounds of point-to-point messages ``(src, dst, nbytes)`` and local
work ``(rank, kind, nbytes)``. MPI's own collectives are the library's business, so they
are expanded by stand-in algorithms (``LIBRARIES``): ``halving`` (recursive halving and
doubling: Rabenseifner's all-reduce, MPICH's choice for large messages), ``ring``, or
``doubling`` (all-reduce by recursive doubling of the whole buffer at every size, log2 P
full exchanges: latency-optimal, not bandwidth-optimal; the other collectives as
``halving``), with the usual folding of the ranks beyond the largest power of two;
MPI_Alltoall as pairwise exchange; a fence or a barrier as a dissemination barrier.
``messages()`` flattens rounds to ``(src, dst, nbytes, round)`` rows.

A round may carry ``repeat`` > 1: the same pattern that many times in a row (a ring's
P - 1 identical steps). The player simulates it once and extends each rank's time by the
repeats, so that rings and pairwise exchanges of thousands of ranks stay playable. Pairwise
exchanges of more than ``MAX_DISTINCT`` steps play evenly spaced representative shifts.
"""
import collections

from chainermn_torus.algorithms.collectives import ceil_log2
from chainermn_torus.algorithms.schedule import Call

__all__ = ['Round', 'LIBRARIES', 'expand', 'node_aware', 'rounds_of_calls',
           'messages', 'total_bytes']

LIBRARIES = ('halving', 'ring', 'doubling')
MAX_DISTINCT = 8


class Round:
    """Messages sent at the same step, the local work that follows them, and a repeat."""

    __slots__ = ('phase', 'messages', 'compute', 'repeat')

    def __init__(self, phase, messages=(), compute=(), repeat=1):
        self.phase = phase
        self.messages = list(messages)      # (src, dst, nbytes)
        self.compute = list(compute)        # (rank, kind, nbytes)
        self.repeat = int(repeat)

    def __repr__(self):
        return (f'Round({self.phase!r}, {len(self.messages)} messages, {len(self.compute)} '
                f'compute, repeat={self.repeat})')


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


def total_bytes(rounds):
    return sum(n * r.repeat for r in rounds for _, _, n in r.messages)
