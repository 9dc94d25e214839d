"""Schedules as data (no MPI, no SimGrid): the stand-in collectives move the bytes their
algorithms must, rsap's puts are rsap's own put_rounds, and bad input is refused."""
import collections

import pytest

from chainermn_torus.algorithms.rsap import put_rounds
from chainermn_torus.algorithms import schedule as A, segments
from chainermn_torus.simulation import schedules as S
import package_probes


def bytes_per_rank(rounds, side=0):
    """Bytes each rank sends (side 0) or receives (side 1)."""
    out = collections.Counter()
    for r in rounds:
        for m in r.messages:
            out[m[side]] += m[2] * r.repeat
    return out


def sent_per_rank(rounds):
    return bytes_per_rank(rounds, 0)


def received_per_rank(rounds):
    return bytes_per_rank(rounds, 1)


@pytest.mark.parametrize('library', S.LIBRARIES)
@pytest.mark.parametrize('p', [2, 4, 8, 16])
def test_collectives_move_the_bandwidth_optimal_bytes_on_powers_of_two(library, p):
    n = 1 << 20
    group = tuple(range(p))
    rs = S.expand(A.Call('reduce_scatter', group, n), library)
    ag = S.expand(A.Call('allgather', group, n), library)
    for rounds in (rs, ag):
        assert sorted(sent_per_rank(rounds).values()) == pytest.approx([n * (p - 1) / p] * p)
    ar = sent_per_rank(S.expand(A.Call('allreduce', group, n), library))
    per_rank = n * (p - 1) / p * 2 if library != 'doubling' else n * (p.bit_length() - 1)
    assert sorted(ar.values()) == pytest.approx([per_rank] * p)
    # rounds: log2 p for halving/doubling steps, p - 1 for a ring
    steps = package_probes.round_count(rs)
    assert steps == (p - 1 if library == 'ring' else p.bit_length() - 1)


@pytest.mark.parametrize('p', [3, 5, 6, 7, 12])
def test_non_powers_of_two_fold_and_every_rank_takes_part(p):
    n = 3000
    group = tuple(range(p))
    for op in ('reduce_scatter', 'allgather', 'allreduce'):
        rounds = S.expand(A.Call(op, group, n))
        talk = set(sent_per_rank(rounds)) | set(received_per_rank(rounds))
        assert talk == set(group), (op, p)
        # the extras (beyond the largest power of two) only talk to their partner
        low = 1 << (p.bit_length() - 1)
        for src, dst, _, _ in S.messages(rounds):
            if src >= low:
                assert dst == src - low
    ring = S.expand(A.Call('allgather', group, n), 'ring')
    assert sorted(sent_per_rank(ring).values()) == pytest.approx([n * (p - 1) / p] * p)


@pytest.mark.parametrize('M', [2, 3, 4, 5, 6, 7, 8])
def test_rsap_puts_are_put_rounds_and_every_position_gets_every_chunk(M):
    c, P = 100, 2 * M
    setup = A.Setup('rsap', P, M)
    calls = A.segment_calls(setup, M * c)  # no tail
    puts = [x for x in calls if x.op == 'put']
    want = collections.Counter()
    for rnd in put_rounds(M):
        for o, t, a, b in rnd:
            want[(o, t)] += (b - a) * c * 4
    got = collections.Counter()
    for x in puts:
        if x.group[0] < M:  # the first row
            got[x.group] += x.nbytes
    assert got == want
    # fences: one before the rounds, one after each
    first_row = tuple(range(M))
    assert sum(1 for x in calls if x.op == 'fence' and x.group == first_row) == \
        len(put_rounds(M)) + 1
    # what lands: chunk coverage, replayed from the put schedule
    held = [{q} for q in range(M)]
    for rnd in put_rounds(M):
        new = [set(h) for h in held]
        for o, t, a, b in rnd:
            assert set(range(a, b)) <= held[o]
            new[t] |= set(range(a, b))
        held = new
    assert all(h == set(range(M)) for h in held)


def test_float16_moves_half_the_bytes_and_sums_locally():
    s32 = A.Setup('rsaa', 8, 2, itemsize=4)
    s16 = A.Setup('rsaa', 8, 2, itemsize=2)
    b32 = S.total_bytes(package_probes.segment_rounds(s32, 1 << 16))
    b16 = S.total_bytes(package_probes.segment_rounds(s16, 1 << 16))
    assert b16 == pytest.approx(b32 / 2, rel=0.02)
    ops = {x.op for x in A.segment_calls(s16, 1 << 16)}
    assert 'alltoall' in ops and 'reduce_scatter' not in ops


@pytest.mark.parametrize('algorithm, M', [('rsap', 2), ('rsaa', 3), ('rsaa', 6), ('shm', 3)])
def test_the_exact_sum_moves_floats_in_phase_1_integers_in_phase_2_and_the_means_last(
        algorithm, M):
    # Issue 85: phase 1 by messages carries the floats, summed as integers by their
    # receivers (communicators._exact_scatter); the node-shared rows sum integers in their
    # window; phase 2 reduce-scatters the integers and gathers the means, the tail sums
    # int64, phase 3 moves the means' float32; every call first sums the scales: one float64
    # per array by a MAX all-reduce
    plain, exact = A.Setup(algorithm, 6, M, 4), A.Setup(algorithm, 6, M, 4, exact=True)
    calls = {s: A.segment_calls(s, 1001) for s in (plain, exact)}
    rows, cols = plain.rows(), plain.columns()
    c = 1001 // M
    # phase 1: an all-to-all of the floats and the receivers' sums for a reduce-scatter
    scatters = [x for x in calls[plain] if x.op == 'reduce_scatter']
    if algorithm == 'shm':   # the node-shared rows: the floats packed, one barrier, one sum
        barriers = {s: sum(x.op == 'barrier' for x in calls[s]) for s in calls}
        assert barriers == {plain: len(rows) * (M + 1), exact: len(rows) * 2}, barriers
    else:
        sent = [x for x in calls[exact] if x.op == 'alltoall']
        summed = [x for x in calls[exact] if x.kind == 'reduce']
        assert [(x.group, x.nbytes) for x in sent] == [(x.group, x.nbytes) for x in scatters]
        assert [x.group for x in summed] == [x.group for x in scatters]
    # phase 2: the columns' integers reduce-scattered, the means all-gathered (1.5x), the
    # column's last c % N elements all-reduced as integers
    N = 6 // M
    sub = c // N
    assert [x for x in calls[plain] if x.op == 'allreduce' and x.group in cols] == [
        A.Call('allreduce', col, c * 4) for col in cols] * (N > 1)
    column = [x for x in calls[exact] if x.group in cols and x.op != 'compute']
    assert column == ([A.Call('reduce_scatter', col, sub * N * 8) for col in cols]
                      + [A.Call('allgather', col, sub * N * 4) for col in cols]
                      + [A.Call('allreduce', col, (c - sub * N) * 8) for col in cols]
                      * (c % N != 0)) * (N > 1), column
    # phase 3 and the tail: the gather in the means, the tail's sum in integers
    assert [x for x in calls[plain] if x.op in ('put', 'allgather') and x.group in rows] == \
        [x for x in calls[exact] if x.op in ('put', 'allgather') and x.group in rows]
    tail = 1001 - M * c
    P = tuple(range(6))
    assert [x.nbytes for x in calls[exact] if x.group == P and x.op == 'allreduce'] == \
        [tail * 8] * bool(tail)
    assert A.begin_calls(exact, 161) == A.begin_calls(plain) + [
        A.Call('allreduce', tuple(range(6)), 161 * 8)]
    with pytest.raises(ValueError, match=r'itemsize 4 or 8\), got itemsize 2'):
        A.Setup('rsap', 6, 2, 2, exact=True)


def test_pure_allreduces_exact_sum_is_one_all_reduce_of_the_integers():
    # An all-to-all of all P ranks takes P - 1 rounds (8,191 in the study's largest case):
    # pure_allreduce's exact sum stays MPI's all-reduce, of the integers (twice the bytes)
    plain, exact = (A.segment_calls(A.Setup('pure_allreduce', 6, 1, 4, exact=e), 1001)
                    for e in (False, True))
    assert [(c.op, 2 * c.nbytes) for c in plain] == [(c.op, c.nbytes) for c in exact] == [
        ('allreduce', 1001 * 8)]


def test_rows_work_side_by_side_in_every_phase():
    # the float16 and exact sums' phase 1 is two calls a row (an all-to-all, the sum): each
    # call of every row before the next, or the rows' phases would run one after the other
    for itemsize, exact in ((2, False), (4, True)):
        setup = A.Setup('rsaa', 8, 2, itemsize, exact=exact)
        rounds = S.rounds_of_calls(A.segment_calls(setup, 1 << 12))
        first = [r for r in rounds if r.messages][0]
        assert {src for src, _, _ in first.messages} == set(range(8)), (itemsize, first)


def test_tails_and_shm_follow_the_segment_split():
    setup = A.Setup('rsaa', 6, 3)
    calls = A.segment_calls(setup, 1001)  # 999 in 3 chunks of 333, a tail of 2
    assert A.Call('reduce_scatter', (0, 1, 2), 999 * 4) in calls
    assert A.Call('allreduce', (0, 3), 333 * 4) in calls
    assert A.Call('allreduce', tuple(range(6)), 2 * 4) in calls
    shm = A.segment_calls(A.Setup('shm', 6, 3), 999)
    assert {x.op for x in shm} == {'compute', 'barrier', 'allreduce'}
    assert A.end_calls(A.Setup('shm', 6, 3)) == [A.Call('barrier', r, 0) for r in ((0, 1, 2),
                                                                                   (3, 4, 5))]


def test_repeated_rounds_expand_in_messages():
    rounds = S.expand(A.Call('allgather', (0, 1, 2, 3), 4000), 'ring')
    rows = list(S.messages(rounds))
    assert len(rows) == 4 * 3 and [r[3] for r in rows] == sorted(r[3] for r in rows)
    assert rows[-1][3] == 2


def test_large_groups_stay_playable():
    # 8,192 ranks: pairwise exchanges play representatives, barriers a repeated round
    rounds = S.expand(A.Call('alltoall', tuple(range(8192)), 8192 * 100))
    assert len(rounds) == S.MAX_DISTINCT and package_probes.round_count(rounds) == 8191
    assert len(S.expand(A.Call('barrier', tuple(range(8192)), 0))) == 1


def test_segment_sizes_cover_the_model():
    sizes = segments.segment_sizes('mlp', 4 << 20)
    assert sum(k * v for k, v in sizes.items()) == 1796010
    # Segments are cut in bytes, as the communicators cut them: float16's hold twice the
    # elements, so ResNet-50 has fewer of them.
    half = segments.segment_sizes('resnet50', 4 << 20, itemsize=2)
    full = segments.segment_sizes('resnet50', 4 << 20)
    assert max(half) == 2 << 20 and max(full) == 1 << 20
    assert sum(half.values()) < sum(full.values())
    assert sum(k * v for k, v in half.items()) == sum(k * v for k, v in full.items())
    assert segments.segment_sizes(10, 16) == {4: 2, 2: 1}


def test_bad_input_is_refused_with_the_allowed_values():
    with pytest.raises(ValueError, match="no schedule for algorithm 'nope'"):
        A.Setup('nope', 4, 2)
    with pytest.raises(ValueError, match='M = 3 do not divide P = 4'):
        A.Setup('rsap', 4, 3)
    with pytest.raises(ValueError, match='halving, ring, doubling'):
        S.expand(A.Call('allreduce', (0, 1), 8), 'bruck')


def test_node_aware_all_reduce_reduces_in_the_node_first():
    # 3 nodes x 2 ranks: a node's second rank sends to its first, the three first ranks
    # all-reduce, then the first ranks send the result back; other calls are unchanged.
    node_of = [r // 2 for r in range(6)]
    expand = S.node_aware(node_of)
    rounds = expand(A.Call('allreduce', tuple(range(6)), 1000))
    assert rounds[0].messages == [(1, 0, 1000.0), (3, 2, 1000.0), (5, 4, 1000.0)]
    assert rounds[-1].messages == [(0, 1, 1000.0), (2, 3, 1000.0), (4, 5, 1000.0)]
    middle = {m[:2] for r in rounds[1:-1] for m in r.messages}
    assert {r for pair in middle for r in pair} == {0, 2, 4}
    col = A.Call('allreduce', (0, 2, 4), 1000)  # one rank per node: as the library's
    assert [r.messages for r in expand(col)] == [r.messages for r in S.expand(col)]
