"""The batch and learning-rate rules on another rank count, on a real trainer in one
process (extensions.checkpoint.rules)."""
import chainer
import pytest

from chainermn_torus.errors import ConfigError
from chainermn_torus.extensions.checkpoint import rules
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.optimizers.large_batch import linear_scaling
from tests.extensions.checkpoint.support import trainer


def stored(ranks, batch, lr=('lr', 0.1)):
    return {'ranks': ranks, 'batch_per_rank': batch, 'learning_rate': list(lr)}


def test_keep_splits_the_stored_global_batch(tmp_path):
    tr = trainer(tmp_path, batch=10)
    note = rules.RULES['keep'].apply(tr, stored(4, 5), 2, 'D', None)
    assert tr.updater.get_iterator('main').batch_size == 10
    assert 'global batch of 20 kept (10 per rank, as started)' in note
    note = rules.RULES['keep'].apply(tr, stored(4, 10), 2, 'D', None)
    assert tr.updater.get_iterator('main').batch_size == 20
    assert 'global batch of 40 kept: 20 per rank instead of 10' in note


def test_keep_refuses_a_batch_that_does_not_split(tmp_path):
    tr = trainer(tmp_path, batch=10)
    with pytest.raises(CheckpointError) as e:
        rules.RULES['keep'].apply(tr, stored(2, 5), 3, 'D', None)
    for fact in ('on 3 ranks', 'global batch of 10', '(2 ranks x 5)', 'divides 10',
                 '--resume-batch scale'):
        assert fact in str(e.value)


def test_keep_refuses_to_resize_an_iterator_that_cannot(tmp_path):
    tr = trainer(tmp_path, batch=10)
    it = chainer.iterators.MultithreadIterator(tr.updater.get_iterator('main').dataset, 10,
                                               n_threads=1)
    tr.updater._iterators['main'] = it  # the test builds the case directly
    try:
        with pytest.raises(CheckpointError) as e:
            rules.RULES['keep'].apply(tr, stored(1, 40), 2, 'D', None)
        assert 'MultithreadIterator' in str(e.value) and '--batchsize 20' in str(e.value)
    finally:
        it.finalize()


def test_scale_sets_the_learning_rate_by_the_rule(tmp_path):
    tr = trainer(tmp_path, batch=10)
    note = rules.RULES['scale'].apply(tr, stored(4, 10, ('lr', 0.4)), 2, 'D', linear_scaling)
    assert tr.updater.get_optimizer('main').lr == pytest.approx(0.2)
    assert tr.updater.get_iterator('main').batch_size == 10
    assert 'from 40 (4 x 10) to 20 (2 x 10' in note and 'lr 0.4 -> 0.2' in note
    assert 'linear_scaling' in note
    with pytest.raises(CheckpointError) as e:
        rules.RULES['scale'].apply(tr, stored(4, 10, ()), 2, 'D', linear_scaling)
    assert 'does not record its learning rate' in str(e.value)


def test_rules_by_name():
    assert rules.choices() == ('keep', 'scale')
    assert rules.get('keep') is rules.RULES['keep']
    with pytest.raises(ConfigError) as e:
        rules.get('double')
    assert "'double'" in str(e.value) and 'keep, scale' in str(e.value)
    with pytest.raises(ConfigError) as e:
        rules.get('scale')
    assert 'needs lr_rule' in str(e.value)
