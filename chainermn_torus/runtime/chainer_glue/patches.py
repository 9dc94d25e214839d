"""Every change this package makes to Chainer's and ChainerMN's objects, made here, recorded,
and undoable: ``apply`` replaces an attribute (a factory of ChainerMN's module, a method of a
Chainer class) and remembers what was there; ``undo`` / ``uninstall`` put the original back
(the very object, or the inherited one where the class had none of its own); ``applied``
lists what is in force, each with its group and why.

The groups (who applies them, and when):

* ``registry``: ``import chainermn_torus`` makes ChainerMN's ``create_communicator`` (both
  import paths) and ``create_multi_node_optimizer`` this package's.
* ``launcher``: ``python -m chainermn_torus.run`` makes ``chainermn.optimizers.
  create_multi_node_optimizer`` ours too, and hooks ``StandardUpdater.__init__``,
  ``Trainer.extend`` and ``GradientMethod.update`` as its options ask (launch.patches).
* ``gpu to cpu``: the launcher's ``--gpu-to-cpu`` (and, without it, its check for a script
  written for GPUs): Chainer's device functions, ``Link.to_gpu`` and the class of the
  ``chainer.backends.cuda`` module (launch.gpu_to_cpu).
* ``watchdog``: ``Evaluator.__call__`` marks each evaluation batch (runtime.watch.watchdog);
  a communicator's calls are marked by a wrapper the factories return, not a patch
  (runtime.watch.call_marks).
* ``timing``: a method timed or slowed for a measurement, of one object (extensions.timing,
  bench double-buffering's slow link) or of a class or module while a benchmark runs.
* ``abort``: ``Trainer.run`` leaves the printing of a refusal to the abort hook.
* ``compute``: Chainer's heavy functions on oneDNN (compute.replacements).
* ``chainer tests``: scripts/chainer_tests_mode.py, in a session of Chainer's own tests.
* ``outputs``: the class of a ``LogReport`` and the ``save`` of a snapshot's writer, of one
  extension each, so that they write into the held output directory (extensions.outputs).
* ``chainer import``: while ``import chainermn_torus`` imports Chainer, an empty module in
  ``sys.modules`` where Chainer's own check has nothing to find (``chainer_import``).

Why it is built so: docs/internals.md (runtime/chainer_glue/patches.py).
"""
import types
import weakref

from chainermn_torus.process import STATE

__all__ = ['apply', 'undo', 'uninstall', 'applied', 'Patch', 'GROUPS']

GROUPS = ('registry', 'launcher', 'gpu to cpu', 'watchdog', 'timing', 'abort', 'compute',
          'chainer import', 'chainer tests', 'outputs')
_MISSING = object()



class Patch:
    """One change: ``owner.name`` was ``original`` (``own``: the owner's own entry, not an
    inherited one), is ``replacement``, made by ``group`` for ``why``. An instance owner is
    held weakly: a patch of a user's object (an extension's ``LogReport`` class) keeps
    nothing alive, and leaves the list when the object goes."""
    __slots__ = ('_owner', 'name', 'original', 'own', 'replacement', 'group', 'why')

    def __init__(self, owner, name, original, own, replacement, group, why):
        self._owner = _held(owner)
        self.name, self.original, self.own = name, original, own
        self.replacement, self.group, self.why = replacement, group, why

    @property
    def owner(self):
        held = self._owner
        return held() if isinstance(held, weakref.ref) else held


def _held(owner):
    if isinstance(owner, (type, types.ModuleType, dict)):
        return owner
    try:
        return weakref.ref(owner, _forget)
    except TypeError:  # no weak references to it: held as classes and modules are
        return owner


def _forget(ref):
    STATE.patches[:] = [p for p in STATE.patches if p._owner is not ref]


def _entries(owner):
    return owner if isinstance(owner, dict) else vars(owner)


def _set(owner, name, value):
    if isinstance(owner, dict):
        owner[name] = value
    else:
        setattr(owner, name, value)


def _delete(owner, name):
    if isinstance(owner, dict):
        del owner[name]
    else:
        delattr(owner, name)


def _keep_markers(original, replacement):
    """What Chainer set on the function it had, set on ours too where ours has none of its
    own: ``chainer.utils.final``'s marker among them (``DeviceResident.to_gpu`` is final
    with a DeprecationWarning: without the marker a Link that overrode it lost Chainer's
    "Overriding method 'to_gpu'" warning under --gpu-to-cpu)."""
    if isinstance(original, types.FunctionType) and \
            isinstance(replacement, types.FunctionType):
        for key, value in vars(original).items():
            vars(replacement).setdefault(key, value)


def apply(owner, name, replacement, group, why):
    """Set ``owner.name`` (``owner[name]`` for a dict) to ``replacement`` (recorded); returns
    the Patch. Patching an attribute that is patched already wraps the current one: undo
    goes back step by step."""
    if group not in GROUPS:
        raise ValueError('patch group {!r} is not one of {}'.format(group, ', '.join(GROUPS)))
    entries = _entries(owner)
    own = name in entries or name == '__class__'
    if name == '__class__':
        original = type(owner)
    else:
        original = entries[name] if own else (
            _MISSING if isinstance(owner, dict) else getattr(owner, name, _MISSING))
    _keep_markers(original, replacement)
    patch = Patch(owner, name, original, own, replacement, group, why)
    _set(owner, name, replacement)
    STATE.patches.append(patch)
    return patch


def undo(patch):
    """Put back what ``patch`` replaced (the original, or nothing of the owner's own where
    the attribute was inherited or the entry absent)."""
    if patch not in STATE.patches:
        return  # undone already, or its owner is gone
    STATE.patches.remove(patch)
    owner = patch.owner
    if owner is None:
        return
    if patch.own:
        _set(owner, patch.name, patch.original)
    elif patch.name in _entries(owner):
        _delete(owner, patch.name)


def uninstall(group=None, owner=None):
    """Undo every patch in force (of ``group``, of ``owner``), newest first; returns how
    many."""
    done = [p for p in reversed(STATE.patches) if (group is None or p.group == group)
            and (owner is None or p.owner is owner)]
    for patch in done:
        undo(patch)
    return len(done)


def applied(group=None, owner=None):
    return [p for p in STATE.patches if (group is None or p.group == group)
            and (owner is None or p.owner is owner)]
