"""Chainer's type checks in the multi-node optimizer's forward and backward (issue 49): on for
the first N steps, then off, said once; the numbers the same either way; evaluation and
code outside ``update(lossfun, ...)`` keep Chainer's setting; bad values refused."""
import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import numpy
import pytest

import chainermn_torus  # NOQA  (the factory, and chainermn's names)
from chainermn_torus import config, settings_table
from chainermn_torus.optimizers import type_checks
from conftest import settings_again
import package_probes


def _train(steps, monkeypatch, setting=None, env=None):
    """(the parameters after ``steps`` updates, type_check as each forward saw it)."""
    for var, value in (env or {}).items():
        monkeypatch.setenv(var, value)
    settings_again()  # each run a job of its own, with its environment
    numpy.random.seed(0)
    model = L.Classifier(L.Linear(5, 3))
    comm = chainermn.create_communicator('pure_allreduce')
    kw = {} if setting is None else {'type_check': setting}
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.MomentumSGD(lr=0.1), comm,
                                                **kw)
    opt.setup(model)
    seen = []

    def loss(x, t):
        seen.append(chainer.config.type_check)
        return model(x, t)

    rng = numpy.random.RandomState(1)
    for _ in range(steps):
        opt.update(loss, rng.randn(4, 5).astype(numpy.float32),
                   rng.randint(0, 3, 4).astype(numpy.int32))
    return numpy.concatenate([p.array.ravel() for p in model.params()]), seen


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for var in ('CHAINERMN_TORUS_TYPE_CHECK', 'CHAINER_TYPE_CHECK', 'CHAINERMN_TORUS_QUIET'):
        monkeypatch.delenv(var, raising=False)
    package_probes.forget_said()


def test_checked_on_the_first_steps_then_off_said_once_and_the_same_numbers(monkeypatch,
                                                                           capsys):
    plain, seen_on = _train(4, monkeypatch, 'on')
    assert seen_on == [True] * 4 and "type checks" not in capsys.readouterr().out
    fast, seen = _train(4, monkeypatch)  # the default: the first step checked
    assert settings_table.SETTINGS['type_check'].default == 1
    assert seen == [True, False, False, False], seen
    said = [ln for ln in capsys.readouterr().out.splitlines() if 'type checks' in ln]
    assert len(said) == 1 and 'first training step;' in said[0], said
    assert 'CHAINERMN_TORUS_TYPE_CHECK=on' in said[0]
    assert numpy.array_equal(plain, fast)  # the checks only read
    assert chainer.config.type_check  # outside the optimizer's update: Chainer's setting
    _, seen3 = _train(4, monkeypatch, env={'CHAINERMN_TORUS_TYPE_CHECK': '3'})
    assert seen3 == [True, True, True, False]
    _, seen_off = _train(2, monkeypatch, 'off')
    assert seen_off == [False, False]


def test_chainer_own_variable_wins_and_the_keyword_wins_over_it(monkeypatch):
    _, seen = _train(3, monkeypatch, env={'CHAINER_TYPE_CHECK': '1'})
    assert seen == [True] * 3
    _, seen = _train(2, monkeypatch, 'on', env={'CHAINER_TYPE_CHECK': '1'})
    assert seen == [True, True]
    assert type_checks.TypeChecks(chainer_own='1').source == 'CHAINER_TYPE_CHECK'


def test_a_shape_error_of_the_first_step_is_chainers_own():
    comm = chainermn.create_communicator('pure_allreduce')
    model = L.Classifier(L.Linear(5, 3))
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm)
    opt.setup(model)
    x = numpy.zeros((4, 5), numpy.float32)
    with pytest.raises(chainer.utils.type_check.InvalidType):
        opt.update(lambda: F.sum(model.predictor(x)) + F.sum(F.relu(x[:, :2]) * x[:, :3]))


@pytest.mark.parametrize('raw', ['0', '-2', 'sometimes', '1.5'])
def test_bad_values_are_refused_naming_what_is_allowed(monkeypatch, raw):
    monkeypatch.setenv('CHAINERMN_TORUS_TYPE_CHECK', raw)
    with pytest.raises(ValueError) as e:
        type_checks.TypeChecks(settings=config.resolve())  # what the entry point resolves
    assert str(e.value) == ("chainermn_torus: CHAINERMN_TORUS_TYPE_CHECK must be on, off or a "
                            f'step count >= 1 (checked on the first N steps), got {raw!r}')
    monkeypatch.delenv('CHAINERMN_TORUS_TYPE_CHECK')
    settings_again()
    with pytest.raises(ValueError) as e:
        type_checks.TypeChecks(raw)
    assert 'type_check must be on, off' in str(e.value)
