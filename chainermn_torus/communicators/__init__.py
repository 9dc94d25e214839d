"""The communicators of chainermn-torus and the shared pieces they are built from."""
from chainermn_torus.communicators.pure_allreduce import PureAllreduceCommunicator  # NOQA
from chainermn_torus.communicators.rsaa import RsaaCommunicator  # NOQA
from chainermn_torus.communicators.rsap import RsapCommunicator  # NOQA
from chainermn_torus.communicators.auto import AutoCommunicator  # NOQA

COMMUNICATORS = {
    'pure_allreduce': PureAllreduceCommunicator,
    'rsaa': RsaaCommunicator,
    'rsap': RsapCommunicator,
    'auto': AutoCommunicator,
}
