"""Registration with chainermn.create_communicator (single process: P = 1)."""
import chainermn
import pytest

import chainermn_torus
from chainermn_torus import RsapCommunicator, RsaaCommunicator, PureAllreduceCommunicator


@pytest.mark.parametrize('name,cls', [('rsap', RsapCommunicator), ('rsaa', RsaaCommunicator),
                                      ('pure_allreduce', PureAllreduceCommunicator)])
def test_chainermn_factory_knows_our_names(name, cls):
    comm = chainermn.create_communicator(name)
    assert type(comm) is cls
    assert isinstance(comm, chainermn.communicators.mpi_communicator_base.MpiCommunicatorBase)
    assert chainermn.communicators.create_communicator is chainermn_torus.create_communicator
    comm.finalize()


def test_chainermn_names_still_work():
    from chainermn.communicators.naive_communicator import NaiveCommunicator
    assert type(chainermn.create_communicator('naive')) is NaiveCommunicator
    assert type(chainermn_torus.create_communicator('naive')).__name__ == 'NaiveCommunicator'


def test_unknown_name_lists_every_valid_name():
    with pytest.raises(ValueError) as e:
        chainermn.create_communicator('torus')
    msg = str(e.value)
    assert "'torus'" in msg
    for name in ('pure_allreduce', 'rsaa', 'rsap', 'naive', 'flat', 'pure_nccl', 'dummy'):
        assert name in msg


def test_options_pass_through_and_unknown_options_are_named():
    comm = chainermn.create_communicator('rsaa', grid='1x1', segment_size=1024)
    assert comm.grid.shape == (1, 1) and comm.segment_bytes == 1024
    with pytest.raises(ValueError, match="does not take option.*colour.*grid, segment_size"):
        chainermn.create_communicator('rsap', colour='red')
    with pytest.raises(ValueError, match='segment_size'):
        chainermn.create_communicator('pure_allreduce', segment_size='big')


def test_force_communicator_overrides_the_requested_name():
    try:
        chainermn_torus.force_communicator('rsap', segment_size=4096)
        comm = chainermn.create_communicator('naive')
        assert type(comm) is RsapCommunicator and comm.segment_bytes == 4096
    finally:
        chainermn_torus.force_communicator(None)
    assert type(chainermn.create_communicator('naive')).__name__ == 'NaiveCommunicator'
    with pytest.raises(ValueError, match='unknown communicator'):
        chainermn_torus.force_communicator('nope')
