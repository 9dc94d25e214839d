"""Every algorithm variant in one table: what the planner, ``auto``, the benchmark and the
tests iterate over.

A variant is a communicator name with the options that pin it (``rsap`` with ``shm=False``
is the put rounds even on one node, where plain ``rsap`` would use shared memory), the cost
terms the planner predicts it with, and whether the benchmark and the tests run it. Adding
a variant is one row here (and its cost function in ``planning.planner`` if it is new).

Nothing here imports MPI: the planner and the job-script generator read this table on
login nodes.
"""
import collections

__all__ = ['Variant', 'VARIANTS', 'NAMES', 'planned', 'benchmarked', 'tested', 'create',
           'takes_grid', 'check_grid_option']


class Variant(collections.namedtuple('Variant', [
        'name', 'communicator', 'options', 'cost', 'grid', 'bench', 'test_ranks', 'note'])):
    """One row of the table.

    name:         the label in plans, benchmark rows, conformance columns and test ids;
    communicator: the factory name (``chainermn.create_communicator``);
    options:      the keyword options that select the variant;
    cost:         the planner's cost function for it (``planner.COSTS``), or None when the
                  planner does not consider it;
    grid:         whether it runs on an M x N grid (the planner and the benchmark try shapes);
    bench:        'default' (``bench.allreduce`` runs it unless told otherwise), 'asked'
                  (only with ``--variants``) or None (a planner-only composition);
    test_ranks:   the rank counts the exact-mean job runs it on (tests/mpi_workers), () for
                  none; the fast tier takes P <= 3 of the first variants, see the test;
    note:         one line for tables and ``--help``.
    """

    def describe(self):
        opts = ', '.join('{}={!r}'.format(k, v) for k, v in sorted(self.options.items()))
        return '{}({})'.format(self.communicator, opts)


_ROWS = [
    # pure_allreduce stops at P = 4: at 6 it is the same single MPI_Allreduce per segment.
    Variant('pure_allreduce', 'pure_allreduce', {}, 'flat_allreduce', False, 'default',
            (1, 2, 3, 4), 'one MPI_Allreduce of the packed buffer over all ranks'),
    Variant('pure_allreduce_node_aware', 'pure_allreduce', {}, 'node_aware_allreduce', False,
            None, (),
            'the same communicator, modelled as MPICH runs it by default: reduce in the node, '
            'all-reduce among nodes, broadcast in the node'),
    # Every variant stops at P = 6 (3 x 2 grids, uneven rows; 3x oversubscribed here), the
    # rsap options at 3 (a non-power-of-two put schedule): the full tier must stay under
    # 10 minutes on 2 cores. P = 8 runs in the examples' and the optimizer's tests. rsaa
    # stops at 4: at 6 it differs from rsap only by its all-gather, whose calls on the 2 x 3
    # and 3 x 2 grids tests/simulation/test_schedules_mpi.py records at P = 6.
    Variant('rsaa', 'rsaa', {'shm': False}, 'rsaa', True, 'default', (1, 2, 3, 4),
            'MPI_Reduce_scatter_block + column MPI_Allreduce + MPI_Allgather'),
    Variant('rsap', 'rsap', {'shm': False}, 'rsap', True, 'default', (1, 2, 3, 4, 6),
            'reduce-scatter + column all-reduce as rsaa, then put rounds closed by MPI_Win_fence'),
    Variant('rsap_notify', 'rsap', {'sync': 'notify'}, None, True, 'default', (2, 3),
            'put rounds, MPI_Win_flush + a notification to each partner'),
    Variant('rsap_acc', 'rsap', {'reduce_scatter': 'accumulate'}, None, True, 'default',
            (2, 3), 'phase 1 by MPI_Accumulate into the row partners\' windows'),
    Variant('rsap_pscw', 'rsap', {'sync': 'pscw'}, None, True, 'asked', (2,),
            'post/start/complete/wait (experimental: hangs now and then at 4+ ranks with '
            'MPICH 5.0.2)'),
    Variant('shm', 'rsap', {'shm': True}, 'shm', True, 'default', (1, 2, 3, 4, 6),
            'row phases in a node-shared window (rows inside nodes)'),
]
VARIANTS = collections.OrderedDict((v.name, v) for v in _ROWS)
NAMES = tuple(VARIANTS)


def planned():
    """Names the planner (and so ``auto``) chooses among, in table order."""
    return tuple(v.name for v in _ROWS if v.cost is not None)


def benchmarked(asked=False):
    """Grid variants ``bench.allreduce`` runs by default (with ``asked``: every one it can)."""
    return [v.name for v in _ROWS if v.grid and (v.bench == 'default' or
                                                  (asked and v.bench == 'asked'))]


def tested():
    """(name, rank counts) for the exact-mean job, in table order."""
    return [(v.name, v.test_ranks) for v in _ROWS if v.test_ranks]


def takes_grid(communicator):
    """Whether the factory name ``communicator`` runs on an M x N grid."""
    return any(v.grid for v in _ROWS if v.communicator == communicator)


def check_grid_option(communicator, grid, where='--grid'):
    """Refuse a grid for a communicator that has none, before any job starts."""
    if grid and communicator is not None and not takes_grid(communicator):
        raise ValueError('chainermn_torus: {} {} applies to {}; communicator {!r} has no '
                         'grid (leave {} out, or choose one of those)'.format(
                             where, grid, ', '.join(sorted({v.communicator for v in _ROWS
                                                            if v.grid})),
                             communicator, where))


def get(name):
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError('chainermn_torus: unknown algorithm variant {!r}; known: {}'.format(
            name, ', '.join(NAMES))) from None


def create(name, mpi_comm=None, grid=None, **options):
    """The communicator of variant ``name`` (``grid`` only where the variant has one).

    The class is called directly, not through the factory: ``auto`` builds its inner
    communicators here, and a factory forced to ``auto`` by the launcher would return
    another ``auto``.
    """
    from chainermn_torus.communicators import communicator_class
    v = get(name)
    kwargs = dict(v.options, **options)
    if v.grid:
        kwargs['grid'] = grid
    return communicator_class(v.communicator)(mpi_comm=mpi_comm, **kwargs)
