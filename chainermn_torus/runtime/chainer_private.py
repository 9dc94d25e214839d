"""Chainer's private names this package reads or writes, all here, each with why no public
one serves. Checked against Chainer 7.8.1 (``CHECKED_WITH``; setup.py pins it):
tests/test_chainer_private.py builds the objects and finds every name where it is used.

Read through the functions below:

* ``StandardUpdater._iterators`` / ``Evaluator._iterators`` (``iterators``): the launcher
  replaces a script's iterators in place, and a checkpoint resumed on another rank count
  sets every training iterator's place; a StandardUpdater shows one iterator by name only,
  and ``Evaluator.get_all_iterators()`` returns a copy.
* ``StandardUpdater._optimizers`` (``optimizers``): the launcher wraps a script's optimizers
  in place; ``get_all_optimizers()`` returns a copy.
* ``SubDataset._dataset`` / ``._order`` (``sub_dataset_parts``): a checkpoint records the
  whole dataset's size and the shard order ``scatter_dataset`` cut; SubDataset has no public
  view of either.
* ``Optimizer._loss_scale`` and ``._use_cleargrads`` (``loss_scale``, ``uses_cleargrads``):
  the multi-node optimizer runs forward and backward itself, as ``GradientMethod.update``
  does, with the same loss scale and the same clearing of gradients; Chainer sets both
  through methods (``loss_scaling()``, ``use_cleargrads()``) and has no getter.
* ``batch_normalization._BatchNormalizationImpl``, ``._impl_selector``, ``._compute_axis``,
  ``._compute_key_axis`` (``batch_normalization_internals``): Chainer's own seam for choosing
  a batch normalization implementation (it picks iDeep's or cuDNN's there); compute plugs
  oneDNN's in at the same place.

Read before Chainer's import ends (``runtime.chainer_import``, which imports Chainer, so this
module imports no Chainer module at its top): ``chainer._environment_check`` (its name:
``ENVIRONMENT_CHECK``) and ``chainer._version._optional_dependencies``
(``optional_dependencies``), the module Chainer's ``__init__`` calls ``check()`` of and the
list of optional packages that check looks for; Chainer has no public switch or list.

Written by compute's replacements of Chainer's function bodies (compute/onednn.py), the
fields Chainer's own ``forward_cpu`` sets and its ``backward`` reads, so they must be set
alike: ``Convolution2DFunction._check_input_layouts_all_standard()``,
``Deconvolution2DFunction._calc_out_size()``, ``AveragePooling2D._in_shape`` /
``._in_dtype``, ``BatchNormalization._impl_selector``.
"""
__all__ = ['CHECKED_WITH', 'iterators', 'optimizers', 'sub_dataset_parts', 'loss_scale',
           'uses_cleargrads', 'batch_normalization_internals', 'optional_dependencies',
           'ENVIRONMENT_CHECK', 'NAMES']

CHECKED_WITH = '7.8.1'
ENVIRONMENT_CHECK = 'chainer._environment_check'

# (module, class or None, name): every private name above, for the test.
NAMES = (
    ('chainer.training.updaters.standard_updater', 'StandardUpdater', '_iterators'),
    ('chainer.training.updaters.standard_updater', 'StandardUpdater', '_optimizers'),
    ('chainer.training.extensions.evaluator', 'Evaluator', '_iterators'),
    ('chainer.optimizer', 'Optimizer', '_loss_scale'),
    ('chainer.optimizer', 'GradientMethod', '_use_cleargrads'),
    ('chainer.datasets.sub_dataset', 'SubDataset', '_dataset'),
    ('chainer.datasets.sub_dataset', 'SubDataset', '_order'),
    ('chainer.functions.normalization.batch_normalization', None,
     '_BatchNormalizationImpl'),
    ('chainer.functions.normalization.batch_normalization', None, '_impl_selector'),
    ('chainer.functions.normalization.batch_normalization', None, '_compute_axis'),
    ('chainer.functions.normalization.batch_normalization', None, '_compute_key_axis'),
    ('chainer.functions.normalization.batch_normalization', 'BatchNormalization',
     '_impl_selector'),
    ('chainer.functions.connection.convolution_2d', 'Convolution2DFunction',
     '_check_input_layouts_all_standard'),
    ('chainer.functions.connection.deconvolution_2d', 'Deconvolution2DFunction',
     '_calc_out_size'),
    ('chainer.functions.pooling.average_pooling_2d', 'AveragePooling2D', '_in_shape'),
    ('chainer.functions.pooling.average_pooling_2d', 'AveragePooling2D', '_in_dtype'),
    ('chainer._version', None, '_optional_dependencies'),
    (ENVIRONMENT_CHECK, None, 'check'),
)


def iterators(holder):
    """The dict a StandardUpdater or an Evaluator keeps its iterators in (not a copy)."""
    return holder._iterators


def optimizers(updater):
    """The dict a StandardUpdater keeps its optimizers in (not a copy)."""
    return updater._optimizers


def sub_dataset_parts(dataset):
    """(the whole dataset, the order or None) a chainer.datasets.SubDataset is cut from."""
    return getattr(dataset, '_dataset', None), getattr(dataset, '_order', None)


def loss_scale(optimizer):
    """The loss scale a Chainer optimizer's update backpropagates with (None: unscaled)."""
    return optimizer._loss_scale


def uses_cleargrads(optimizer):
    """Whether a Chainer optimizer clears gradients (cleargrads) rather than zeroing them."""
    return getattr(optimizer, '_use_cleargrads', True)


def batch_normalization_internals():
    """Chainer's batch_normalization module, whose private implementation seam compute
    uses (see the module doc)."""
    from chainer.functions.normalization import batch_normalization
    return batch_normalization


def optional_dependencies():
    """Chainer's list of the optional packages its environment check looks for (dicts with
    'name', 'packages', 'specifier'); readable during Chainer's import, after its
    ``_version``."""
    from chainer import _version
    return _version._optional_dependencies
