"""The communicators of chainermn-torus and the shared pieces they are built from.

Importing this package loads nothing heavy: the names are known here, and a class (with
mpi4py.MPI and, where a kernel needs it, numba) is imported on first use, as
``communicator_class(name)`` or ``from ... import RsapCommunicator``.

``CLASSES`` is the one list of this package's communicator names: the factory, the
launcher's ``--communicator``, the messages that name communicators and the docs' table
(``table()``) read it. ``auto``, which chooses among these with the planner and the
simulator, sits above them (``chainermn_torus.auto``) and is added by the factory
(``_registry``) through ``add_class``, as a plugin's communicator is. What each class offers
is declared on it (``capabilities.py``, ``interface.Communicator``).
"""
import collections
import importlib

from chainermn_torus.algorithms import variants

__all__ = ['CLASSES', 'Row', 'names', 'add_class', 'remove_class', 'communicator_class',
           'create_variant', 'table', 'PureAllreduceCommunicator', 'RsaaCommunicator',
           'RsapCommunicator']

Row = collections.namedtuple('Row', 'module cls summary')

# name -> Row(module, class, what it does and when to use it: one line for the docs' table)
CLASSES = collections.OrderedDict([
    ('pure_allreduce', Row(__name__ + '.pure_allreduce', 'PureAllreduceCommunicator',
                           'MPI_Allreduce of one packed buffer, in segments; small models, '
                           'a baseline')),
    ('rsaa', Row(__name__ + '.rsaa', 'RsaaCommunicator',
                 'row reduce-scatter, column all-reduce of 1/M, row MPI_Allgather; messages '
                 'below about 1 MB (Tamura & Hanawa)')),
    ('rsap', Row(__name__ + '.rsap', 'RsapCommunicator',
                 'the same with Put rounds (MPI-3 RMA) as the last phase, rows inside a node '
                 'in shared memory; several ranks per node, large models on a network '
                 '(fastest at 256 KNL nodes, Tamura & Hanawa)')),
])


def names(capability=None):
    """The registered names, in table order; with ``capability`` (a field of
    ``capabilities.Capabilities``) only those whose class declares it (their classes, and
    MPI, load here)."""
    if capability is None:
        return tuple(CLASSES)
    return tuple(n for n in CLASSES
                 if getattr(communicator_class(n).capabilities, capability))


def add_class(name, module, cls, summary=''):
    """Register communicator class ``cls`` of ``module`` as ``name`` (``auto``'s and a
    plugin's; the module is imported on first use), with ``summary``, one line on when to
    use it. Its variants go into ``algorithms.variants``. Returns a function that removes it
    again."""
    if name in CLASSES:
        raise ValueError('chainermn_torus: a communicator named {!r} exists already'.format(
            name))
    CLASSES[name] = Row(module, cls, summary)
    return lambda: remove_class(name)


def remove_class(name):
    CLASSES.pop(name, None)


def communicator_class(name):
    """The class registered as ``name`` (imports its module on first use)."""
    row = CLASSES[name]
    return getattr(importlib.import_module(row.module), row.cls)


def table():
    """The registered communicators as Markdown rows (docs/communicators.md): name, what it
    does and when to use it, and the capabilities its class declares (``capabilities.py``;
    the classes load here)."""
    rows = ['| name | what it does, and when | grid | declares |', '|---|---|---|---|']
    for name, row in CLASSES.items():
        cls = communicator_class(name)
        caps = [f for f, on in cls.capabilities._asdict().items() if on and f != 'ours']
        rows.append('| `{}` | {} | {} | {} |'.format(
            name, row.summary, 'yes' if cls.uses_grid else 'no', ', '.join(caps) or '-'))
    return '\n'.join(rows)


def create_variant(name, mpi_comm=None, grid=None, **options):
    """The communicator of variant ``name`` of ``algorithms.variants`` (``grid`` only where
    the variant has one).

    The class is called directly, not through the factory: ``auto`` builds its inner
    communicators here, and a factory forced to ``auto`` by the launcher would return
    another ``auto``.
    """
    v = variants.get(name)
    kwargs = dict(v.options, **options)
    if v.grid:
        kwargs['grid'] = grid
    return communicator_class(v.communicator)(mpi_comm=mpi_comm, **kwargs)


def __getattr__(attr):  # PEP 562: classes resolve on first access
    for name, row in CLASSES.items():
        if row.cls == attr and row.module.startswith(__name__ + '.'):
            return communicator_class(name)
    raise AttributeError('module {!r} has no attribute {!r}'.format(__name__, attr))
