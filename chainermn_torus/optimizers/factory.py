"""``create_multi_node_optimizer`` as scripts call it (``chainermn.create_multi_node_optimizer``
after ``import chainermn_torus``), and the seam a launcher uses to change what it returns.

The process-wide pieces start here (``runtime.startup``: the abort hook, the timeline),
since a script may make its optimizer over ChainerMN's own communicator. Then the
``runtime.overrides`` in force (a launcher's: ``python -m chainermn_torus.run --fused ...``)
merges its options with the script's, the wrapper is made (``multi_node``), the launcher is
told what was made, and it is called once more at the first update. Nothing here knows the
launcher.
"""
from chainermn.communicators import mpi_communicator_base

from chainermn_torus.optimizers import fused as fused_mod, multi_node
from chainermn_torus.runtime import overrides, startup
from chainermn_torus.runtime.files import devshm

__all__ = ['make']

def make(actual_optimizer, communicator, double_buffering=False, zero_fill=True, **options):
    """What ``chainermn_torus.create_multi_node_optimizer`` makes: ``multi_node.make``
    with the launcher's overrides."""
    startup.start()  # the communicator may be ChainerMN's own (naive): start here too
    if isinstance(communicator, mpi_communicator_base.MpiCommunicatorBase):
        # made by a collective (init_ranks): every rank is past MPI_Init
        devshm.unlink_mpi_segments()
    name = type(actual_optimizer).__name__  # fusing changes the class: name it first
    launcher = overrides.current()
    options = launcher.optimizer_options(actual_optimizer,
                                         dict(options, double_buffering=double_buffering))
    opt = multi_node.make(actual_optimizer, communicator, zero_fill=zero_fill,
                          on_first_update=launcher.first_update, **options)
    launcher.optimizer_made(name, communicator, options,
                            fused_mod.is_fused(opt.actual_optimizer))
    return opt
