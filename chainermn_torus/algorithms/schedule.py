"""A variant's MPI calls for a whole all-reduce call: what the simulator plays and what the
tests compare with the calls the communicators make under MPI.

Ranks are global ranks 0..P-1, placed node by node (rank r on node r // R) as the launcher
and ``communicators._grid.Grid`` do: grid row r // M, position r % M.
"""
import collections

from chainermn_torus.algorithms import variants
from chainermn_torus.algorithms.collectives import Call

__all__ = ['Call', 'Setup', 'segment_calls', 'begin_calls', 'end_calls']


class Setup(collections.namedtuple('Setup', 'algorithm P M itemsize exact')):
    """algorithm (a variant with a schedule), P ranks, grid rows of M, bytes per element;
    ``exact``: the exact sum (``fixed_point``), one term a rank: phase 1 moves the floats
    (their receivers encode and sum them), phase 2 and the tails 64-bit integers, phase 3
    the means in ``itemsize`` bytes, after one MAX all-reduce of a float64 per array."""

    def __new__(cls, algorithm, P, M=1, itemsize=4, exact=False):
        names = variants.simulated()
        if algorithm not in names:
            raise ValueError('chainermn_torus: no schedule for algorithm {!r}; simulated: '
                             '{}'.format(algorithm, ', '.join(names)))
        if P < 1 or M < 1 or P % M:
            raise ValueError(f'chainermn_torus: grid rows of M = {M} do not divide P = {P} '
                             'ranks')
        if itemsize not in (2, 4, 8):
            raise ValueError('chainermn_torus: itemsize must be 2 (float16), 4 or 8, got '
                             f'{itemsize!r}')
        if not variants.get(algorithm).grid:
            M = 1
        if exact and itemsize not in (4, 8):
            raise ValueError('chainermn_torus: the exact sum decodes into float32 or float64 '
                             f'(itemsize 4 or 8), got itemsize {itemsize!r}')
        return super().__new__(cls, algorithm, P, M, itemsize, bool(exact))

    @property
    def reduce_itemsize(self):
        """Bytes per element of a sum by MPI (phase 2, the tails; phase 1 but with the exact
        sum): 8 for the exact sum's integers, else ``itemsize``."""
        return 8 if self.exact else self.itemsize

    @property
    def variant(self):
        return variants.get(self.algorithm)

    @property
    def N(self):
        return self.P // self.M

    def split(self, elems):
        """(main, c): a segment's M equal chunks of c elements (main = M c), the rest its
        tail, as ``communicators.rsaa`` splits it."""
        main = elems - elems % self.M
        return main, main // self.M

    def rows(self):
        return [tuple(range(r * self.M, (r + 1) * self.M)) for r in range(self.N)]

    def columns(self):
        return [tuple(range(q, self.P, self.M)) for q in range(self.M)]


def segment_calls(setup, elems):
    """The calls of every rank for one segment of ``elems`` elements, in program order."""
    return setup.variant.algorithm.segment_calls(setup, elems)


def begin_calls(setup, arrays=0):
    """Calls once per all-reduce call, before the first segment: every rank checks that the
    ranks' layouts agree (``_packing.check_same_layout``, two int64 by MPI_Allreduce); the
    exact sum's scales: one MAX all-reduce of a float64 per array (``arrays``)."""
    if setup.P == 1:
        return []
    calls = [Call('allreduce', tuple(range(setup.P)), 16)]
    if setup.exact:
        calls.append(Call('allreduce', tuple(range(setup.P)), 8 * max(1, arrays)))
    return calls


def end_calls(setup):
    """Calls once per all-reduce call, after the last segment (shm's closing barrier)."""
    return setup.variant.algorithm.end_calls(setup)
