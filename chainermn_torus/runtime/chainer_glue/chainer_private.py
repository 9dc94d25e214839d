"""Chainer's and ChainerMN's private names this package reads, writes or imports: one
registry (``REGISTRY``), each with why it is needed and the public alternative that was
checked. Checked against Chainer 7.8.1 (``CHECKED_WITH``; setup.py pins it).

``scripts/private_names.py`` finds every use of one of their private names by parsing the
package (``ast``: attributes, ``getattr`` strings, imports, module paths), and
tests/runtime/chainer_glue/test_chainer_private.py fails on a use that is not in ``REGISTRY`` (or in
``OURS_TOO``: names the package defines too, read on its own objects) and on an entry no
code uses any more; ``NAMES`` says where each is in Chainer, and the test finds it there in
the Chainer installed, so an upgrade that moves one fails in the tests, not in a job.

The reads that several modules need go through the functions below (``iterators``,
``optimizers``, ``persistents``, ``sub_dataset_parts``, ``loss_scale``, ``uses_cleargrads``,
``batch_normalization_internals``, ``optional_dependencies``); the others are read where
the registry says. Read before Chainer's import ends (``runtime.chainer_glue.chainer_import``, which
imports Chainer, so this module imports no Chainer module at its top): the environment
check and the optional dependencies.
"""
__all__ = ['CHECKED_WITH', 'iterators', 'optimizers', 'persistents', 'sub_dataset_parts',
           'loss_scale', 'is_multi_node_evaluator',
           'uses_cleargrads', 'batch_normalization_internals', 'optional_dependencies',
           'ENVIRONMENT_CHECK', 'NAMES', 'REGISTRY', 'OURS_TOO']

CHECKED_WITH = '7.8.1'
ENVIRONMENT_CHECK = 'chainer._environment_check'

# (module, class or None, name): where each name of REGISTRY is in Chainer or ChainerMN,
# for the test (a module-level name, an attribute of the class, or one the module sets; a
# private module is named by the modules' paths).
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
    ('chainer.functions.connection.linear', 'LinearGradWeight', '_w_dtype'),
    ('chainer.functions.pooling.average_pooling_2d', 'AveragePooling2D', '_in_shape'),
    ('chainer.functions.pooling.average_pooling_2d', 'AveragePooling2D', '_in_dtype'),
    ('chainer._version', None, '_optional_dependencies'),
    ('chainer.training.extensions.snapshot_writers', 'Writer', '_post_save'),
    (ENVIRONMENT_CHECK, None, 'check'),
    ('chainer.variable', 'Variable', '_loss_scale'),
    ('chainer.optimizers.adam', 'AdamRule', '_check_eps'),
    ('chainer.optimizer', 'UpdateRule', '_state'),
    ('chainer.optimizer', 'UpdateRule', '_hookable'),
    ('chainer.optimizer', 'UpdateRule', '_use_fp32_update'),
    ('chainer.optimizer', '_Hookable', '_pre_update_hooks'),
    ('chainer.optimizer', '_Hookable', '_post_update_hooks'),
    ('chainer.optimizer', 'Hyperparameter', '_parent'),
    ('chainer.iterators.serial_iterator', 'SerialIterator', '_state'),
    ('chainer.iterators.serial_iterator', 'SerialIterator', '_previous_epoch_detail'),
    ('chainer.iterators.serial_iterator', 'SerialIterator', '_repeat'),
    ('chainer.iterators.serial_iterator', 'SerialIterator', '_shuffle'),
    ('chainer._backprop', None, '_backprop_to_all'),
    ('chainer._backprop_utils', None, '_reduce'),
    ('chainer.training.extensions._snapshot', None, '_find_latest_snapshot'),
    ('chainer.training.extensions._snapshot', None, '_Snapshot'),
    ('chainer.training.extensions._snapshot', '_Snapshot', '_target'),
    ('chainer.functions.pooling.max_pooling_nd', 'MaxPoolingND', '_in_shape'),
    ('chainermn.extensions.multi_node_evaluator', None, '_mn_communicator'),
    ('chainer.link', 'Link', '_persistent'),
)

# name -> (where it is, why this package needs it, the public alternative checked and why it
# does not serve). Every private name of Chainer's or ChainerMN's the package uses.
REGISTRY = {
    '_post_save': (
        'training.extensions.snapshot_writers.Writer', 'a snapshot written into the held '
        'output directory (extensions.outputs) still runs the writer\'s cleanup hooks '
        '(n_retains), as Writer.save does after its move', 'none: Writer.save is the only '
        'public way, and it writes by path'),
    '_persistent': (
        'Link', 'a process holding several virtual ranks swaps each one\'s persistent values '
        '(BatchNormalization\'s running statistics) into the model around its forward '
        '(optimizers.virtual_updater), and a checkpoint of such a job leaves them out of the '
        'replica check (persistents)', 'none in 7.8.1: Link has no namedpersistent(); a '
        'serializer copies the parameters too (ResNet-50: 100 MB a virtual rank a step)'),
    '_iterators': (
        'StandardUpdater, Evaluator', 'the launcher replaces a script\'s iterators in place; '
        'a checkpoint resumed on another rank count sets every training iterator\'s place',
        'get_iterator(name) gives one by name, Evaluator.get_all_iterators() a copy'),
    '_optimizers': (
        'StandardUpdater', 'the launcher wraps a script\'s optimizers in place',
        'get_all_optimizers() returns a copy'),
    '_dataset': (
        'SubDataset', 'a checkpoint records the whole dataset\'s size', 'none: SubDataset '
        'shows its own length only'),
    '_order': (
        'SubDataset', 'a checkpoint records the shard order scatter_dataset cut',
        'none: SubDataset has no view of its order'),
    '_loss_scale': (
        'Optimizer, Variable', 'the multi-node optimizer and the fused update run forward '
        'and backward as GradientMethod.update does, with the same loss scale; the fused '
        'flat update refuses a parameter with loss scaling', 'loss_scaling() sets it; '
        'Chainer has no getter'),
    '_use_cleargrads': (
        'GradientMethod', 'the same clearing of gradients as GradientMethod.update',
        'use_cleargrads() sets it; Chainer has no getter'),
    '_BatchNormalizationImpl': (
        'functions.normalization.batch_normalization', "compute plugs oneDNN's and numba's "
        "batch normalization in as one more of Chainer's implementation classes",
        'none: the iDeep and cuDNN classes are chosen there, by the same private seam'),
    '_impl_selector': (
        'batch_normalization (module, and BatchNormalization)', "the seam's selector: ours "
        "chooses our class, else Chainer's", 'none (as above)'),
    '_compute_axis': (
        'batch_normalization', "FixedBatchNormalization's axes, computed as Chainer does",
        'none: the same function, private'),
    '_compute_key_axis': ('batch_normalization', 'as _compute_axis', 'as _compute_axis'),
    '_check_input_layouts_all_standard': (
        'Convolution2DFunction', "compute's forward sets what Chainer's forward_cpu sets",
        "none: the replacement must leave the node as Chainer's does"),
    '_w_dtype': (
        'LinearGradWeight', "the dtype Chainer's weight gradient is computed in: bfloat16's "
        'inner product writes float32 only', 'none: set by its constructor, not shown'),
    '_calc_out_size': (
        'Deconvolution2DFunction', "Chainer's output size and its errors, before oneDNN",
        'none (as above)'),
    '_in_shape': (
        'AveragePooling2D (and, set by compute, MaxPoolingND)', "the gradient's node reads "
        "the input's shape where Chainer's does", 'none (as above)'),
    '_backprop_utils': (
        'chainer._backprop_utils', "overlap sums a parameter's gradient contributions "
        "exactly as Chainer's backward will (_reduce), bit for bit",
        "none: Chainer's summation order is only in that function"),
    '_reduce': ('chainer._backprop_utils', 'as _backprop_utils', 'as _backprop_utils'),
    '_backprop': (
        'chainer/_backprop.py', "overlap finds the backward's gradient table: the local "
        "'grads' of _backprop_to_all, by the frame's file", 'none: hooks are not given the '
        'table'),
    '_backprop_to_all': ('chainer._backprop', 'as _backprop (the frame\'s function name)',
                         'as _backprop'),
    '_check_eps': (
        'AdamRule', 'the fused Adam checks eps as Chainer\'s update does, with its message',
        'none: the check is private'),
    '_state': (
        'UpdateRule; SerialIterator', 'the fused update keeps every rule\'s state as views '
        'of one flat array; the loader process iterator plans its order with a '
        'SerialIterator and restores its place after a restart', 'UpdateRule.state is '
        'read-only; SerialIterator.serialize writes to a serializer, not a tuple'),
    '_hookable': (
        'UpdateRule', 'the flat fused update is refused where a parameter has its own '
        'hooks', 'none: the hooks are kept there only'),
    '_pre_update_hooks': ('UpdateRule._hookable', 'as _hookable', 'as _hookable'),
    '_post_update_hooks': ('UpdateRule._hookable', 'as _hookable', 'as _hookable'),
    '_use_fp32_update': (
        'UpdateRule', 'the flat fused update is refused where a rule updates in float32 '
        'copies', 'use_fp32_update() sets it; no getter'),
    '_parent': (
        'Hyperparameter', "a rule's hyper-parameters are the optimizer's when its own dict "
        'holds only the link to them', 'none: Hyperparameter has no view of its own values'),
    '_previous_epoch_detail': (
        'SerialIterator', 'as _state (its place, restored)', 'previous_epoch_detail is '
        'read-only'),
    '_repeat': (
        'SerialIterator', "the launcher and the loader keep a script's iterator's "
        'repeat', 'repeat is public only on some iterators'),
    '_shuffle': ('SerialIterator', "the launcher keeps a script's iterator's order",
                 'none: SerialIterator does not show it'),
    '_snapshot': (
        'chainer.training.extensions._snapshot', "--data-parallel's autoload finds the "
        'snapshot every rank loads as Chainer\'s would (_find_latest_snapshot)',
        "none: snapshot(autoload=True) loads on the calling rank only"),
    '_find_latest_snapshot': ('extensions._snapshot', 'as _snapshot', 'as _snapshot'),
    '_Snapshot': (
        'extensions._snapshot', 'the launcher runs snapshot extensions on rank 0 only, by '
        'their class name', 'none: snapshot() returns this class'),
    '_target': ('_Snapshot', 'the object a snapshot loads into (default: the trainer)',
                'none: not shown'),
    '_mn_communicator': (
        "ChainerMN's multi-node evaluator", 'the launcher leaves an evaluator that is '
        'multi-node already as it is (is_multi_node_evaluator)',
        'none: create_multi_node_evaluator marks it so only'),
    '_version': ('chainer._version', 'read while Chainer imports (the optional '
                 'dependencies its environment check looks for)', 'none: no public list'),
    '_optional_dependencies': ('chainer._version', 'as _version', 'as _version'),
    '_environment_check': (
        'chainer._environment_check', "the check Chainer's __init__ runs, read before it "
        'ends (runtime.chainer_glue.chainer_import)', 'none: no public switch'),
}

# Private names this package defines as well as Chainer, read on this package's objects
# (the rule cannot tell them from Chainer's by the name): name -> whose.
OURS_TOO = {
    '_call': "optimizers/fused.py: a fused rule's kernel, a class attribute of ours",
    '_options': "optimizers/fused.py: the fused optimizer's options, ours",
    '_marker': "runtime/watch/call_marks.py: the watchdog a marked communicator marks on",
}


def iterators(holder):
    """The dict a StandardUpdater or an Evaluator keeps its iterators in (not a copy)."""
    return holder._iterators


def optimizers(updater):
    """The dict a StandardUpdater keeps its optimizers in (not a copy)."""
    return updater._optimizers


def persistents(model):
    """(path, link, attribute) of every persistent value of ``model`` (BatchNormalization's
    running statistics), path as ``namedlinks`` gives it plus the attribute; Chainer 7.8.1
    lists them only in a link's ``_persistent``."""
    return [(f'{path.rstrip("/")}/{attr}', link, attr)
            for path, link in model.namedlinks() for attr in sorted(link._persistent)]


def sub_dataset_parts(dataset):
    """(the whole dataset, the order or None) a chainer.datasets.SubDataset is cut from."""
    return getattr(dataset, '_dataset', None), getattr(dataset, '_order', None)


def is_multi_node_evaluator(extension):
    """Whether ``extension`` is an evaluator ChainerMN's create_multi_node_evaluator made
    (it marks the instance; there is no class to test)."""
    return hasattr(extension, '_mn_communicator')


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
