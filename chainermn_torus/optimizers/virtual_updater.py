"""The step of a process that holds several virtual ranks (``algorithms.virtual_ranks``).

``VirtualRanksUpdater`` is Chainer's ``StandardUpdater`` with one iterator per virtual rank
the process holds (each over that virtual rank's shard, ``datasets.shards.virtual_shards``,
with its own order): a step runs each one's forward and backward in turn, at its own batch,
keeps the gradients of all but the first, and hands them to the multi-node optimizer
(``more_grads``), whose communicator (made with ``virtual_ranks=V``) sums every held rank's
gradients exactly with every other process's (``mean_grad_sets``). The means, and so the
update, are then the same bits on any number of processes.

Each held virtual rank also owns what a rank's forward changes, swapped in around its forward
and backward (``HeldState``): numpy's global random state (Chainer's dropout draws from it)
and the model's persistent values (BatchNormalization's running statistics). Each starts as
the process's are at the first step, as every rank of a real job starts with the script's
seed and the model it built. Between steps the model holds the first held virtual rank's
values (what the evaluator uses, and the saved model: virtual rank 0's on process 0). The
states are in the updater's snapshot (``serialize``).
"""
import numpy
from chainer.training import updaters

from chainermn_torus.errors import ConfigError
from chainermn_torus.process import STATE
from chainermn_torus.runtime import report
from chainermn_torus.runtime.chainer_glue import chainer_private

__all__ = ['VirtualRanksUpdater', 'HeldState', 'threads_line']


class HeldState:
    """One virtual rank's random state and persistent values, for ``model``'s layout."""

    def __init__(self, model):
        self.slots = chainer_private.persistents(model)
        self.random = numpy.random.get_state()
        self.values = {path: _copy(getattr(link, attr)) for path, link, attr in self.slots}

    def load(self):
        """Into the process: numpy's global random state, the model's persistents."""
        numpy.random.set_state(self.random)
        for path, link, attr in self.slots:
            current, saved = getattr(link, attr), self.values[path]
            if isinstance(current, numpy.ndarray):
                current[...] = saved   # in place: the link's array keeps its identity
            else:
                setattr(link, attr, saved)

    def save(self):
        """From the process, after this virtual rank's forward and backward."""
        self.random = numpy.random.get_state()
        for path, link, attr in self.slots:
            value = getattr(link, attr)
            if isinstance(value, numpy.ndarray):
                self.values[path][...] = value
            else:
                self.values[path] = value

    def serialize(self, serializer):
        kind, keys, pos, has_gauss, gauss = self.random
        keys = serializer('random_keys', numpy.asarray(keys))
        pos, has_gauss, gauss = (serializer(name, value) for name, value in (
            ('random_pos', int(pos)), ('random_has_gauss', int(has_gauss)),
            ('random_gauss', float(gauss))))
        self.random = (kind, numpy.asarray(keys, numpy.uint32), int(pos), int(has_gauss),
                       float(gauss))
        for path, _, _ in self.slots:
            key = 'persistent' + path.replace('/', '.')
            value = self.values[path]
            if isinstance(value, numpy.ndarray):
                serializer(key, value)   # read into the array when loading
            else:
                self.values[path] = serializer(key, value)


class VirtualRanksUpdater(updaters.StandardUpdater):
    """``iterators``: one per virtual rank this process holds, in their order (the first is
    the Trainer's 'main': its epochs are the job's; the shards are of equal length, so all
    turn together); the other arguments are StandardUpdater's."""

    def __init__(self, iterators, optimizer, **kwargs):
        iterators = _checked(iterators)
        super().__init__(iterators[0], optimizer, **kwargs)
        self._hold(iterators)

    @classmethod
    def adopt(cls, updater, iterators):
        """``updater``, a StandardUpdater a script made, turned into this class in place (the
        script holds that object, and its Trainer will), over ``iterators``."""
        if type(updater) is not updaters.StandardUpdater:
            raise ConfigError(
                f'chainermn_torus: virtual ranks run a StandardUpdater\'s step for each held '
                f'virtual rank; this script\'s updater is a {type(updater).__name__}, whose own '
                'update_core they cannot split: use StandardUpdater, or no virtual ranks')
        iterators = _checked(iterators)
        updater.__class__ = cls
        updater._hold(iterators)
        return updater

    def _hold(self, iterators):
        named = chainer_private.iterators(self)
        named['main'] = iterators[0]
        # Serialized with the Trainer's snapshots: each held virtual rank's position.
        named.update({f'virtual_rank_{i}': it for i, it in enumerate(iterators[1:], 1)})
        self.held_iterators = iterators
        self.held_states = None   # made at the first step (or a snapshot's load)

    def _states(self, model):
        if self.held_states is None:
            self.held_states = [HeldState(model) for _ in self.held_iterators]
        return self.held_states

    def next_batch(self, iterator):
        """A held virtual rank's next batch (a subclass may time it, or key its crops)."""
        return iterator.next()

    def update_core(self):
        optimizer = self.get_optimizer('main')
        model = optimizer.target
        if self.held_states is None:
            report.say(threads_line(), optimizer.communicator.rank, key='virtual ranks threads')
        states = self._states(model)
        loss_func = self.loss_func or model
        more = []
        # The last held virtual rank first: the first one's forward runs last, so what it
        # reports (the loss a LogReport on process 0 keeps) is virtual rank 0's on any P, and
        # its gradients stay in the model. The sum does not depend on the order.
        for j in reversed(range(len(states))):
            iterator, state = self.held_iterators[j], states[j]
            state.load()   # before next(): an iterator drawing from numpy draws its own
            batch = self.next_batch(iterator)
            in_arrays = self.converter(batch, self.input_device)
            model.cleargrads()
            if isinstance(in_arrays, tuple):
                loss = loss_func(*in_arrays)
            elif isinstance(in_arrays, dict):
                loss = loss_func(**in_arrays)
            else:
                loss = loss_func(in_arrays)
            loss.backward()
            state.save()
            if j:   # kept as they are: the next cleargrads() drops them from the model
                more.append({n: p.grad for n, p in model.namedparams()})
        # Between steps the model holds the first held virtual rank's values (loaded last).
        optimizer.more_grads = more
        optimizer.update()   # no loss function: the gradients are set; average, update
        main = self.held_iterators[0]
        if self.auto_new_epoch and main.is_new_epoch:
            optimizer.new_epoch(auto=True)

    def serialize(self, serializer):
        super().serialize(serializer)
        states = self._states(self.get_optimizer('main').target)
        for j, state in enumerate(states):
            state.serialize(serializer[f'held_state_{j}'])


def threads_line():
    """What the bits depend on besides V: the threads a rank computes with (oneDNN's and
    numba's kernels split a sum over threads, so another count may change its last bits)."""
    applied = STATE.threads['applied'] or {}
    n = applied.get('threads')
    count = 'the libraries\' own thread count' if n is None else \
        f'{n} thread{"s" if n != 1 else ""} a rank'
    return (f'virtual ranks: computed with {count}; the same bits as a run on any number of '
            'processes with that count (oneDNN\'s and numba\'s kernels split their sums over '
            'threads: with another count the last bits may differ; --threads fixes it)')


def _checked(iterators):
    iterators = list(iterators)
    if not iterators:
        raise ConfigError('chainermn_torus: a process holds at least one virtual rank: '
                          'no iterator was given')
    return iterators


def _copy(value):
    return value.copy() if isinstance(value, numpy.ndarray) else value
