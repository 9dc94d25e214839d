"""Warm-up schedules (in a real Chainer trainer) and the RMSprop-to-SGD optimizer."""
import chainer
import chainer.links as L
import numpy
import pytest
from chainer import training

from chainermn_torus.optimizers import large_batch
from chainermn_torus.optimizers.large_batch import (GradualWarmup, Ramp, RMSpropToSGD,
                                                   RMSpropWarmup, linear_scaling)


def test_linear_scaling_rule():
    assert linear_scaling(0.1, 8192) == pytest.approx(3.2)  # Goyal et al.: 0.1 per 256
    with pytest.raises(ValueError) as e:
        linear_scaling(0.1, 0)
    assert 'batch_size=0' in str(e.value)


def test_ramp_values_and_bad_spans():
    r = Ramp('lr', (0.1, 0.5), (2, 6), unit='epoch')
    assert [r.value_at(x) for x in (0, 2, 4, 6, 9)] == pytest.approx([0.1, 0.1, 0.3, 0.5, 0.5])
    with pytest.raises(ValueError):
        Ramp('lr', (0, 1), (3, 3))
    with pytest.raises(ValueError):
        Ramp('lr', (0, 1), (0, 3), unit='week')


def _trainer(optimizer, n=40, batch=10, epochs=3):
    numpy.random.seed(0)
    x = numpy.random.rand(n, 4).astype(numpy.float32)
    t = (x.sum(1) > 2).astype(numpy.int32)
    model = L.Classifier(L.Linear(4, 2))
    optimizer.setup(model)
    it = chainer.iterators.SerialIterator(chainer.datasets.TupleDataset(x, t), batch,
                                          shuffle=False)
    updater = training.StandardUpdater(it, optimizer)
    return training.Trainer(updater, (epochs, 'epoch'), out='/tmp/chainermn_torus_test')


def test_gradual_warmup_in_a_trainer_then_another_schedule_takes_over():
    opt = chainer.optimizers.MomentumSGD(lr=99.0)
    trainer = _trainer(opt, epochs=4)  # 4 iterations per epoch
    trainer.extend(GradualWarmup(target_lr=0.8, start_lr=0.2, duration=2, unit='epoch'))
    seen = []
    trainer.extend(lambda tr: seen.append(opt.lr), trigger=(1, 'iteration'),
                   priority=training.PRIORITY_READER)
    # ExponentialShift reads its start at initialisation, during the warm-up: give it init.
    trainer.extend(training.extensions.ExponentialShift('lr', 0.5, init=0.8),
                   trigger=(3, 'epoch'))
    trainer.run()
    # iteration i (1-based) has just updated; the ramp set the lr for the next one
    expect = [0.2 + 0.6 * i / 8 for i in range(1, 9)] + [0.8] * 4 + [0.4] * 4
    assert seen == pytest.approx(expect)


def test_rmsprop_warmup_endpoints():
    rng = numpy.random.RandomState(0)
    w0 = rng.standard_normal((20, 30)).astype(numpy.float32)
    grads = [rng.standard_normal((20, 30)).astype(numpy.float32) for _ in range(4)]

    def run(opt):
        p = chainer.Parameter(w0.copy())
        link = chainer.Link()
        with link.init_scope():
            link.p = p
        opt.setup(link)
        for g in grads:
            p.grad = g.copy()
            opt.update()
        return p.array

    # sgd_weight 1: exactly momentum SGD.
    sgd = run(chainer.optimizers.MomentumSGD(lr=0.05, momentum=0.9))
    assert numpy.array_equal(run(RMSpropWarmup(lr=0.05, momentum=0.9, sgd_weight=1.0)), sgd)
    # sgd_weight 0 and no momentum: RMSprop (same rounding up to association).
    rms = run(chainer.optimizers.RMSprop(lr=0.01, alpha=0.99, eps=1e-8))
    mine = run(RMSpropWarmup(lr=0.01, momentum=0.0, rho=0.99, eps=1e-8, sgd_weight=0.0))
    numpy.testing.assert_allclose(mine, rms, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError) as e:
        run(RMSpropWarmup(sgd_weight=1.5))
    assert 'sgd_weight must be in [0, 1]' in str(e.value)


def test_rmsprop_to_sgd_moves_the_weight_and_resume_continues_it():
    opt = RMSpropWarmup(lr=0.01)
    trainer = _trainer(opt, epochs=3)
    trainer.extend(RMSpropToSGD(span=(1, 2), unit='epoch'))
    seen = []
    trainer.extend(lambda tr: seen.append(opt.sgd_weight), trigger=(1, 'iteration'),
                   priority=training.PRIORITY_READER)
    trainer.run()
    assert seen == pytest.approx([0.0] * 4 + [0.25, 0.5, 0.75, 1.0] + [1.0] * 4)
    # Resume in the middle: the schedule is a function of the position, not of history.
    r = RMSpropToSGD(span=(1, 2))
    assert r.value_at(1.5) == pytest.approx(0.5)
    assert large_batch.RMSpropToSGD.__mro__[1] is Ramp
