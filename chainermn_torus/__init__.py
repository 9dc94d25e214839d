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
