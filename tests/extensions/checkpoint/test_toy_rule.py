"""A batch rule added from outside the package (one class, ``rules.register``) is a choice
of ``--resume-batch``, is in its help, and is what a resume on another rank count applies;
no line of the package changes (extensions.checkpoint.rules)."""
import argparse
import math

import pytest
from chainer.training import triggers

from chainermn_torus.errors import ConfigError
from chainermn_torus.extensions.checkpoint import MultiNodeCheckpointer, add_arguments, rules
from conftest import line_with
from tests.extensions.checkpoint.support import checkpointed, comm, trainer
from tests.extensions.checkpoint.test_resharding import _as_two_ranks


class SquareRootScaling(rules.BatchRule):
    """Each rank keeps its batch; the learning rate scales with the square root of the
    global batch (Krizhevsky's rule for adaptive optimizers)."""
    name = 'sqrt'
    help = 'keep the batch per rank and scale the learning rate by the square root rule'

    def apply(self, trainer, stored, size, directory, lr_rule):
        attr, value = stored['learning_rate']
        before = stored['batch_per_rank'] * stored['ranks']
        after = trainer.updater.get_iterator('main').batch_size * size
        new = value * math.sqrt(after / before)
        setattr(trainer.updater.get_optimizer('main'), attr, new)
        return f'; {attr} {value:g} -> {new:g} (square root of {after} / {before})'


@pytest.fixture
def toy():
    rule = SquareRootScaling()
    rules.register(rule)
    yield rule
    rules.unregister(rule.name)
    assert rules.choices() == ('keep', 'scale')


def test_the_toy_rule_is_a_choice_and_resumes(toy, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(['--resume-batch', 'sqrt']).resume_batch == 'sqrt'
    assert line_with(' '.join(parser.format_help().split()), 'sqrt:', 'square root')
    first, _ = checkpointed(tmp_path)
    first.stop_trigger = triggers.IntervalTrigger(3, 'iteration')
    first.run()
    _as_two_ranks(tmp_path / 'ck', 3)   # stored: 2 ranks x 5, lr 0.1
    again = trainer(tmp_path / 'o2', batch=20)  # here: 1 rank x 20
    MultiNodeCheckpointer(comm(), str(tmp_path / 'ck'), batch='sqrt').resume(again)
    assert again.updater.get_optimizer('main').lr == pytest.approx(0.1 * math.sqrt(2))
    assert 'lr 0.1 -> 0.141421 (square root of 20 / 10)' in capsys.readouterr().out


def test_register_refuses_a_second_rule_of_a_name(toy):
    with pytest.raises(ConfigError) as e:
        rules.register(SquareRootScaling())
    assert "'sqrt' exists already" in str(e.value)
    with pytest.raises(ConfigError):
        rules.register(object())
