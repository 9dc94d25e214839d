"""Large-batch recipes of Akiba et al. (ImageNet in 15 minutes) as Chainer pieces.

* **Linear scaling and gradual warm-up** (Goyal et al., arXiv:1706.02677): with k times the
  batch, use k times the learning rate (``linear_scaling``), but reach it gradually: start
  from the small-batch rate and ramp linearly over the first epochs (``GradualWarmup``).
* **RMSprop warm-up** (Akiba et al.): start as RMSprop, which copes with the early, badly
  scaled gradients of a huge batch, and move to momentum SGD, which generalises better.
  ``RMSpropWarmup`` is one optimizer whose step mixes the two,

      ms <- rho * ms + (1 - rho) * g^2
      v  <- momentum * v - lr * (w + (1 - w) / (sqrt(ms) + eps)) * g
      p  <- p + v

  with the SGD weight ``w`` going from 0 (RMSprop with momentum) to 1 (momentum SGD);
  ``RMSpropToSGD`` moves it linearly over the epochs you choose. Its update is a fused kernel.

All schedules are computed from the updater's position (iteration or epoch_detail), not
accumulated, so a run resumed from a snapshot continues the schedule exactly.
"""
import numpy
from chainer import optimizer as optimizer_module
from chainer import training

from chainermn_torus.errors import ConfigError
from chainermn_torus.runtime.cpu import jit


__all__ = ['linear_scaling', 'Ramp', 'GradualWarmup', 'RMSpropWarmup', 'RMSpropToSGD']


def linear_scaling(base_lr, batch_size, base_batch_size=256):
    """Goyal et al.'s rule: the learning rate grows with the total batch size."""
    if batch_size <= 0 or base_batch_size <= 0:
        raise ConfigError('chainermn_torus: batch sizes must be positive, got '
                          f'batch_size={batch_size!r}, '
                          f'base_batch_size={base_batch_size!r}')
    return base_lr * float(batch_size) / base_batch_size


class Ramp(training.Extension):
    """Move optimizer attribute ``attr`` linearly from ``values[0]`` to ``values[1]``.

    The ramp spans ``span = (start, end)`` in ``unit`` ('epoch', fractional, or
    'iteration'). Before ``start`` the attribute holds ``values[0]``; at ``end`` it is set to
    ``values[1]`` once and then left alone, so a later schedule (ExponentialShift, ...) can
    take over; give that schedule its starting value (``init=``), since it would otherwise
    read the attribute at start-up, while the ramp is at ``values[0]``.
    """

    trigger = 1, 'iteration'
    priority = training.PRIORITY_WRITER  # before the update of the same iteration is reported

    def __init__(self, attr, values, span, unit='epoch', optimizer=None):
        if unit not in ('epoch', 'iteration'):
            raise ConfigError("chainermn_torus: unit must be 'epoch' or 'iteration', got "
                              f"{unit!r}")
        start, end = span
        if not end > start >= 0:
            raise ConfigError(f'chainermn_torus: the ramp needs 0 <= start < end, got span={span!r}'
                              )
        self.attr, self.values, self.span, self.unit = attr, tuple(values), (start, end), unit
        self._optimizer = optimizer
        self._done = False

    def _position(self, updater):
        return updater.epoch_detail if self.unit == 'epoch' else updater.iteration

    def value_at(self, position):
        start, end = self.span
        a, b = self.values
        if position <= start:
            return a
        if position >= end:
            return b
        return a + (b - a) * (position - start) / (end - start)

    def _apply(self, trainer, position):
        opt = self._optimizer or trainer.updater.get_optimizer('main')
        if position >= self.span[1]:
            if self._done:
                return
            self._done = True
        setattr(opt, self.attr, self.value_at(position))

    def initialize(self, trainer):
        # Also on resume: the value for where the run stands now; a run resumed after the
        # ramp ended leaves the attribute to whatever schedule took over (or the snapshot).
        position = self._position(trainer.updater)
        self._done = position >= self.span[1]
        if not self._done:
            self._apply(trainer, position)

    def __call__(self, trainer):
        self._apply(trainer, self._position(trainer.updater))


class GradualWarmup(Ramp):
    """Goyal et al.'s warm-up: ``attr`` from ``start_lr`` to ``target_lr`` over ``duration``."""

    def __init__(self, target_lr, start_lr, duration=5, unit='epoch', attr='lr', optimizer=None):
        super().__init__(attr, (start_lr, target_lr), (0, duration), unit,
                                            optimizer)


class RMSpropToSGD(Ramp):
    """Move an RMSpropWarmup optimizer's ``sgd_weight`` from 0 to 1 over ``span``."""

    def __init__(self, span, unit='epoch', optimizer=None):
        super().__init__('sgd_weight', (0.0, 1.0), span, unit, optimizer)


numba = jit.numba()
if numba is not None:
    @jit.kernel(jit.arguments('float32', 4, 7))
    def _rmsprop_warmup_kernel(p, g, ms, v, lr, momentum, rho, one_minus_rho, eps, w,
                               one_minus_w):
        for i in numba.prange(p.size):  # one flat prange: it vectorises (see kernels)
            gi = g[i]
            msi = rho * ms[i] + one_minus_rho * gi * gi
            ms[i] = msi
            vi = momentum * v[i] - lr * (w + one_minus_w / (numpy.sqrt(msi) + eps)) * gi
            v[i] = vi
            p[i] = p[i] + vi
else:
    def _rmsprop_warmup_kernel(p, g, ms, v, lr, momentum, rho, one_minus_rho, eps, w,
                               one_minus_w):
        # The kernel's operations in its order, with temporaries (no numba: runtime.cpu.jit).
        ms[...] = rho * ms + one_minus_rho * g * g
        v[...] = momentum * v - lr * (w + one_minus_w / (numpy.sqrt(ms) + eps)) * g
        p += v


_default = optimizer_module.Hyperparameter()
_default.lr = 0.01
_default.momentum = 0.9
_default.rho = 0.99
_default.eps = 1e-8
_default.sgd_weight = 0.0


class RMSpropWarmupRule(optimizer_module.UpdateRule):

    def __init__(self, parent_hyperparam=None):
        super().__init__(parent_hyperparam or _default)

    def init_state(self, param):
        xp = param.device.xp
        self.state['ms'] = xp.zeros_like(param.data)
        self.state['v'] = xp.zeros_like(param.data)

    def update_core_cpu(self, param):
        grad = param.grad
        if grad is None:
            return
        hp = self.hyperparam
        if not 0.0 <= hp.sgd_weight <= 1.0:
            raise ConfigError('chainermn_torus: sgd_weight must be in [0, 1], '
                              f'got {hp.sgd_weight!r}')
        t = param.data.dtype.type
        arrays = [a.reshape(-1) for a in (param.data, grad, self.state['ms'], self.state['v'])]
        if any(not a.flags.c_contiguous or a.dtype != param.data.dtype for a in arrays) or \
                param.data.dtype not in (numpy.float32, numpy.float64):
            raise TypeError('chainermn_torus: RMSpropWarmup needs contiguous float32/float64 '
                            'parameters and gradients of the same dtype')
        _rmsprop_warmup_kernel(*arrays, t(hp.lr), t(hp.momentum), t(hp.rho), t(1 - hp.rho),
                               t(hp.eps), t(hp.sgd_weight), t(1 - hp.sgd_weight))


class RMSpropWarmup(optimizer_module.GradientMethod):
    """RMSprop that turns into momentum SGD as ``sgd_weight`` goes from 0 to 1 (CPU)."""

    def __init__(self, lr=_default.lr, momentum=_default.momentum, rho=_default.rho,
                 eps=_default.eps, sgd_weight=_default.sgd_weight):
        super().__init__()
        self.hyperparam.lr = lr
        self.hyperparam.momentum = momentum
        self.hyperparam.rho = rho
        self.hyperparam.eps = eps
        self.hyperparam.sgd_weight = sgd_weight

    lr = optimizer_module.HyperparameterProxy('lr')
    momentum = optimizer_module.HyperparameterProxy('momentum')
    rho = optimizer_module.HyperparameterProxy('rho')
    eps = optimizer_module.HyperparameterProxy('eps')
    sgd_weight = optimizer_module.HyperparameterProxy('sgd_weight')

    def create_update_rule(self):
        return RMSpropWarmupRule(self.hyperparam)
