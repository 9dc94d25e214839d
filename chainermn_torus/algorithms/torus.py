"""rsaa, and the shape rsaa and rsap share (2D torus, Mikami et al.; Tamura & Hanawa).

P = M x N ranks in rows of M (``_grid``). Each segment of n elements is split into a main
part of M equal chunks of c = n // M elements and a tail of fewer than M elements, in the
three phases the paper names (the numbering ``communicators/rsaa.py`` uses too):
  phase 1  reduce-scatter in every row (each position ends with the row sum of its chunk);
  phase 2  all-reduce of that chunk in every column (N ranks), then its division by P,
           into its place in the buffer;
  phase 3  the gather phase: every position gets every chunk of its row; rsaa by
           MPI_Allgather, rsap by put rounds (``rsap``).
The tail is summed with one small all-reduce over all ranks (``collectives.tail_calls``).
A row of one (M = 1) skips phases 1 and 3: a plain column all-reduce.

Cost: reduce-scatter + column all-reduce of n / M + the gather phase, with the groups of
``collectives.row_and_column`` (rows inside nodes use no link).
"""
from chainermn_torus.algorithms.base import Algorithm
from chainermn_torus.algorithms.collectives import (
    Call, allgather_cost, allreduce_cost, exact_column_calls, exact_scatter_calls,
    reduce_calls,
    reduce_scatter_cost, row_and_column, side_by_side, tail_calls)

__all__ = ['Torus', 'Rsaa']


class Torus(Algorithm):
    """Phases 1 and 2 and the tail; subclasses give phase 3's calls and cost."""

    gather_phase = 'allgather'  # the name of phase 3 in cost breakdowns and timelines

    def segment_calls(self, setup, elems):
        # the exact sum: phase 1 moves the floats (summed by their receivers), phase 2 the
        # integers reduce-scattered and the means all-gathered, phase 3 the means
        s, M, P = setup.reduce_itemsize, setup.M, tuple(range(setup.P))
        rows, cols = setup.rows(), setup.columns()
        main, c = setup.split(elems)
        calls = []
        if c:
            if M > 1:
                calls += side_by_side([exact_scatter_calls(row, main, setup.itemsize)
                                       if setup.exact else
                                       reduce_calls('reduce_scatter', row, main, s)
                                       for row in rows])
            calls += side_by_side([exact_column_calls(col, c, setup.itemsize)
                                   if setup.exact and M > 1 else
                                   reduce_calls('allreduce', col, c, s) for col in cols])
            calls.append(Call('compute', P, c * s, 'copy'))  # divide into place
            if M > 1:
                calls += self.gather_calls(setup, c)
        if main < elems:
            calls += tail_calls(setup, elems - main)
        return calls

    def cost(self, nodes, R, n, net, grid):
        row, col = row_and_column(nodes, R, grid[0])
        rs = reduce_scatter_cost(row, n, net)
        column = allreduce_cost(col, n / grid[0], net)
        last = self.gather_cost(row, n, net)
        return rs + column + last, {'reduce_scatter': rs, 'allreduce': column,
                                    self.gather_phase: last}

    def gather_calls(self, setup, c):
        raise NotImplementedError

    def gather_cost(self, row, n, net):
        raise NotImplementedError


class Rsaa(Torus):
    """Phase 3 by in-place MPI_Allgather in every row."""

    def gather_calls(self, setup, c):
        return [Call('allgather', row, setup.M * c * setup.itemsize) for row in setup.rows()]

    def gather_cost(self, row, n, net):
        return allgather_cost(row, n, net)
