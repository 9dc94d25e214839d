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


def test_float16_communication_option():
    import numpy
    comm = chainermn.create_communicator('rsap', allreduce_grad_dtype=numpy.float16)
    assert comm.allreduce_grad_dtype == numpy.float16
    assert 'gradients sent as float16' in comm.describe()
    comm.finalize()
    with pytest.raises(ValueError) as e:
        chainermn.create_communicator('naive', allreduce_grad_dtype=numpy.float16)
    assert "'naive' cannot send gradients as" in str(e.value) and 'rsap' in str(e.value)
    with pytest.raises(ValueError) as e:
        chainermn.create_communicator('rsaa', allreduce_grad_dtype=numpy.int32)
    assert 'allreduce_grad_dtype must be None, numpy.float16' in str(e.value)


def test_importing_makes_chainermn_wrapper_ours_with_chainermn_defaults():
    import inspect
    import chainermn.optimizers
    assert chainermn.create_multi_node_optimizer is chainermn_torus.create_multi_node_optimizer
    ours = inspect.signature(chainermn.create_multi_node_optimizer).parameters
    theirs = inspect.signature(chainermn.optimizers.create_multi_node_optimizer).parameters
    for name in theirs:  # every ChainerMN argument, with the same default
        assert ours[name].default == theirs[name].default, name
