"""The communicators of chainermn-torus and the shared pieces they are built from.

Importing this package loads nothing heavy: the names are known here, and a class (with
mpi4py.MPI and, where a kernel needs it, numba) is imported on first use, as
``communicator_class(name)``, ``COMMUNICATORS`` or ``from ... import RsapCommunicator``.
"""
import importlib

__all__ = ['NAMES', 'communicator_class', 'COMMUNICATORS', 'PureAllreduceCommunicator',
           'RsaaCommunicator', 'RsapCommunicator', 'AutoCommunicator']

# name -> (module in this package, class)
_CLASSES = {
    'pure_allreduce': ('pure_allreduce', 'PureAllreduceCommunicator'),
    'rsaa': ('rsaa', 'RsaaCommunicator'),
    'rsap': ('rsap', 'RsapCommunicator'),
    'auto': ('auto', 'AutoCommunicator'),
}
NAMES = tuple(_CLASSES)


def communicator_class(name):
    """The class registered as ``name`` (imports its module on first use)."""
    module, cls = _CLASSES[name]
    return getattr(importlib.import_module(__name__ + '.' + module), cls)


def __getattr__(attr):  # PEP 562: classes and the table resolve on first access
    if attr == 'COMMUNICATORS':
        return {name: communicator_class(name) for name in NAMES}
    for name, (_, cls) in _CLASSES.items():
        if cls == attr:
            return communicator_class(name)
    raise AttributeError('module {!r} has no attribute {!r}'.format(__name__, attr))
