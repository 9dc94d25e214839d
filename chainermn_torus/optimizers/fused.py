"""Fused CPU versions of Chainer's Adam, MomentumSGD and RMSprop.

``FusedAdam(...)``, ``FusedMomentumSGD(...)`` and ``FusedRMSprop(...)`` are Chainer's three
with a fused update. ``fuse(optimizer)`` makes the fused one of an existing
``chainer.optimizers.Adam`` / ``MomentumSGD`` / ``RMSprop`` (set up or not) and returns it: an
object of the fused class made on the given one's attributes (one attribute dictionary: the
hyper-parameters, hooks, state and ``t`` are both objects', a change through either is the
other's), its parameters' rules the fused rules made the same way. No object's class ever
changes: the given optimizer stays Chainer's, and the multi-node optimizer holds the fused
one it made (``multi_node.make``). The result is still a Chainer optimizer: hooks,
per-parameter hyper-parameters, disabled rules, ``loss_scale``, snapshots and ``serialize``
all behave as before, and snapshots are interchangeable with the stock optimizer's.

Two ways a step runs:

* **Flat** (the common case in data-parallel training): parameters are made views of one
  flat array and the rule states views of flat state arrays (copied in once); when the
  gradients are also one contiguous run in the same order, which they are after a
  ``chainermn_torus`` communicator averaged them (they are views of its buffer), the whole
  model is updated by one kernel call over flat arrays. Nothing is packed or copied.
* **Per array**: otherwise each parameter's rule calls the same kernel on its own arrays
  (still one pass, no temporaries). Parameters that are not float32/float64 or not
  contiguous fall back to Chainer's own rule for that parameter.

Hyper-parameters: all of Chainer's are supported, including Adam's ``eta``,
``weight_decay_rate``, ``amsgrad`` and ``adabound`` (and both: AMSBound) and RMSprop's
``eps_inside_sqrt``. Other optimizers have no fused version: ``fuse`` raises and names the
three that do (the wrapper's ``fused='auto'`` keeps them unfused and says so).
"""
import chainer
import numpy
from chainer import optimizers

from chainermn_torus.errors import ConfigError
from chainermn_torus.runtime.cpu import jit

__all__ = ['fuse', 'unfuse', 'FusedAdam', 'FusedMomentumSGD', 'FusedRMSprop',
           'fusable_names', 'is_fused']


class _FusedOptions:
    """Options shared by a fused optimizer and its rules."""

    def __init__(self, flush_denormals=False):
        self.flush_denormals = bool(flush_denormals)


def _kernel_arrays(param, state_keys, states):
    """1-D views (p, g, *states) for the kernel, or None when a kernel cannot run on them."""
    p, g = param.data, param.grad
    if not isinstance(p, numpy.ndarray) or p.dtype not in (numpy.float32, numpy.float64):
        return None
    arrays = [p, g] + [states[k] for k in state_keys]
    for a in arrays:
        if not isinstance(a, numpy.ndarray) or a.dtype != p.dtype or not a.flags.c_contiguous \
                or a.shape != p.shape:
            return None
    return [a.reshape(-1) for a in arrays]


def _kernels():
    # The numba kernels, imported when the first fused update runs (numba is optional:
    # runtime.cpu.jit); ``fuse`` has already said so where numba is missing.
    jit.require('the fused update kernels (fused=True, --fused on)')
    from chainermn_torus.optimizers import kernels
    return kernels


# --- the three rules: what each passes to its kernel ------------------------------------------
def _adam_args(rule, dtype):
    hp = rule.hyperparam
    rule._check_eps(dtype.type)
    lower, upper = rule.bounds if hp.adabound else (0.0, 0.0)
    t = dtype.type
    return (t(rule.alpha_t), t(1.0 - hp.beta1), t(1.0 - hp.beta2), t(hp.eps),
            t(1.0 - hp.eta * hp.weight_decay_rate), t(-hp.eta), t(lower), t(upper),
            bool(hp.amsgrad), bool(hp.adabound))


def _adam_call(arrays, args, ftz):
    p, g, m, v = arrays[:4]
    vhat = arrays[4] if len(arrays) > 4 else v  # unused unless amsgrad
    _kernels().adam(p, g, m, v, vhat, *args, ftz)


def _adam_keys(rule):
    return ('m', 'v', 'vhat') if rule.hyperparam.amsgrad else ('m', 'v')


def _momentum_args(rule, dtype):
    hp, t = rule.hyperparam, dtype.type
    return t(hp.lr), t(hp.momentum)


def _momentum_call(arrays, args, ftz):
    p, g, v = arrays
    _kernels().momentum_sgd(p, g, v, args[0], args[1], ftz)


def _rmsprop_args(rule, dtype):
    hp, t = rule.hyperparam, dtype.type
    eps = t(hp.eps)
    if hp.eps != 0 and eps == 0:
        raise ConfigError(f'eps of RMSprop optimizer is too small for {dtype.name} ({hp.eps})')
    return t(hp.lr), t(hp.alpha), t(1 - hp.alpha), eps, bool(hp.eps_inside_sqrt)


def _rmsprop_call(arrays, args, ftz):
    p, g, ms = arrays
    _kernels().rmsprop(p, g, ms, *args, ftz)


class _FusedRule:
    """Mixin for an UpdateRule: the fused kernel in place of ``update_core_cpu``."""

    _options = None

    def update_core_cpu(self, param):
        if param.grad is None:
            return
        keys = self._state_keys()
        arrays = _kernel_arrays(param, keys, self.state)
        if arrays is None:
            return super().update_core_cpu(param)
        ftz = self._options.flush_denormals if self._options is not None else False
        self._call(arrays, self._args(arrays[0].dtype), ftz)


def _rule_class(base, args, call, keys):
    return type('Fused' + base.__name__, (_FusedRule, base), {
        '_args': lambda self, dtype: args(self, dtype),
        '_call': staticmethod(call),
        '_state_keys': lambda self: keys(self),
    })


FusedAdamRule = _rule_class(optimizers.adam.AdamRule, _adam_args, _adam_call, _adam_keys)
FusedMomentumSGDRule = _rule_class(optimizers.momentum_sgd.MomentumSGDRule, _momentum_args,
                                   _momentum_call, lambda rule: ('v',))
FusedRMSpropRule = _rule_class(optimizers.rmsprop.RMSpropRule, _rmsprop_args, _rmsprop_call,
                               lambda rule: ('ms',))


# --- flat arrays ----------------------------------------------------------------------------
def _address(a):
    return a.__array_interface__['data'][0]


def _contiguous_run(arrays, sizes, dtype):
    """If ``arrays`` lie back to back in one 1-D array, return that run as a flat view."""
    first = arrays[0]
    if first is None or first.dtype != dtype or not first.flags.c_contiguous:
        return None
    base = _address(first)
    pos = base
    for a, n in zip(arrays, sizes):
        if a is None or a.dtype != dtype or not a.flags.c_contiguous or _address(a) != pos:
            return None
        pos += n * dtype.itemsize
    root = first
    while isinstance(root.base, numpy.ndarray):
        root = root.base
    if not root.flags.c_contiguous:
        return None
    flat = root.reshape(-1)
    start = (base - _address(flat)) // dtype.itemsize
    total = (pos - base) // dtype.itemsize
    if start < 0 or start + total > flat.size:
        return None
    return flat[start:start + total]


class _FlatModel:
    """Parameters and rule states of one optimizer as views of flat arrays."""

    def __init__(self, optimizer):
        named = [(n, p) for n, p in sorted(optimizer.target.namedparams())]
        self.params = [p for _, p in named]
        self.dtype = self.params[0].data.dtype
        self.sizes = [p.data.size for p in self.params]
        total = sum(self.sizes)
        offsets = numpy.concatenate([[0], numpy.cumsum(self.sizes)]).astype(numpy.int64)
        self.flat = numpy.empty(total, dtype=self.dtype)
        rules = [p.update_rule for p in self.params]
        self.keys = rules[0]._state_keys()
        self.state = {k: numpy.zeros(total, dtype=self.dtype) for k in self.keys}
        self.views = []
        for i, (p, rule) in enumerate(zip(self.params, rules)):
            lo, hi = offsets[i], offsets[i + 1]
            view = self.flat[lo:hi].reshape(p.data.shape)
            view[...] = p.data
            p.array = view  # the parameter now lives in the flat array
            old = rule.state or {}
            new = {}
            for k in self.keys:
                s = self.state[k][lo:hi].reshape(p.data.shape)
                if old.get(k) is not None:
                    s[...] = old[k]  # keep existing (or resumed) state; zeros = init_state
                new[k] = s
            rule._state = new
            self.views.append((view, new, dict(new)))

    def still_valid(self, optimizer):
        named = sorted(optimizer.target.namedparams())
        if len(named) != len(self.params):
            return False
        for (_, p), mine, (view, states, ours) in zip(named, self.params, self.views):
            if p is not mine or p.array is not view or p.update_rule.state is not states:
                return False
            # A deserializer may have put new arrays into the same dict.
            if any(states.get(k) is not ours[k] for k in self.keys):
                return False
        return True


def _flat_eligible(optimizer):
    """Why the whole model cannot be one flat step (None when it can)."""
    params = [p for _, p in sorted(optimizer.target.namedparams())]
    if not params:
        return 'no parameters'
    dtype, t = None, None
    for p in params:
        rule = p.update_rule
        if p.data is None:
            return 'uninitialised parameter'
        if not isinstance(rule, _FusedRule) or not rule.enabled or rule._use_fp32_update:
            return 'rule not fused, disabled or fp32-update'
        if rule._hookable._pre_update_hooks or rule._hookable._post_update_hooks:
            return 'per-parameter hooks'
        if set(rule.hyperparam.__dict__) - {'_parent'} \
                or rule.hyperparam.parent is not optimizer.hyperparam:
            return 'per-parameter hyper-parameters'
        if p._loss_scale is not None:
            return 'loss scaling'
        if dtype is None:
            dtype, t = p.data.dtype, rule.t
        if p.data.dtype != dtype or dtype not in (numpy.float32, numpy.float64) \
                or rule.t != t or not p.data.flags.c_contiguous:
            return 'mixed dtypes or steps'
    return None


class _FusedOptimizer:
    """Mixin for a GradientMethod: fused rules, and the flat step when it applies."""

    _fused_options = None
    _flat = None
    flat_steps = 0  # how many updates ran as one flat kernel call (tests, benchmarks)

    @property
    def flush_denormals(self):
        return self._options().flush_denormals

    @flush_denormals.setter
    def flush_denormals(self, value):
        self._options().flush_denormals = bool(value)

    def _options(self):
        if self._fused_options is None:
            self._fused_options = _FusedOptions()
        return self._fused_options

    def create_update_rule(self):
        return _fused_rule(super().create_update_rule(), self._options())

    def setup(self, link):
        self._flat = None
        return super().setup(link)

    def update(self, lossfun=None, *args, **kwds):
        # GradientMethod.update, with the loop over parameters replaced by one kernel call
        # when the model can be updated as one flat array.
        if lossfun is not None:
            use_cleargrads = getattr(self, '_use_cleargrads', True)
            loss = lossfun(*args, **kwds)
            if use_cleargrads:
                self.target.cleargrads()
            else:
                self.target.zerograds()
            loss.backward(loss_scale=self._loss_scale)
            del loss

        self.reallocate_cleared_grads()
        self.check_nan_in_grads()
        self.call_hooks('pre')

        self.t += 1
        if self.is_safe_to_update():
            if not self._flat_step():
                for param in self.target.params():
                    param.update()

        self.reallocate_cleared_grads()
        self.call_hooks('post')
        self.update_loss_scale()

    def _flat_step(self):
        if _flat_eligible(self) is not None:
            return False
        if self._flat is None or not self._flat.still_valid(self):
            self._flat = _FlatModel(self)
        flat = self._flat
        grads = [p.grad for p in flat.params]
        g = _contiguous_run(grads, flat.sizes, flat.dtype)
        if g is None:
            return False
        rule = flat.params[0].update_rule
        for p in flat.params:
            p.update_rule.t += 1  # as UpdateRule.update does, before the step
        arrays = [flat.flat, g] + [flat.state[k] for k in flat.keys]
        rule._call(arrays, rule._args(flat.dtype), self._options().flush_denormals)
        self.flat_steps += 1
        return True


_RULES = {
    optimizers.adam.AdamRule: FusedAdamRule,
    optimizers.momentum_sgd.MomentumSGDRule: FusedMomentumSGDRule,
    optimizers.rmsprop.RMSpropRule: FusedRMSpropRule,
}


def _on(obj, cls):
    """An object of ``cls`` made on ``obj``'s attributes: the same dictionary, so that the
    two are one optimizer (or rule) seen through Chainer's class and the fused one."""
    other = cls.__new__(cls)
    other.__dict__ = obj.__dict__
    return other


def _fused_rule(rule, options):
    """The fused rule of ``rule`` (itself where it has none or is one already)."""
    fused = _RULES.get(type(rule))
    if fused is not None:
        rule = _on(rule, fused)
    if isinstance(rule, _FusedRule):
        rule._options = options
    return rule


FusedAdam = type('FusedAdam', (_FusedOptimizer, optimizers.Adam), {'__doc__': 'Adam, fused.'})
FusedMomentumSGD = type('FusedMomentumSGD', (_FusedOptimizer, optimizers.MomentumSGD),
                        {'__doc__': 'MomentumSGD, fused.'})
FusedRMSprop = type('FusedRMSprop', (_FusedOptimizer, optimizers.RMSprop),
                    {'__doc__': 'RMSprop, fused.'})

_OPTIMIZERS = {
    optimizers.Adam: FusedAdam,
    optimizers.MomentumSGD: FusedMomentumSGD,
    optimizers.RMSprop: FusedRMSprop,
}


def fusable_names():
    return sorted(cls.__name__ for cls in _OPTIMIZERS)


def is_fused(optimizer):
    return isinstance(optimizer, _FusedOptimizer)


def fuse(optimizer, flush_denormals=False):
    """The fused optimizer of ``optimizer`` (Adam, MomentumSGD or RMSprop), made on its
    attributes (see the module); ``optimizer`` itself where it is fused already.

    Works before or after ``setup``; existing state, ``t``, hooks and hyper-parameters are
    kept, and the parameters' rules become the fused rules made on theirs.
    """
    if isinstance(optimizer, _FusedOptimizer):
        optimizer.flush_denormals = flush_denormals
        return optimizer
    jit.require('the fused update kernels (fused=True, --fused on)')
    cls = _OPTIMIZERS.get(type(optimizer))
    if cls is None:
        raise ConfigError(
            'chainermn_torus: no fused update for {}: fused versions exist for {} (exactly '
            'these classes, not subclasses). Leave fusing off for this optimizer.'.format(
                type(optimizer).__name__, ', '.join(fusable_names())))
    fused = _on(optimizer, cls)
    fused.flush_denormals = flush_denormals
    _rules_as(fused, lambda rule: _fused_rule(rule, fused._options()))
    return fused


def unfuse(optimizer):
    """Chainer's optimizer of a fused one (made on its attributes, as ``fuse`` made it), its
    parameters' rules Chainer's again; the state, ``t`` and hyper-parameters stay. Returns
    ``optimizer`` where it is not fused."""
    if not isinstance(optimizer, _FusedOptimizer):
        return optimizer
    stock = _on(optimizer, next(c for c, f in _OPTIMIZERS.items() if isinstance(optimizer, f)))
    stock.__dict__.pop('_flat', None)  # the flat step is the fused class's
    stock.__dict__.pop('flat_steps', None)
    back = {f: c for c, f in _RULES.items()}
    _rules_as(stock, lambda rule: _on(rule, back[type(rule)]) if type(rule) in back else rule)
    return stock


def _rules_as(optimizer, convert):
    """Each parameter's update rule replaced by ``convert(rule)`` (a set-up optimizer's)."""
    target = getattr(optimizer, 'target', None)
    if isinstance(target, chainer.Link):
        for param in target.params():
            param.update_rule = convert(param.update_rule)
