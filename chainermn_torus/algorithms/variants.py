"""Every algorithm variant in one table: what the planner, ``auto``, the simulator, the
benchmark and the tests iterate over.

A variant is a communicator name with the options that pin it (``rsap`` with ``shm=False``
is the put rounds even on one node, where plain ``rsap`` would use shared memory) and the
algorithm object that describes it (its schedule and its cost: ``flat``, ``torus``,
``rsap``, ``shm``), and says whether the planner chooses among it and whether the
benchmark and the tests run it. Adding a variant is one row here; a new algorithm is a
class on ``base.Algorithm`` in a module of this package, then its row
(docs/development.md walks through one).
"""
import collections
import re

from chainermn_torus.algorithms.flat import FlatAllreduce, NodeAwareAllreduce
from chainermn_torus.algorithms.rsap import Rsap
from chainermn_torus.algorithms.shm import Shm
from chainermn_torus.algorithms.torus import Rsaa
from chainermn_torus.errors import ConfigError

__all__ = ['Variant', 'VARIANTS', 'get', 'add', 'planned', 'simulated',
           'benchmarked', 'tested', 'takes_grid', 'check_grid_option', 'MEASURED_AS',
           'of_benchmark_row']


class Variant(collections.namedtuple('Variant', [
        'name', 'communicator', 'options', 'algorithm', 'plan', 'grid', 'bench',
        'test_ranks', 'note'])):
    """One row of the table.

    name:         the label in plans, benchmark rows, conformance columns and test ids;
    communicator: the factory name (``chainermn.create_communicator``);
    options:      the keyword options that select the variant;
    algorithm:    the ``base.Algorithm`` that describes it (schedule and cost), or None
                  where it is not modelled;
    plan:         whether the planner (and so ``auto``) chooses among it;
    grid:         whether it runs on an M x N grid (the planner and the benchmark try shapes);
    bench:        'always' (``bench.allreduce`` shows it in every run: the reference row of
                  ours), 'default' (it runs it unless told otherwise), 'asked' (only with
                  ``--variants``) or None (a planner-only composition);
    test_ranks:   the rank counts the exact-mean job runs it on (tests/mpi_workers), () for
                  none; the fast tier takes P <= 3 of the first variants, see the test;
    note:         one line for tables and ``--help``.
    """

    def describe(self):
        opts = ', '.join('{}={!r}'.format(k, v) for k, v in sorted(self.options.items()))
        return '{}({})'.format(self.communicator, opts)


# Every tested variant runs at P = 1..8: powers of two and not, prime row lengths (5, 7),
# 2 x 3 and 3 x 2 grids, and 4x oversubscription of a 2-core machine.
ONE_TO_EIGHT = tuple(range(1, 9))
# rsap's PSCW mode stops at P = 3: from 4 ranks on, the MPICH 5.0.2 wheel hangs now and then
# inside PSCW itself (scripts/repro_pscw_hang.py), which is why 'notify' is the partner-only
# variant and PSCW is run only when asked.
PSCW_RANKS = (1, 2, 3)

_ROWS = [
    Variant('pure_allreduce', 'pure_allreduce', {}, FlatAllreduce(), True, False, 'always',
            ONE_TO_EIGHT, 'one MPI_Allreduce of the packed buffer over all ranks'),
    Variant('pure_allreduce_node_aware', 'pure_allreduce', {}, NodeAwareAllreduce(), True,
            False, None, (),
            'the same communicator, modelled as MPICH runs it by default: reduce in the node, '
            'all-reduce among nodes, broadcast in the node'),
    Variant('rsaa', 'rsaa', {'shm': False}, Rsaa(), True, True, 'default', ONE_TO_EIGHT,
            'MPI_Reduce_scatter_block + column MPI_Allreduce + MPI_Allgather'),
    Variant('rsap', 'rsap', {'shm': False}, Rsap('fence'), True, True, 'default',
            ONE_TO_EIGHT,
            'reduce-scatter + column all-reduce as rsaa, then put rounds closed by MPI_Win_fence'),
    # The planner's model does not tell notify from fence: modelled, not planned.
    Variant('rsap_notify', 'rsap', {'sync': 'notify'}, Rsap('notify'), False, True, 'default',
            ONE_TO_EIGHT, 'put rounds, MPI_Win_flush + a notification to each partner'),
    Variant('rsap_acc', 'rsap', {'reduce_scatter': 'accumulate'}, None, False, True, 'default',
            ONE_TO_EIGHT, 'phase 1 by MPI_Accumulate into the row partners\' windows'),
    Variant('rsap_pscw', 'rsap', {'sync': 'pscw'}, None, False, True, 'asked', PSCW_RANKS,
            'post/start/complete/wait (experimental: hangs now and then at 4+ ranks with '
            'MPICH 5.0.2)'),
    Variant('shm', 'rsap', {'shm': True}, Shm(), True, True, 'default', ONE_TO_EIGHT,
            'row phases in a node-shared window (rows inside nodes)'),
]
VARIANTS = collections.OrderedDict((v.name, v) for v in _ROWS)


def add(variant):
    """Add a row at run time (tests and plugins: a toy variant through the public seams).
    Returns a function that removes it again."""
    if variant.name in VARIANTS:
        raise ValueError('chainermn_torus: variant {!r} exists already'.format(variant.name))
    _ROWS.append(variant)
    VARIANTS[variant.name] = variant

    def remove():
        _ROWS.remove(variant)
        del VARIANTS[variant.name]
    return remove


# A benchmark row is named after the variant it ran (``name(MxN)`` on a grid), except where
# the communicator runs as another row models it: MPICH's MPI_Allreduce is node-aware by
# default, so the ``pure_allreduce`` row is ``pure_allreduce_node_aware``'s.
MEASURED_AS = {'pure_allreduce': 'pure_allreduce_node_aware'}
_GRID_ROW = re.compile(r'^(\w+)\((\d+)x(\d+)\)$')


def of_benchmark_row(row):
    """(variant, grid) that ``bench.allreduce``'s row named ``row`` measured, or None where
    no variant with a model describes it (ChainerMN's ``naive``, ``allreduce_1msg``)."""
    if row in MEASURED_AS:
        return MEASURED_AS[row], None
    g = _GRID_ROW.match(row)
    if not g or g.group(1) not in VARIANTS or VARIANTS[g.group(1)].algorithm is None:
        return None
    return g.group(1), (int(g.group(2)), int(g.group(3)))


def get(name):
    try:
        return VARIANTS[name]
    except KeyError:
        raise ConfigError('chainermn_torus: unknown algorithm variant {!r}; known: {}'.format(
            name, ', '.join(VARIANTS))) from None


def planned():
    """Names the planner (and so ``auto``) chooses among, in table order."""
    return tuple(v.name for v in _ROWS if v.plan and v.algorithm is not None)


def simulated():
    """Names with a schedule: what the simulator plays."""
    return tuple(v.name for v in _ROWS if v.algorithm is not None)


def benchmarked(asked=False, always=False):
    """Variants ``bench.allreduce`` runs by default (with ``asked``: every one it can;
    ``always``: only the reference rows it shows whatever ``--variants`` says)."""
    kinds = ('always',) if always else ('always', 'default', 'asked') if asked else (
        'always', 'default')
    return [v.name for v in _ROWS if v.bench in kinds]


def tested():
    """(name, rank counts) for the exact-mean job, in table order."""
    return [(v.name, v.test_ranks) for v in _ROWS if v.test_ranks]


def takes_grid(communicator):
    """Whether the factory name ``communicator`` runs on an M x N grid."""
    return any(v.grid for v in _ROWS if v.communicator == communicator)


def check_grid_option(communicator, grid, where='--grid'):
    """Refuse a grid for a communicator that has none, before any job starts."""
    if grid and communicator is not None and not takes_grid(communicator):
        raise ConfigError('chainermn_torus: {} {} applies to {}; communicator {!r} has no '
                          'grid (leave {} out, or choose one of those)'.format(
                             where, grid, ', '.join(sorted({v.communicator for v in _ROWS
                                                             if v.grid})),
                              communicator, where))
