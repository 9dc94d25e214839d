"""The step of a process that holds several virtual ranks (``algorithms.virtual_ranks``).

``VirtualRanksUpdater`` is Chainer's ``StandardUpdater`` with one iterator per virtual rank
the process holds (each over that virtual rank's shard, ``datasets.shards.virtual_shards``,
with its own order): a step runs each one's forward and backward in turn, at its own batch,
keeps the gradients of all but the last, and hands them to the multi-node optimizer
(``more_grads``), whose communicator (made with ``virtual_ranks=V``) sums every held rank's
gradients exactly with every other process's (``mean_grad_sets``). The means, and so the
update, are then the same bits on any number of processes.

Not swapped here yet: a virtual rank's random state (dropout) and the persistent values its
forward changes (BatchNormalization's statistics): a model with either is refused at the
first step.
"""
import chainer
from chainer.training import updaters

from chainermn_torus.errors import ConfigError

__all__ = ['VirtualRanksUpdater']


class VirtualRanksUpdater(updaters.StandardUpdater):
    """``iterators``: one per virtual rank this process holds, in their order (the first is
    the Trainer's 'main': its epochs are the job's; the shards are of equal length, so all
    turn together); the other arguments are StandardUpdater's."""

    def __init__(self, iterators, optimizer, **kwargs):
        iterators = list(iterators)
        if not iterators:
            raise ConfigError('chainermn_torus: a process holds at least one virtual rank: '
                              'no iterator was given')
        named = {'main': iterators[0]}
        # Serialized with the Trainer's snapshots: each held virtual rank's position.
        named.update({f'virtual_rank_{i}': it for i, it in enumerate(iterators[1:], 1)})
        super().__init__(named, optimizer, **kwargs)
        self.held_iterators = iterators
        self._checked = False

    def update_core(self):
        optimizer = self._optimizers['main']
        model = optimizer.target
        if not self._checked:
            _check_stateless(model)
            self._checked = True
        loss_func = self.loss_func or model
        more = []
        for j, iterator in enumerate(self.held_iterators):
            batch = iterator.next()
            in_arrays = self.converter(batch, self.input_device)
            model.cleargrads()
            if isinstance(in_arrays, tuple):
                loss = loss_func(*in_arrays)
            elif isinstance(in_arrays, dict):
                loss = loss_func(**in_arrays)
            else:
                loss = loss_func(in_arrays)
            loss.backward()
            if j < len(self.held_iterators) - 1:
                more.append({n: None if p.grad is None else p.grad.copy()
                             for n, p in model.namedparams()})
        optimizer.more_grads = more
        optimizer.update()   # no loss function: the gradients are set; average, update
        main = self.held_iterators[0]
        if self.auto_new_epoch and main.is_new_epoch:
            optimizer.new_epoch(auto=True)


def _check_stateless(model):
    """Refuse what a virtual rank would share with the others on its process: persistent
    values a forward changes (BatchNormalization) and dropout's random state."""
    for name, link in model.namedlinks():
        if isinstance(link, chainer.links.BatchNormalization):
            raise ConfigError(f'chainermn_torus: {name} is a BatchNormalization, whose running '
                              'statistics each virtual rank must keep for itself: not yet '
                              'supported with virtual ranks')
