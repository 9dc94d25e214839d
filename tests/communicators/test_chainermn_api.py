"""ChainerMN's communicator API on ours, in one process: nothing hidden, the factory's
configuration, Chainer's debug mode. The same API with real ranks, against naive, is
test_conformance_mpi.py."""
import inspect

import chainer
import chainermn
import numpy
import pytest
from chainermn.communicators import communicator_base, mpi_communicator_base

import chainermn_torus
from chainermn_torus import _registry
from chainermn_torus.communicators.rsaa import RsaaCommunicator

# Every communicator of ours the factory makes, auto included.
COMMUNICATORS = {name: _registry.communicator_class(name) for name in _registry.names()}
BASES = (communicator_base.CommunicatorBase, mpi_communicator_base.MpiCommunicatorBase)


def base_members():
    """name -> ChainerMN's definition, for every non-dunder member of the base classes
    (private ones too: MultiNodeBatchNormalization calls ``_multi_node_mean``)."""
    base = mpi_communicator_base.MpiCommunicatorBase
    return {name: inspect.getattr_static(base, name) for name in dir(base)
            if not name.startswith('__')}


def _kind(member):
    for kind in (property, staticmethod, classmethod):
        if isinstance(member, kind):
            return kind.__name__
    return 'method' if callable(member) else 'attribute'


def signature_problem(theirs, ours):
    """None if every call that ChainerMN's signature accepts is accepted by ours with the
    same meaning: the same parameters in the same order, kinds and defaults; ours may only
    add parameters that have defaults, after ChainerMN's."""
    t = list(inspect.signature(theirs).parameters.values())
    o = list(inspect.signature(ours).parameters.values())
    for i, p in enumerate(t):
        if i >= len(o):
            return f'lacks parameter {p.name!r}'
        q = o[i]
        if (q.name, q.kind, q.default) != (p.name, p.kind, p.default):
            return f'parameter {i} is {q} where ChainerMN has {p}'
    for q in o[len(t):]:
        if q.default is inspect.Parameter.empty and q.kind not in (
                inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            return f'adds required parameter {q.name!r}'
    return None


def api_conflicts(cls):
    """Every place where ``cls`` hides or changes a member of ChainerMN's base classes."""
    problems = []
    for name, theirs in base_members().items():
        ours = inspect.getattr_static(cls, name)
        if ours is theirs:
            continue  # inherited as it is
        if _kind(ours) != _kind(theirs):
            problems.append(f'{cls.__name__}.{name}: a {_kind(ours)} where ChainerMN has '
                            f'a {_kind(theirs)}')
        elif _kind(theirs) in ('method', 'staticmethod', 'classmethod'):
            problem = signature_problem(getattr(mpi_communicator_base.MpiCommunicatorBase,
                                                name), getattr(cls, name))
            if problem:
                signature = inspect.signature(getattr(cls, name))
                problems.append(f'{cls.__name__}.{name}{signature}: {problem}')
    return problems


@pytest.mark.parametrize('name', sorted(COMMUNICATORS))
def test_no_member_of_ours_hides_chainermn_api(name):
    assert api_conflicts(COMMUNICATORS[name]) == []


def test_the_guard_catches_the_old_phase_name():
    # The bug this guards against: a phase step named like ChainerMN's public gather.
    class Shadowing(RsaaCommunicator):
        def gather(self, buf, lo, c, mpi_type):
            pass

        def split(self, color, key, extra):  # a new required parameter breaks callers
            pass

        rank = 0  # a plain attribute where ChainerMN has a property

    problems = '\n'.join(api_conflicts(Shadowing))
    assert "Shadowing.gather(self, buf, lo, c, mpi_type): parameter 1 is buf where " \
        "ChainerMN has x" in problems
    assert "Shadowing.split" in problems and "adds required parameter 'extra'" in problems
    assert 'Shadowing.rank: a attribute where ChainerMN has a property' in problems


@pytest.mark.parametrize('name', sorted(COMMUNICATORS))
def test_no_instance_attribute_hides_a_chainermn_method(name):
    comm = chainermn.create_communicator(name)
    try:
        methods = {n for n, m in base_members().items() if _kind(m) != 'attribute'}
        assert not methods & set(vars(comm)), methods & set(vars(comm))
        # And the public collectives are ChainerMN's own code.
        for api in ('gather', 'bcast', 'scatter', 'allgather', 'alltoall', 'allreduce',
                    'send', 'recv', 'bcast_obj', 'gather_obj', 'allreduce_obj',
                    '_multi_node_mean'):
            assert getattr(type(comm), api) is getattr(
                mpi_communicator_base.MpiCommunicatorBase, api), api
    finally:
        comm.finalize()


# --- the factory's configuration ----------------------------------------------------------
def test_factory_sets_batched_copy_as_chainermn_does():
    naive = chainermn.create_communicator('naive')
    for name in sorted(COMMUNICATORS):
        comm = chainermn.create_communicator(name)
        assert comm.get_config('batched_copy') is True
        assert naive.get_config('batched_copy') is True
        theirs = naive.get_config()
        assert {k: comm.get_config()[k] for k in theirs} == theirs
        comm.finalize()


def test_batched_copy_is_accepted_recorded_and_said_once(capsys, monkeypatch):
    monkeypatch.delenv('CHAINERMN_TORUS_QUIET', raising=False)
    from chainermn_torus.process import STATE
    monkeypatch.setattr(STATE, 'said', set())  # what this process has said already
    first = chainermn.create_communicator('rsap', batched_copy=False)
    second = chainermn.create_communicator('rsaa', batched_copy=True)
    assert first.get_config('batched_copy') is False
    assert second.get_config('batched_copy') is True
    out = capsys.readouterr().out
    assert out.count('batched_copy') == 1, out
    assert 'batched_copy=False accepted and ignored' in out and "ChainerMN's GPU packing" in out
    first.finalize()
    second.finalize()


def test_batched_copy_passes_when_a_communicator_is_forced():
    # A ChainerMN script run by `chainermn_torus.run --communicator rsap` may pass it.
    try:
        chainermn_torus.force_communicator('rsap')
        comm = chainermn.create_communicator('pure_nccl', batched_copy=True)
        assert type(comm).__name__ == 'RsapCommunicator'
        assert comm.get_config('batched_copy') is True
        comm.finalize()
    finally:
        chainermn_torus.force_communicator(None)


def test_unknown_option_is_the_type_error_chainermn_raises_and_a_value_error():
    with pytest.raises(TypeError):
        chainermn.create_communicator('naive', colour='red')  # ChainerMN's own
    for catch in (TypeError, ValueError):
        with pytest.raises(catch, match=r"'rsap' does not take option\(s\) colour; it takes: "
                                        r".*grid.*batched_copy"):
            chainermn.create_communicator('rsap', colour='red')


@pytest.mark.parametrize('name', sorted(COMMUNICATORS))
def test_allreduce_grad_dtype_config_as_pure_nccl_spells_it(name):
    comm = chainermn.create_communicator(name)
    model = chainer.links.Linear(3, 2)
    model.W.grad = numpy.full((2, 3), 1.5, numpy.float32)
    model.b.grad = numpy.full((2,), -0.25, numpy.float32)
    assert comm.get_config('allreduce_grad_dtype') is None
    comm.multi_node_mean_grad(model)
    comm.set_config('allreduce_grad_dtype', numpy.float16)
    assert comm.get_config('allreduce_grad_dtype') == numpy.float16
    assert comm.get_config()['allreduce_grad_dtype'] == numpy.float16
    comm.multi_node_mean_grad(model)  # a new layout in float16
    assert model.W.grad.dtype == numpy.float32 and (model.W.grad == 1.5).all()
    twin = comm.split(0, 0)  # carried to communicators made from this one
    assert twin.get_config('allreduce_grad_dtype') == numpy.float16
    with pytest.raises(ValueError, match='allreduce_grad_dtype must be None, numpy.float16'):
        comm.set_config('allreduce_grad_dtype', numpy.int8)
    with pytest.raises(ValueError, match='Unknown config: nope'):
        comm.set_config('nope')
    with pytest.raises(KeyError):
        comm.get_config('nope')
    twin.finalize()
    comm.finalize()


# --- Chainer's debug mode -----------------------------------------------------------------
def _model_with_grads(bad=None):
    model = chainer.Chain()
    with model.init_scope():
        model.a = chainer.links.Linear(4, 3)
        model.b = chainer.links.Linear(3, 2)
    model.a.W.grad = numpy.ones((3, 4), numpy.float32)
    model.a.b.grad = numpy.ones((3,), numpy.float32)
    model.b.W.grad = numpy.ones((2, 3), numpy.float32)
    model.b.b.grad = numpy.ones((2,), numpy.float32)
    if bad is not None:
        model.b.W.grad[1, 1] = bad
    return model


@pytest.mark.parametrize('name', ['naive'] + sorted(COMMUNICATORS))
@pytest.mark.parametrize('bad', [numpy.nan, numpy.inf, -numpy.inf])
def test_debug_mode_stops_on_non_finite_means_as_chainermn_does(name, bad):
    comm = chainermn.create_communicator(name)
    with chainer.using_config('debug', True):
        comm.multi_node_mean_grad(_model_with_grads())  # finite: no error
        with pytest.raises(ValueError, match=r'^Parameters diverged after allreduce\.') as e:
            comm.multi_node_mean_grad(_model_with_grads(bad))
    if name != 'naive':  # ours name the communicator that averaged (auto's choice: one rank)
        assert str(e.value).endswith('({}: 1 non-finite mean, the first in /b/W)'.format(
            'pure_allreduce' if name == 'auto' else name))
    model = _model_with_grads(bad)
    comm.multi_node_mean_grad(model)  # outside debug mode the mean is what it is
    assert not numpy.isfinite(model.b.W.grad[1, 1])
    comm.finalize()
