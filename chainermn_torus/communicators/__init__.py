"""The communicators of chainermn-torus and the shared pieces they are built from.

Importing this package loads nothing heavy: the names are known here, and a class (with
mpi4py.MPI and, where a kernel needs it, numba) is imported on first use, as
``communicator_class(name)`` or ``from ... import RsapCommunicator``. ``auto``, which
chooses among these with the planner and the simulator, sits above them
(``chainermn_torus.auto``); the factory (``_registry``) knows both.
"""
import importlib

from chainermn_torus.algorithms import variants

__all__ = ['CLASSES', 'names', 'add_class', 'communicator_class', 'create_variant',
           'PureAllreduceCommunicator', 'RsaaCommunicator', 'RsapCommunicator']

# name -> (module, class)
CLASSES = {
    'pure_allreduce': (__name__ + '.pure_allreduce', 'PureAllreduceCommunicator'),
    'rsaa': (__name__ + '.rsaa', 'RsaaCommunicator'),
    'rsap': (__name__ + '.rsap', 'RsapCommunicator'),
}


def names():
    return tuple(CLASSES)


def add_class(name, module, cls):
    """Register communicator class ``cls`` of ``module`` as ``name`` (a plugin's; the
    module is imported on first use). Its variants go into ``algorithms.variants``."""
    if name in CLASSES:
        raise ValueError('chainermn_torus: a communicator named {!r} exists already'.format(
            name))
    CLASSES[name] = (module, cls)


def communicator_class(name):
    """The class registered as ``name`` (imports its module on first use)."""
    module, cls = CLASSES[name]
    return getattr(importlib.import_module(module), cls)


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
    for name, (_, cls) in CLASSES.items():
        if cls == attr:
            return communicator_class(name)
    raise AttributeError('module {!r} has no attribute {!r}'.format(__name__, attr))
