"""Chainer's type checks in the training forward and backward: on at first, then off.

Chainer checks the shapes and dtypes of every function's inputs on every call
(``chainer.config.type_check``, on by default). In a training loop the graph, the dtypes
and every shape but the batch dimension are the same at every step, so the checks of the
first step find what any step would; after it they are a fixed cost per call: 2-3.5% of
a ResNet-50 iteration on 2 threads, 10% of a small one (64 px, batch 1) on 16 threads
(docs/compute.md, "The fixed cost of an iteration").

The setting (``CHAINERMN_TORUS_TYPE_CHECK``, the launcher's ``--type-check``, the keyword
``type_check`` of ``create_multi_node_optimizer``): ``on`` (every step checked, Chainer's
way), ``off``, or N: the first N steps checked, then off, said once on rank 0. Default 1.
Only the forward and backward the multi-node optimizer runs itself (``update(lossfun, ...)``, as
Chainer's updaters call it) is affected: evaluation, a loop that calls ``backward`` itself
and everything else keep Chainer's setting, and no number changes (the checks only read).
``CHAINER_TYPE_CHECK=0``/``1`` in the environment is the user's choice for the whole
process and wins: it is followed as ``off``/``on``.
"""
import contextlib

import chainer

from chainermn_torus import config, settings_table
from chainermn_torus.runtime import report

__all__ = ['TypeChecks']


class TypeChecks:
    """Whether step ``i`` (from 0) of one optimizer runs its forward with Chainer's checks."""

    def __init__(self, given=None, rank=0, settings=None, chainer_own=None):
        """``settings``: the process's, handed down (None: the table's defaults);
        ``chainer_own``: Chainer's ``CHAINER_TYPE_CHECK``, read by the entry point."""
        settings = config.defaults() if settings is None else settings
        self.setting, self.source = settings.pick('type_check', given, 'type_check')
        chainer_own = (chainer_own or '').strip()
        if chainer_own in ('0', '1') and given is None:
            self.setting, self.source = ('on' if chainer_own == '1' else 'off',
                                         'CHAINER_TYPE_CHECK')
        self.rank = rank
        self._said = False

    def checked(self, step):
        s = self.setting
        return s == 'on' or (s != 'off' and step < s)

    def forward(self, step):
        """The context of step ``step``'s forward and backward."""
        if self.checked(step) or not chainer.config.type_check:
            return contextlib.nullcontext()
        if not self._said and self.setting != 'off':
            self._said = True
            steps = 'step' if self.setting == 1 else f'{self.setting} steps'
            report.say("Chainer's type checks ran on the first training {}; off in the training "
                       'forward and backward from now on ({}=on keeps them).'.format(
                           steps, settings_table.SETTINGS['type_check'].env), self.rank)
        return chainer.using_config('type_check', False)
