"""chainermn-torus: 2D-torus gradient communicators for ChainerMN on CPU clusters.

Importing this package registers ``pure_allreduce``, ``rsaa``, ``rsap`` and ``auto`` with
``chainermn.create_communicator``, and makes ``chainermn.create_multi_node_optimizer`` this
package's wrapper (the same behaviour with ChainerMN's defaults; double buffering, float16
communication and fused updates also on CPU). Nothing else happens at import, as with
``import chainermn``: mpi4py.MPI, numba and the communicator modules load when first used,
and the abort hook and the timeline start with the first communicator or optimizer
(``runtime.startup``).
"""
from chainermn_torus._registry import create_communicator  # NOQA
from chainermn_torus._registry import force_communicator  # NOQA
from chainermn_torus._registry import register  # NOQA
from chainermn_torus._registry import valid_names  # NOQA

__version__ = '0.1.0'

_LAZY = ('PureAllreduceCommunicator', 'RsaaCommunicator', 'RsapCommunicator')


def __getattr__(name):  # PEP 562: the classes import their modules (and MPI) on first use
    if name in _LAZY:
        from chainermn_torus import communicators
        return getattr(communicators, name)
    raise AttributeError('module {!r} has no attribute {!r}'.format(__name__, name))


def create_multi_node_optimizer(actual_optimizer, communicator, double_buffering=False,
                                zero_fill=True, **options):
    """See ``chainermn_torus.optimizers.multi_node.create_multi_node_optimizer``."""
    from chainermn_torus.runtime import startup as _startup
    from chainermn_torus.optimizers import multi_node
    from chainermn_torus import launch
    _startup.start()  # the communicator may be ChainerMN's own (naive): start here too
    if hasattr(communicator, 'mpi_comm'):  # made by a collective (init_ranks): all past Init
        from chainermn_torus.runtime import devshm
        devshm.unlink_mpi_segments()
    name = type(actual_optimizer).__name__  # fusing changes the class: name it first
    if launch.ACTIVE is not None:  # under the launcher: its options win over the script's
        forced, defaults = launch.ACTIVE.optimizer_options()
        options = dict(defaults, **options)
        options.update(forced)
        options['fused'] = _fused_choice(actual_optimizer, options['fused'])
        double_buffering = options.pop('double_buffering', double_buffering)
    opt = multi_node.create_multi_node_optimizer(
        actual_optimizer, communicator, double_buffering=double_buffering,
        zero_fill=zero_fill, **options)
    if launch.ACTIVE is not None:
        from chainermn_torus.optimizers import is_fused
        launch.report_optimizer(name, communicator,
                                dict(options, double_buffering=double_buffering),
                                is_fused(opt.actual_optimizer))
    return opt


def _fused_choice(actual_optimizer, requested):
    """The launcher's fused setting for this optimizer: never an error, a report instead."""
    if requested is False or requested is None:
        return False
    from chainermn_torus.optimizers import fusable_names
    return 'auto' if type(actual_optimizer).__name__ in fusable_names() else False


register()
