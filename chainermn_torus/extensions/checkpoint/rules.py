"""What happens to the batch and the learning rate when a checkpoint resumes on another
rank count: one rule per choice of ``batch=`` (``--resume-batch``).

A rule is a ``BatchRule``: its name, a line of help, whether it needs the caller's
large-batch learning-rate rule, and ``apply(trainer, stored, size, directory, lr_rule)``
that adjusts the trainer and returns what to say (appended to "resumed from ...").
``stored``: the manifest's ``ranks``, ``batch_per_rank`` and ``learning_rate`` ([attr,
value]). Adding a rule is one class here, in ``RULES`` (or, from outside the package,
``register(rule)``): ``batch=``, ``--resume-batch`` and its help read the table.
"""
import chainer

from chainermn_torus.extensions.checkpoint import identity
from chainermn_torus.errors import ConfigError
from chainermn_torus.extensions.checkpoint.files import CheckpointError

__all__ = ['BatchRule', 'KeepGlobalBatch', 'ScaleLearningRate', 'RULES', 'choices', 'get',
           'register', 'unregister']


class BatchRule:
    name = None
    help = None
    needs_lr_rule = False

    def apply(self, trainer, stored, size, directory, lr_rule):
        raise NotImplementedError


class KeepGlobalBatch(BatchRule):
    """The stored job's global batch, split over this job's ranks: the same optimisation
    (learning rate, warm-up) continues."""
    name = 'keep'
    help = 'keep the global batch (the batch per rank adjusted; default)'

    def apply(self, trainer, stored, size, directory, lr_rule):
        old = stored.get('batch_per_rank')
        it = trainer.updater.get_iterator('main')
        if not old or not hasattr(it, 'batch_size'):
            return ''
        total = old * stored['ranks']
        if total % size:
            raise CheckpointError(
                'chainermn_torus: cannot resume from {!r} on {} ranks: its global batch of {} '
                '({} ranks x {}) does not split evenly over {} ranks; resume on a rank count '
                'that divides {}, or keep each rank\'s batch of {} and scale the learning '
                'rate with the global batch ({} x {} = {}): batch=\'scale\' (the examples\' '
                '--resume-batch scale)'.format(
                    directory, size, total, stored['ranks'], old, size, total,
                    it.batch_size, size, it.batch_size, it.batch_size * size))
        needed = total // size
        if it.batch_size == needed:
            return f'; the global batch of {total} kept ({needed} per rank, as started)'
        if type(it) is not chainer.iterators.SerialIterator:
            # Loader processes and their shared slots are sized for the batch at creation.
            raise CheckpointError(
                f'chainermn_torus: cannot resume from {directory!r} on {size} ranks '
                f'with {it.batch_size} per rank: its '
                f'global batch of {total} needs {needed} per rank here, and a {type(it).__name__} '
                'cannot change its batch '
                f'once started; start the job with --batchsize {needed}')
        it.batch_size = needed
        return f'; the global batch of {total} kept: {needed} per rank instead of {old}'


class ScaleLearningRate(BatchRule):
    """Each rank keeps the batch this job was started with, so the global batch changes
    with the rank count, and the stored learning rate is scaled by ``lr_rule`` (new global,
    old global)."""
    name = 'scale'
    help = ('keep the batch per rank and scale the learning rate with the global batch by '
            'the linear scaling rule')
    needs_lr_rule = True

    def apply(self, trainer, stored, size, directory, lr_rule):
        old = stored.get('batch_per_rank')
        it = trainer.updater.get_iterator('main')
        learning_rate = stored.get('learning_rate')
        no_batch = not old or not hasattr(it, 'batch_size')
        if no_batch or not learning_rate:
            raise CheckpointError(
                "chainermn_torus: cannot resume from {!r} with batch='scale': the checkpoint "
                'does not record {} (written by an older version, or the iterator has no '
                "batch_size); resume with batch='keep' (--resume-batch keep)".format(
                    directory, 'its batch per rank' if no_batch else 'its learning rate'))
        attr, value = learning_rate
        before, after = old * stored['ranks'], it.batch_size * size
        new = lr_rule(value, after, before)
        setattr(identity.actual_optimizer(trainer), attr, new)
        name = getattr(lr_rule, '__name__', repr(lr_rule))
        return ('; the global batch changed from {} ({} x {}) to {} ({} x {}, the batch this '
                'job was started with): {} {:g} -> {:g} by the large-batch rule {} ({}); a '
                'schedule extension that sets {} itself (a warm-up) takes over from it'.format(
                    before, stored['ranks'], old, after, size, it.batch_size, attr, value, new,
                    name, (lr_rule.__doc__ or '').strip().split('\n')[0].rstrip('.'), attr))


RULES = {rule.name: rule for rule in (KeepGlobalBatch(), ScaleLearningRate())}
_BUILT_IN = tuple(RULES)


def choices():
    return tuple(RULES)


def register(rule):
    """Add a BatchRule (its ``name`` a new one)."""
    if not isinstance(rule, BatchRule) or not rule.name or not rule.help:
        raise ConfigError('chainermn_torus: a batch rule is a BatchRule with a name and a '
                          f'help line, got {rule!r}')
    if rule.name in RULES:
        raise ConfigError(f'chainermn_torus: a batch rule named {rule.name!r} exists already')
    RULES[rule.name] = rule


def unregister(name):
    """Remove a rule ``register`` added (the built-in ones stay)."""
    if name in RULES and name not in _BUILT_IN:
        del RULES[name]


def get(name, lr_rule=None):
    """The rule called ``name``, checked against what it needs."""
    if name not in RULES:
        raise ConfigError('chainermn_torus: batch must be one of {}, got {!r}'.format(
            ', '.join(RULES), name))
    rule = RULES[name]
    if rule.needs_lr_rule and lr_rule is None:
        raise ConfigError(f"chainermn_torus: batch={name!r} needs lr_rule, the large-batch rule "
                          'that scales the learning rate with the global batch '
                          '(chainermn_torus.optimizers.large_batch.linear_scaling)')
    return rule
