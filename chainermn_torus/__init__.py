"""chainermn-torus: 2D-torus gradient communicators for ChainerMN on CPU clusters.

Importing this package registers ``pure_allreduce``, ``rsaa`` and ``rsap`` with
``chainermn.create_communicator``, and makes ``chainermn.create_multi_node_optimizer`` this
package's wrapper (the same behaviour with ChainerMN's defaults; double buffering, float16
communication and fused updates also on CPU).
"""
from chainermn_torus._registry import create_communicator  # NOQA
from chainermn_torus._registry import force_communicator  # NOQA
from chainermn_torus._registry import register  # NOQA
from chainermn_torus._registry import valid_names  # NOQA
from chainermn_torus.communicators import PureAllreduceCommunicator  # NOQA
from chainermn_torus.communicators import RsaaCommunicator  # NOQA
from chainermn_torus.communicators import RsapCommunicator  # NOQA

__version__ = '0.1.0'


def create_multi_node_optimizer(actual_optimizer, communicator, double_buffering=False,
                                zero_fill=True, **options):
    """See ``chainermn_torus.optimizers.multi_node.create_multi_node_optimizer``."""
    # Imported on first use: numba's import is not free and communicators do not need it.
    from chainermn_torus.optimizers import multi_node
    return multi_node.create_multi_node_optimizer(
        actual_optimizer, communicator, double_buffering=double_buffering,
        zero_fill=zero_fill, **options)


register()

from chainermn_torus import timeline as _timeline  # NOQA: E402
_timeline.enable_from_env()  # CHAINERMN_TORUS_TIMELINE=PREFIX


from chainermn_torus import abort as _abort  # NOQA: E402
_abort.install()  # one rank's uncaught exception ends the job, naming the rank
