"""The row phases in a node-shared window (``communicators._shm``), rows inside nodes.

Per segment's main part of M chunks of c elements: reduce in turns (position q copies, then
adds, its chunk of every peer's gradient, a row barrier after each of the M steps), the
column all-reduce of the chunk by MPI as in ``torus``, the division, a barrier, and every
position copies the M - 1 other chunks from its peers. The tail as ``torus``. A closing
barrier per call keeps the next call from overwriting what a peer still reads.

Cost: (M + 2) barriers, about 3 (M-1)/M n bytes of node memory traffic per rank for the
reduction and 2 (M-1)/M n for the gather, and the column all-reduce of n / M; infinite
where rows span nodes (there is no shared memory across them).
"""
from chainermn_torus.algorithms.base import Algorithm
from chainermn_torus.algorithms.collectives import (
    Call, allreduce_cost, ceil_log2, exact_column_calls, reduce_calls, row_and_column,
    side_by_side, tail_calls)
from chainermn_torus.errors import ConfigError

__all__ = ['Shm']


class Shm(Algorithm):

    def segment_calls(self, setup, elems):
        # the sum in its bytes (the exact sum's integers; its column gathers the means), the
        # gather in the means'
        s, M, P = setup.reduce_itemsize, setup.M, tuple(range(setup.P))
        rows, cols = setup.rows(), setup.columns()
        main, c = setup.split(elems)
        calls = []
        if c and M > 1 and setup.exact:
            # the exact sum, one term a rank: every position's floats packed into its buffer,
            # a barrier, each position's chunk encoded and summed from its peers' buffers
            calls += [Call('compute', P, (M - 1) * c * setup.itemsize, 'copy')]
            calls += [Call('barrier', row, 0) for row in rows]
            calls += [Call('compute', P, M * c * setup.itemsize, 'reduce')]
        elif c and M > 1:
            for step in range(M):  # reduce_in_turns: copy, then add, a barrier after each
                calls += [Call('compute', P, c * s, 'copy' if step == 0 else 'reduce')]
                calls += [Call('barrier', row, 0) for row in rows]
        if c and M > 1:
            calls += side_by_side([exact_column_calls(col, c, setup.itemsize) if setup.exact
                                   else reduce_calls('allreduce', col, c, s) for col in cols])
            calls.append(Call('compute', P, c * s, 'copy'))  # divide
            calls += [Call('barrier', row, 0) for row in rows]
            calls.append(Call('compute', P, (M - 1) * c * setup.itemsize, 'copy'))  # gather
        elif c:  # a row of one: the column all-reduce alone
            for col in cols:
                calls += reduce_calls('allreduce', col, c, s)
            calls.append(Call('compute', P, c * s, 'copy'))
        if main < elems:
            calls += tail_calls(setup, elems - main)
        return calls

    def end_calls(self, setup):
        if setup.M > 1:
            return [Call('barrier', row, 0) for row in setup.rows()]
        return []

    def cost(self, nodes, R, n, net, grid):
        M = grid[0]
        row, col = row_and_column(nodes, R, M)
        if row.k != 0 and M > 1:
            return float('inf'), {'note': 'rows span nodes: no shared-memory path'}
        column = allreduce_cost(col, n / M, net)
        steps = (M + 2) * ceil_log2(M) * net.alpha_intra * 2
        reduce = 3.0 * (M - 1) / M * n * net.mem / 2 if M > 1 else 0.0
        gather = 2.0 * (M - 1) / M * n * net.mem / 2 if M > 1 else 0.0
        return steps + reduce + column + gather, {
            'reduce (shm)': steps + reduce, 'allreduce': column, 'gather (shm)': gather}

    def check_placement(self, M, R):
        if M > 1 and R % M:
            raise ConfigError('chainermn_torus: shm needs every grid row inside one node: '
                              f'M = {M} with {R} ranks per node (M must divide the ranks per '
                              'node; rsaa or rsap take any M)')
