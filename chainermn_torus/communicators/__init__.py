"""The communicators of chainermn-torus and the shared pieces they are built from.

Importing this package loads nothing heavy: the names are known here, and a class (with
mpi4py.MPI and, where a kernel needs it, numba) is imported on first use, as
``communicator_class(name)`` or ``from ... import RsapCommunicator``.

Every communicator is registered once, in ``algorithms.variants`` (``register``): its class,
its summary, whether it has a grid, and its variants with their algorithm descriptions. The
factory, the launcher's ``--communicator``, the messages that name communicators and the
docs' table (``table()``) read that registration through the functions here. ``auto``, which
chooses among these with the planner and the simulator, sits above them
(``chainermn_torus.auto``) and is registered by the factory (``_registry``), as a plugin's
communicator is. What each class offers is declared on it (``capabilities.py``,
``interface.Communicator``). pure_allreduce, rsaa and rsap are each ChainerMN's API in front
of the one torus engine (``engine.TorusEngine``), one class level below ``interface``: their
constructors turn the options into the engine's strategies.
"""
from chainermn_torus.algorithms import variants

__all__ = ['names', 'communicator_class', 'create_variant', 'table',
           'PureAllreduceCommunicator', 'RsaaCommunicator', 'RsapCommunicator']

_HERE = __name__ + '.'


def names(capability=None):
    """The registered names, in table order; with ``capability`` (a field of
    ``capabilities.Capabilities``) only those whose class declares it (their classes, and
    MPI, load here)."""
    if capability is None:
        return tuple(variants.COMMUNICATORS)
    return tuple(n for n, reg in variants.COMMUNICATORS.items()
                 if getattr(reg.capabilities(), capability))


def communicator_class(name):
    """The class registered as ``name`` (imports its module on first use)."""
    return variants.registration(name).load()


def table():
    """The registered communicators as Markdown rows (docs/communicators.md): name, what it
    does and when to use it, and the capabilities its class declares (``capabilities.py``;
    the classes load here)."""
    rows = ['| name | what it does, and when | grid | declares |', '|---|---|---|---|']
    for name, reg in variants.COMMUNICATORS.items():
        caps = [f for f, on in reg.capabilities()._asdict().items() if on and f != 'ours']
        rows.append('| `{}` | {} | {} | {} |'.format(
            name, reg.summary, 'yes' if reg.grid else 'no', ', '.join(caps) or '-'))
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
    for reg in variants.COMMUNICATORS.values():
        if reg.cls == attr and reg.module.startswith(_HERE):
            return reg.load()
    raise AttributeError(f'module {__name__!r} has no attribute {attr!r}')
