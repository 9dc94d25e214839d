"""rsap: the torus of ``torus`` with the gather phase as MPI-3 one-sided Put (Tamura & Hanawa).

Put rounds by recursive doubling in the row: in round i, position q puts every chunk it
holds into position q XOR 2^i's window at the same offset, so nothing is copied on the
receiving side. M need not be a power of two: with M' the largest power of two <= M, the
positions q >= M' ("extras") first put their chunk to q - M'; the first M' positions then
run the doubling rounds carrying two chunk ranges each (their own group, and the group
shifted by M'); a last round puts the full result to each extra (two rounds more).

Synchronisation (``sync``): 'fence' opens the epoch with MPI_Win_fence and closes each
round with one (Tamura & Hanawa); 'notify' flushes each target of a round and sends it a
zero-byte message (partners only). Cost: the rounds of ``put_rounds`` (the schedule rsap
runs, not a formula for it), each closed by a fence modelled as a barrier over the row
(2 log2 p latencies), and (p-1)/p n bytes at the Put rate; the model does not tell the
two synchronisations apart.
"""
from chainermn_torus.algorithms.collectives import Call, ceil_log2
from chainermn_torus.algorithms.torus import Torus

__all__ = ['put_rounds', 'put_round_count', 'Rsap', 'SYNC_MODELLED']

SYNC_MODELLED = ('fence', 'notify')


def put_rounds(M):
    """The put schedule for a row of M positions.

    Returns a list of rounds; each round is a list of (origin, target, first_chunk, end_chunk)
    meaning: origin puts chunks [first_chunk, end_chunk) into target's window.
    """
    low = 1 << (M.bit_length() - 1)  # M' = largest power of two <= M
    rounds = []
    if M > low:
        rounds.append([(e, e - low, e, e + 1) for e in range(low, M)])

    def held(q, width):
        # After doubling up to `width`, q holds its aligned group and the group's extras.
        g = q & ~(width - 1)
        ranges = [(g, g + width)]
        if g + low < M:
            ranges.append((g + low, min(g + width + low, M)))
        return ranges

    width = 1
    while width < low:
        rounds.append([(q, q ^ width, a, b) for q in range(low) for a, b in held(q, width)])
        width *= 2
    if M > low:
        last = []
        for e in range(low, M):
            last.append((e - low, e, 0, e))
            if e + 1 < M:
                last.append((e - low, e, e + 1, M))
        rounds.append(last)
    return rounds


def put_round_count(M):
    """len(put_rounds(M)), without building the schedule (a row of millions in the
    planner): log2 of the largest power of two <= M, plus a round before and after for the
    positions beyond it."""
    low = 1 << (M.bit_length() - 1)
    return (low.bit_length() - 1) + (2 if M > low else 0)


class Rsap(Torus):
    gather_phase = 'put'

    def __init__(self, sync='fence'):
        if sync not in SYNC_MODELLED:
            raise ValueError('chainermn_torus: the rsap schedule models sync {}, not '
                             '{!r}'.format(', '.join(SYNC_MODELLED), sync))
        self.sync = sync
        self.row_of_one = sync == 'fence'  # plans name M = 1 after plain rsap

    def gather_calls(self, setup, c):
        s, rows = setup.itemsize, setup.rows()
        fence = self.sync == 'fence'
        calls = [Call('fence', row, 0, 'open') for row in rows] if fence else []
        for rnd in put_rounds(setup.M):
            for row in rows:
                for o, t, a, b in rnd:
                    calls.append(Call('put', (row[o], row[t]), (b - a) * c * s))
            if fence:
                calls += [Call('fence', row, 0, 'close') for row in rows]
            else:  # flush each target put to in the round, then a zero-byte message
                pairs = sorted({(o, t) for o, t, a, b in rnd})
                for row in rows:
                    calls += [Call('flush', (row[o], row[t]), 0) for o, t in pairs]
                for row in rows:
                    calls += [Call('notify', (row[o], row[t]), 0) for o, t in pairs]
        return calls

    def gather_cost(self, row, n, net):
        p = row.p
        if p <= 1:
            return 0.0
        rounds = put_round_count(p)
        fence = 2 * ceil_log2(p) * row.alpha(net)  # a fence costs about a barrier over the row
        return rounds * (row.alpha(net) + fence) + (p - 1.0) / p * n * row.beta(net, put=True)
