"""``create_multi_node_optimizer`` as scripts call it (``chainermn.create_multi_node_optimizer``
after ``import chainermn_torus``), and the seam a launcher uses to change what it returns.

The process-wide pieces start here (``runtime.startup``: the abort hook, the timeline),
since a script may make its optimizer over ChainerMN's own communicator. Then, where a
launcher has set ``Overrides`` (``python -m chainermn_torus.run --fused ...``), its options
are merged with the script's, the wrapper is made (``multi_node``), the launcher is told
what was made, and it is called once more at the first update. This module owns the seam:
nothing here knows the launcher.
"""
from chainermn.communicators import mpi_communicator_base

from chainermn_torus.optimizers import fused as fused_mod, multi_node
from chainermn_torus.runtime import startup
from chainermn_torus.runtime.files import devshm

__all__ = ['make', 'Overrides', 'set_overrides']

class Overrides(object):
    """What a launcher wants of every multi-node optimizer a script makes (this default:
    nothing; a launcher's need not subclass it, only have these three methods)."""

    def options(self, actual_optimizer, options):
        """The options to make it with, from the script's ``options`` (a dict that holds
        ``double_buffering`` and ``fused`` too)."""
        return options

    def made(self, name, communicator, options, fused_applied):
        """Called after each is made: ``name`` is the class the script passed."""

    def first_update(self):
        """Called at each one's first update."""


_OVERRIDES = [Overrides()]  # the one in force


def set_overrides(overrides):
    """Install ``overrides`` for this process; None puts the default back."""
    _OVERRIDES[0] = overrides if overrides is not None else Overrides()


def make(actual_optimizer, communicator, double_buffering=False, zero_fill=True, **options):
    """What ``chainermn_torus.create_multi_node_optimizer`` makes: ``multi_node.make``
    with the launcher's overrides."""
    startup.start()  # the communicator may be ChainerMN's own (naive): start here too
    if isinstance(communicator, mpi_communicator_base.MpiCommunicatorBase):
        # made by a collective (init_ranks): every rank is past MPI_Init
        devshm.unlink_mpi_segments()
    name = type(actual_optimizer).__name__  # fusing changes the class: name it first
    overrides = _OVERRIDES[0]
    options = overrides.options(actual_optimizer,
                                dict(options, double_buffering=double_buffering))
    opt = multi_node.make(actual_optimizer, communicator, zero_fill=zero_fill,
                          on_first_update=overrides.first_update, **options)
    overrides.made(name, communicator, options, fused_mod.is_fused(opt.actual_optimizer))
    return opt
