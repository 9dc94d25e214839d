"""chainermn-torus: 2D-torus gradient communicators for ChainerMN on CPU clusters.

Importing this package registers ``pure_allreduce``, ``rsaa`` and ``rsap`` with
``chainermn.create_communicator``.
"""
from chainermn_torus._registry import create_communicator  # NOQA
from chainermn_torus._registry import force_communicator  # NOQA
from chainermn_torus._registry import register  # NOQA
from chainermn_torus._registry import valid_names  # NOQA
from chainermn_torus.communicators import PureAllreduceCommunicator  # NOQA
from chainermn_torus.communicators import RsaaCommunicator  # NOQA
from chainermn_torus.communicators import RsapCommunicator  # NOQA

__version__ = '0.1.0'

register()


def _abort_on_uncaught_exception():
    # An uncaught exception on one rank would otherwise leave the others waiting in a
    # collective until the batch job's time runs out: print it, then MPI_Abort the job.
    import os
    from mpi4py import MPI
    import chainermn.global_except_hook
    if MPI.COMM_WORLD.size > 1 and not os.environ.get('CHAINERMN_TORUS_NO_ABORT'):
        if chainermn.global_except_hook._orig_except_hook is None:
            chainermn.global_except_hook.add_hook()


_abort_on_uncaught_exception()
