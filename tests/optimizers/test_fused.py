"""Fused update rules against Chainer's own, in one process."""
import io

import chainer
import chainer.links as L
import numpy
import pytest
from chainer import optimizer_hooks

from chainermn_torus.optimizers import fuse, is_fused

CASES = [
    ('Adam', {}),
    ('Adam', {'amsgrad': True}),
    ('Adam', {'adabound': True}),
    ('Adam', {'amsgrad': True, 'adabound': True}),
    ('Adam', {'weight_decay_rate': 0.01, 'eta': 0.5}),
    ('MomentumSGD', {'lr': 0.05, 'momentum': 0.8}),
    ('RMSprop', {}),
    ('RMSprop', {'eps_inside_sqrt': True, 'alpha': 0.9}),
]


def _model(dtype=numpy.float32):
    numpy.random.seed(0)
    m = chainer.Sequential(L.Linear(30, 70), L.Linear(70, 7))
    if dtype != numpy.float32:
        m.to_device('@numpy')
        for p in m.params():
            p.array = p.array.astype(dtype)
    return m


def _steps(opt, model, steps, contiguous, seed=1):
    rng = numpy.random.RandomState(seed)
    named = sorted(model.namedparams())
    for _ in range(steps):
        grads = [rng.standard_normal(p.shape).astype(p.dtype) for _, p in named]
        if contiguous:  # as a chainermn_torus communicator leaves them: views of one buffer
            flat = numpy.concatenate([g.ravel() for g in grads])
            off = 0
            for (_, p), g in zip(named, grads):
                p.grad = flat[off:off + g.size].reshape(g.shape)
                off += g.size
        else:
            for (_, p), g in zip(named, grads):
                p.grad = g
        opt.update()


def _params(model):
    return [p.array.copy() for _, p in sorted(model.namedparams())]


def _assert_same(a, b):
    for x, y in zip(a, b):
        assert x.dtype == y.dtype
        assert numpy.array_equal(x, y), numpy.abs(x - y).max()


@pytest.mark.parametrize('contiguous', [True, False], ids=['flat', 'per-array'])
@pytest.mark.parametrize('name,kw', CASES, ids=[n + str(sorted(k)) for n, k in CASES])
def test_fused_equals_chainer_bitwise(name, kw, contiguous):
    stock_model, fused_model = _model(), _model()
    stock = getattr(chainer.optimizers, name)(**kw).setup(stock_model)
    fused = fuse(getattr(chainer.optimizers, name)(**kw)).setup(fused_model)
    _steps(stock, stock_model, 6, contiguous)
    _steps(fused, fused_model, 6, contiguous)
    _assert_same(_params(stock_model), _params(fused_model))
    assert fused.flat_steps == (6 if contiguous else 0)
    assert fused.t == stock.t == 6
    for (_, p), (_, q) in zip(sorted(stock_model.namedparams()), sorted(fused_model.namedparams())):
        assert p.update_rule.t == q.update_rule.t
        for k in p.update_rule.state:
            assert numpy.array_equal(p.update_rule.state[k], q.update_rule.state[k]), k


def test_float64_parameters():
    a, b = _model(numpy.float64), _model(numpy.float64)
    stock = chainer.optimizers.Adam().setup(a)
    fused = fuse(chainer.optimizers.Adam()).setup(b)
    _steps(stock, a, 4, True)
    _steps(fused, b, 4, True)
    _assert_same(_params(a), _params(b))
    assert fused.flat_steps == 4


def test_hooks_per_parameter_settings_and_disabled_rules():
    """Optimizer hooks run; a rule with its own lr or disabled forces the per-array path."""
    def build(fused_it):
        m = _model()
        opt = chainer.optimizers.MomentumSGD(lr=0.05)
        if fused_it:
            opt = fuse(opt)
        opt.setup(m)
        opt.add_hook(optimizer_hooks.WeightDecay(1e-3))
        opt.add_hook(optimizer_hooks.GradientClipping(5.0))
        return m, opt
    (a, sa), (b, fb) = build(False), build(True)
    _steps(sa, a, 3, True)
    _steps(fb, b, 3, True)
    _assert_same(_params(a), _params(b))
    assert fb.flat_steps == 3
    for m in (a, b):
        m[0].W.update_rule.hyperparam.lr = 0.5
        m[1].b.update_rule.enabled = False
    _steps(sa, a, 3, True, seed=2)
    _steps(fb, b, 3, True, seed=2)
    _assert_same(_params(a), _params(b))
    assert fb.flat_steps == 3  # the new settings were honoured per array, not flattened


def test_float16_parameters_fall_back_to_chainer():
    a, b = _model(numpy.float16), _model(numpy.float16)
    stock = chainer.optimizers.Adam().setup(a)
    fused = fuse(chainer.optimizers.Adam()).setup(b)
    _steps(stock, a, 3, False)
    _steps(fused, b, 3, False)
    _assert_same(_params(a), _params(b))


def test_fuse_after_training_keeps_state_and_snapshots_interchange():
    ref_model, model = _model(), _model()
    ref = chainer.optimizers.Adam().setup(ref_model)
    opt = chainer.optimizers.Adam().setup(model)
    _steps(ref, ref_model, 3, True, seed=5)
    _steps(opt, model, 3, True, seed=5)
    # A snapshot of the stock optimizer, loaded into a fused one on a fresh model.
    f = io.BytesIO()
    chainer.serializers.save_npz(f, opt)
    g = io.BytesIO()
    chainer.serializers.save_npz(g, model)
    model2 = _model()
    chainer.serializers.load_npz(io.BytesIO(g.getvalue()), model2)
    opt2 = fuse(chainer.optimizers.Adam()).setup(model2)
    chainer.serializers.load_npz(io.BytesIO(f.getvalue()), opt2)
    opt = fuse(opt)  # and the running stock optimizer's fused one, on its state
    _steps(ref, ref_model, 3, True, seed=6)
    _steps(opt, model, 3, True, seed=6)
    _steps(opt2, model2, 3, True, seed=6)
    _assert_same(_params(ref_model), _params(model))
    _assert_same(_params(ref_model), _params(model2))
    assert is_fused(opt) and opt.flat_steps == 3 and opt2.flat_steps == 3


def test_loading_a_snapshot_into_a_flat_optimizer_replaces_its_state():
    model = _model()
    opt = fuse(chainer.optimizers.Adam()).setup(model)
    _steps(opt, model, 2, True)
    f = io.BytesIO()
    chainer.serializers.save_npz(f, opt)
    saved = {k: v.copy() for k, v in model[0].W.update_rule.state.items()}
    _steps(opt, model, 2, True, seed=3)
    chainer.serializers.load_npz(io.BytesIO(f.getvalue()), opt)
    for k, v in saved.items():
        assert numpy.array_equal(model[0].W.update_rule.state[k], v)


def test_unfusable_optimizer_is_refused_with_the_alternatives():
    with pytest.raises(ValueError) as e:
        fuse(chainer.optimizers.AdaGrad())
    assert 'AdaGrad' in str(e.value) and 'Adam, MomentumSGD, RMSprop' in str(e.value)



def test_fusing_changes_no_class_and_unfuse_gives_chainers_back():
    from chainermn_torus.optimizers import fused
    model = _model()
    opt = chainer.optimizers.Adam()
    opt.setup(model)
    stock_rules = [p.update_rule for p in model.params()]
    fast = fuse(opt)
    # A new object of the fused class on the same attributes; the given one is Chainer's
    # still, and so are its old rules (the parameters hold fused rules on their state).
    assert type(opt) is chainer.optimizers.Adam and type(fast) is fused.FusedAdam
    assert fast.__dict__ is opt.__dict__ and is_fused(fast) and not is_fused(opt)
    assert all(type(r) is chainer.optimizers.adam.AdamRule for r in stock_rules)
    rules = [p.update_rule for p in model.params()]
    assert all(type(r) is fused.FusedAdamRule for r in rules)
    assert all(r.__dict__ is s.__dict__ for r, s in zip(rules, stock_rules))
    fast.alpha = 0.002  # one optimizer: a setting through either is the other's
    assert opt.alpha == 0.002
    fast.alpha = 0.001
    _steps(fast, model, 2, contiguous=False)
    back = fused.unfuse(fast)
    assert type(back) is chainer.optimizers.Adam and not is_fused(back)
    assert all(type(p.update_rule) is chainer.optimizers.adam.AdamRule
               for p in model.params())
    assert fused.unfuse(back) is back
    # Chainer's own update goes on from the fused one's state: the same bits as Chainer's
    # update all along (the fused kernel equals it bit for bit)
    _steps(back, model, 1, contiguous=False, seed=2)
    reference_model = _model()
    reference = chainer.optimizers.Adam()
    reference.setup(reference_model)
    _steps(reference, reference_model, 2, contiguous=False)
    _steps(reference, reference_model, 1, contiguous=False, seed=2)
    assert back.t == opt.t == reference.t == 3
    _assert_same(_params(model), _params(reference_model))
