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


def test_the_launch_policy_is_made_once_frozen_and_read_by_both_factories():
    from chainermn_torus import _registry
    policy = _registry.Policy(forced=('rsap', {'grid': '1x2'}), defaults={'tune': 'off'},
                              optimizer_options=lambda actual, o: dict(o, fused='auto'))
    with pytest.raises(AttributeError, match='frozen'):
        policy.forced = None
    with pytest.raises(TypeError):
        policy.defaults['tune'] = 'on'  # its tables are read-only views too
    # the communicator factory's questions
    assert policy.choose('naive', {}, _registry.names()) == ('rsap', {'grid': '1x2'})
    assert policy.with_defaults({'tune', 'grid'}, {}) == {'tune': 'off'}
    assert policy.with_defaults({'grid'}, {}) == {}
    # replace gives another; the first is unchanged
    unforced = policy.replace(forced=None)
    assert unforced.choose('naive', {}, _registry.names()) == ('naive', {})
    assert policy.forced == ('rsap', {'grid': '1x2'}) and unforced.defaults == {'tune': 'off'}
    # installed, the factories read it; force_communicator installs a new one
    try:
        assert _registry.install(policy) is _registry.policy()
        _registry.force_communicator('rsaa')
        assert _registry.policy() is not policy and _registry.policy().forced == ('rsaa', {})
        assert _registry.policy().optimizer_options is policy.optimizer_options
    finally:
        _registry.install(None)
    assert _registry.policy().forced is None and _registry.policy().defaults == {}
    for gone in ('set_defaults', 'add_default', 'add_forced_option', 'set_rename',
                 'on_create'):
        assert not hasattr(_registry, gone), gone  # no setters on a shared object
