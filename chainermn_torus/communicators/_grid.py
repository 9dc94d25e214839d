"""The 2D grid P = M x N of the torus algorithms: rows of M ranks, columns of N ranks.

Phase 1 (reduce-scatter) and phase 3 (all-gather or Put) run inside a row, phase 2
(all-reduce of a 1/M chunk) inside a column. Rows should hold ranks that share fast memory,
so the default M is the number of ranks per node when there are several per node.

Choosing the shape (first that applies):
  1. the ``grid=(M, N)`` keyword (or "MxN" string);
  2. the environment variable ``CHAINERMN_TORUS_GRID`` ("MxN", e.g. "2x128");
  3. several ranks per node, same count on every node: M = ranks per node, N = nodes;
  4. otherwise (one rank per node, or uneven nodes): M = the smallest prime factor of P,
     N = P / M. For even P this is M = 2, the shape Tamura & Hanawa found fastest at 256 KNL nodes
     ((M, N) = (2, 128)); for a prime P it is (P, 1).
"""
import re

from chainermn_torus import settings_table
from chainermn_torus.errors import ConfigError

__all__ = ['Grid', 'parse_grid', 'default_grid', 'make_grid', 'GRID_ENV']

GRID_ENV = settings_table.SETTINGS['grid'].env


def _factor_pairs(p):
    return [f'({m}, {p // m})' for m in range(1, p + 1) if p % m == 0]


def parse_grid(value, size, source='grid'):
    """(M, N) from a tuple or an "MxN" string; ValueError naming P and the shape if it misfits."""
    if isinstance(value, str):
        match = re.fullmatch(r'\s*(\d+)\s*[xX,*]\s*(\d+)\s*', value)
        if not match:
            raise ConfigError(f'chainermn_torus: {source} must look like "MxN" (for example '
                              '"2x4"), '
                              f'got {value!r}')
        value = (int(match.group(1)), int(match.group(2)))
    try:
        m, n = value
        if int(m) != m or int(n) != n:
            raise TypeError
        m, n = int(m), int(n)
    except (TypeError, ValueError):
        raise ConfigError(f'chainermn_torus: {source} must be two positive integers (M, N), '
                          f'got {value!r}'
                          )
    if m < 1 or n < 1 or m * n != size:
        raise ConfigError(
            'chainermn_torus: {} (M, N) = ({}, {}) does not fit P = {} ranks: M x N must equal '
            'P; shapes that fit: {}'.format(source, m, n, size, ', '.join(_factor_pairs(size))))
    return m, n


def _smallest_prime_factor(p):
    f = 2
    while f * f <= p:
        if p % f == 0:
            return f
        f += 1
    return p


def default_grid(size, intra_size, inter_size, node_uniform=True, env=None):
    """Default (M, N) and a short reason, following the rules in the module docstring;
    ``env``: the settings' grid (``CHAINERMN_TORUS_GRID``), handed down."""
    if env:
        return parse_grid(env, size, source=f'{GRID_ENV}={env!r}'), 'from ' + GRID_ENV
    if intra_size > 1 and node_uniform and intra_size * inter_size == size:
        return (intra_size, inter_size), 'M = ranks per node'
    m = _smallest_prime_factor(size) if size > 1 else 1
    return (m, size // m), 'M = smallest prime factor of P (one rank per node or uneven nodes)'


class Grid:
    """A rank's place in the M x N grid and the row/column communicators.

    Ranks are placed row by row: rank r sits in row r // M at position r % M. When the rows
    are the nodes (M = ranks per node on uniform nodes), the node numbering of ChainerMN
    (inter_rank, intra_rank) is used instead, so a row never straddles two nodes even if the
    launcher placed ranks round-robin.
    """

    def __init__(self, mpi_comm, shape, node_ranks=None):
        self.M, self.N = shape
        self.size = mpi_comm.size
        if node_ranks is not None:
            self.row, self.pos = node_ranks  # (inter_rank, intra_rank)
        else:
            self.row, self.pos = divmod(mpi_comm.rank, self.M)
        # The Split keys keep positions ordered, so row_comm.rank == pos, col_comm.rank == row.
        self.row_comm = mpi_comm.Split(self.row, self.pos)
        self.col_comm = mpi_comm.Split(self.pos, self.row)
        assert self.row_comm.size == self.M and self.col_comm.size == self.N

    @property
    def shape(self):
        return (self.M, self.N)

    def free(self):
        for comm in (self.row_comm, self.col_comm):
            if comm is not None:
                comm.Free()
        self.row_comm = self.col_comm = None

    def __repr__(self):
        return f'Grid(M={self.M}, N={self.N}, row={self.row}, pos={self.pos})'


def make_grid(comm, grid, settings_grid):
    """The grid of ChainerMN communicator ``comm`` (its ranks and nodes) and the reason for
    its shape: ``grid`` (the keyword) if given, else ``settings_grid`` (the settings',
    handed down), else the rules of this module."""
    # ChainerMN's init_ranks already grouped ranks by host name; every rank must agree on
    # whether nodes are uniform, so the node sizes are compared across all ranks.
    uniform = len(set(comm.mpi_comm.allgather(comm.intra_size))) == 1
    if grid is not None:
        shape, reason = parse_grid(grid, comm.size), 'grid keyword'
    else:
        shape, reason = default_grid(comm.size, comm.intra_size, comm.inter_size, uniform,
                                     settings_grid)
    node_aligned = (uniform and shape[0] == comm.intra_size and shape[1] == comm.inter_size
                    and comm.inter_size > 1)
    node_ranks = (comm.inter_rank, comm.intra_rank) if node_aligned else None
    return Grid(comm.mpi_comm, shape, node_ranks), reason
