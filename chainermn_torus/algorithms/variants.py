"""The one registration of every communicator, and every algorithm variant in one table:
what the factory, the launcher, the planner, ``auto``, the simulator, the benchmark and the
tests read.

A communicator is registered once (``register``), with:
  * where its class lives (module and class name: loaded on first use, so that a login node
    or the job-script generator reads this table without MPI); the class declares its
    capabilities (``communicators.capabilities``), and ``Registration.capabilities()``
    gives them;
  * one line on when to use it (the docs' table);
  * whether it runs on an M x N grid: stated here and nowhere else (the class, the planner,
    the benchmark and the launcher's ``--grid`` check read it);
  * its variants: a variant is the communicator with the options that pin it (``rsap`` with
    ``shm=False`` is the put rounds even on one node, where plain ``rsap`` would use shared
    memory), the algorithm object that describes it (its schedule and its cost: ``flat``,
    ``torus``, ``rsap``, ``shm``), and whether the planner chooses among it and the
    benchmark and the tests run it.

Adding a variant is one row in its communicator's registration; a new algorithm is a class
on ``base.Algorithm`` in a module of this package, then its row; a new communicator is one
``register`` call (docs/development.md walks through one).
"""
import collections
import importlib
import re

from chainermn_torus.algorithms.flat import FlatAllreduce, NodeAwareAllreduce
from chainermn_torus.algorithms.rsap import Rsap
from chainermn_torus.algorithms.shm import Shm
from chainermn_torus.algorithms.torus import Rsaa
from chainermn_torus.errors import ConfigError

__all__ = ['Registration', 'Variant', 'COMMUNICATORS', 'VARIANTS', 'register',
           'registration', 'get', 'planned', 'simulated', 'benchmarked', 'takes_grid',
           'check_grid_option', 'MEASURED_AS', 'of_benchmark_row']


class Registration(collections.namedtuple('Registration', [
        'name', 'module', 'cls', 'summary', 'grid', 'variants'])):
    """One communicator.

    name:     the factory name (``chainermn.create_communicator``, ``--communicator``);
    module:   the module that holds its class, imported on first use;
    cls:      the class's name in that module;
    summary:  what it does and when to use it, one line for the docs' table;
    grid:     whether it runs on an M x N grid (the planner and the benchmark try shapes);
    variants: its rows (``Variant``), in table order; none for one that is not modelled.
    """

    def load(self):
        """The class (its module, and MPI, load here)."""
        return getattr(importlib.import_module(self.module), self.cls)

    def capabilities(self):
        """What the class declares it offers (``communicators.capabilities``)."""
        return self.load().capabilities


class Variant(collections.namedtuple('Variant', [
        'name', 'communicator', 'options', 'algorithm', 'plan', 'bench', 'test_ranks',
        'note'])):
    """One row of the table.

    name:         the label in plans, benchmark rows, conformance columns and test ids;
    communicator: the name of the communicator registered with it;
    options:      the keyword options that select the variant;
    algorithm:    the ``base.Algorithm`` that describes it (schedule and cost), or None
                  where it is not modelled;
    plan:         whether the planner (and so ``auto``) chooses among it;
    bench:        'always' (``bench.allreduce`` shows it in every run: the reference row of
                  ours), 'default' (it runs it unless told otherwise), 'asked' (only with
                  ``--variants``) or None (a planner-only composition);
    test_ranks:   the rank counts the exact-mean job runs it on (tests/mpi_workers), () for
                  none; the fast tier takes P <= 3 of the first variants, see the test;
    note:         one line for tables and ``--help``.
    """

    @property
    def grid(self):
        """Whether it runs on an M x N grid: its communicator's registration says."""
        return COMMUNICATORS[self.communicator].grid

    def describe(self):
        opts = ', '.join(f'{k}={v!r}' for k, v in sorted(self.options.items()))
        return f'{self.communicator}({opts})'


# Every tested variant runs at P = 1..8: powers of two and not, prime row lengths (5, 7),
# 2 x 3 and 3 x 2 grids, and 4x oversubscription of a 2-core machine.
ONE_TO_EIGHT = tuple(range(1, 9))
# rsap's PSCW mode stops at P = 3: from 4 ranks on, the MPICH 5.0.2 wheel hangs now and then
# inside PSCW itself (scripts/repro_pscw_hang.py), which is why 'notify' is the partner-only
# variant and PSCW is run only when asked.
PSCW_RANKS = (1, 2, 3)

COMMUNICATORS = collections.OrderedDict()  # name -> Registration, in table order
VARIANTS = collections.OrderedDict()       # name -> Variant, every communicator's, in order
_ROWS = []                                 # VARIANTS' values, in order


def register(name, module, cls, summary, grid, variants=()):
    """Register communicator ``name`` (class ``cls`` of ``module``, imported on first use)
    with its variants (rows whose ``communicator`` is ``name``). The package's own are
    registered below; ``auto`` and a plugin's through the same call. Returns a function
    that removes it again."""
    if name in COMMUNICATORS:
        raise ValueError(f'chainermn_torus: a communicator named {name!r} exists already')
    rows = tuple(variants)
    for v in rows:
        if v.communicator != name:
            raise ValueError(f'chainermn_torus: variant {v.name!r} belongs to '
                             f'communicator {v.communicator!r}, '
                             f'not {name!r}')
        if v.name in VARIANTS:
            raise ValueError(f'chainermn_torus: variant {v.name!r} exists already')
    COMMUNICATORS[name] = Registration(name, module, cls, summary, grid, rows)
    _ROWS.extend(rows)
    VARIANTS.update((v.name, v) for v in rows)

    def remove():
        if COMMUNICATORS.pop(name, None) is None:
            return
        for v in rows:
            _ROWS.remove(v)
            del VARIANTS[v.name]
    return remove


def registration(name):
    """The registration of communicator ``name``."""
    try:
        return COMMUNICATORS[name]
    except KeyError:
        raise ConfigError('chainermn_torus: unknown communicator {!r}; known: {}'.format(
            name, ', '.join(COMMUNICATORS))) from None


_HERE = 'chainermn_torus.communicators.'
register('pure_allreduce', _HERE + 'pure_allreduce', 'PureAllreduceCommunicator',
         'MPI_Allreduce of one packed buffer, in segments; small models, a baseline', False, [
             Variant('pure_allreduce', 'pure_allreduce', {}, FlatAllreduce(), True, 'always',
                     ONE_TO_EIGHT, 'one MPI_Allreduce of the packed buffer over all ranks'),
             Variant('pure_allreduce_node_aware', 'pure_allreduce', {}, NodeAwareAllreduce(),
                     True, None, (),
                     'the same communicator, modelled as MPICH runs it by default: reduce in '
                     'the node, all-reduce among nodes, broadcast in the node')])
register('rsaa', _HERE + 'rsaa', 'RsaaCommunicator',
         'row reduce-scatter, column all-reduce of 1/M, row MPI_Allgather; messages below '
         'about 1 MB (Tamura & Hanawa)', True, [
             Variant('rsaa', 'rsaa', {'shm': False}, Rsaa(), True, 'default', ONE_TO_EIGHT,
                     'MPI_Reduce_scatter_block + column MPI_Allreduce + MPI_Allgather')])
register('rsap', _HERE + 'rsap', 'RsapCommunicator',
         'the same with Put rounds (MPI-3 RMA) as the last phase, rows inside a node in '
         'shared memory; several ranks per node, large models on a network (fastest at 256 '
         'KNL nodes, Tamura & Hanawa)', True, [
             Variant('rsap', 'rsap', {'shm': False}, Rsap('fence'), True, 'default',
                     ONE_TO_EIGHT, 'reduce-scatter + column all-reduce as rsaa, then put '
                     'rounds closed by MPI_Win_fence'),
             # The planner's model does not tell notify from fence: modelled, not planned.
             Variant('rsap_notify', 'rsap', {'sync': 'notify'}, Rsap('notify'), False,
                     'default', ONE_TO_EIGHT,
                     'put rounds, MPI_Win_flush + a notification to each partner'),
             Variant('rsap_acc', 'rsap', {'reduce_scatter': 'accumulate'}, None, False,
                     'default', ONE_TO_EIGHT,
                     'phase 1 by MPI_Accumulate into the row partners\' windows'),
             Variant('rsap_pscw', 'rsap', {'sync': 'pscw'}, None, False, 'asked', PSCW_RANKS,
                     'post/start/complete/wait (experimental: hangs now and then at 4+ ranks '
                     'with MPICH 5.0.2)'),
             # rsaa's and rsap's default where every row lies inside one node (the message
             # phases have nothing left to do there): communicators._shm.
             Variant('shm', 'rsap', {'shm': True}, Shm(), True, 'default', ONE_TO_EIGHT,
                     'phases 1 and 3 in a node-shared window (rows inside nodes)')])


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


def takes_grid(communicator):
    """Whether the factory name ``communicator`` runs on an M x N grid (False for a name
    not registered here: ChainerMN's)."""
    reg = COMMUNICATORS.get(communicator)
    return reg is not None and reg.grid


def check_grid_option(communicator, grid, where='--grid'):
    """Refuse a grid for a communicator that has none, before any job starts."""
    if grid and communicator is not None and not takes_grid(communicator):
        raise ConfigError('chainermn_torus: {} {} applies to {}; communicator {!r} has no '
                          'grid (leave {} out, or choose one of those)'.format(
                             where, grid, ', '.join(n for n, r in COMMUNICATORS.items() if r.grid),
                              communicator, where))
