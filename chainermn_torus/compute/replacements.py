"""Chainer's functions on oneDNN: the seam.

Chainer's iDeep path (``chainer.config.use_ideep``) needs ``ideep4py``, which has no build
for Python 3.8 or later, and a stand-in would have to reproduce its array type and API for
every function Chainer gates with it. So the seam is the functions themselves: ``enable()``
replaces the CPU forward of the classes in ``REPLACEMENTS`` (one row per Chainer function,
written beside its replacement in ``compute/functions/``: the classes and methods patched,
what computes them, the cases left to Chainer and why; the start-up line, docs/compute.md's
table via ``table()``, the patches and their tests read it); each replacement hands back to
Chainer's own code through ``modes`` where oneDNN would not compute alike, said once.
``disable()`` puts Chainer's back. Adding a function: docs/compute.md, "Adding a function"."""
import importlib
import pkgutil

from chainermn_torus.compute import functions, modes
from chainermn_torus.compute.functions import common
from chainermn_torus.compute.onednn import binding
from chainermn_torus.runtime.chainer_glue import patches

__all__ = ['enable', 'disable', 'enabled', 'uninstall', 'REPLACED', 'REPLACEMENTS', 'table',
           'LOW_PRECISION']


def enabled():
    return modes.enabled()


# Every module of compute/functions but the shared one, by name: a new function is its own
# module there (docs/compute.md, "Adding a function"), found without a list to add it to.
_FUNCTIONS = [importlib.import_module(functions.__name__ + '.' + m.name)
              for m in sorted(pkgutil.iter_modules(functions.__path__), key=lambda m: m.name)
              if m.name != 'common']
REPLACEMENTS = tuple(row for module in _FUNCTIONS for row in module.ROWS)
# What precision bf16 changes (the start-up line; docs/compute.md, "bfloat16").
LOW_PRECISION = ('convolution_2d, deconvolution_2d and linear read bfloat16, sum in float32; '
                 'parameters, gradients and the update stay float32')
_REPLACEMENTS = [patch for row in REPLACEMENTS for patch in row.patches]
REPLACED = ', '.join(f'{row.function} ({row.said})' for row in REPLACEMENTS)
# Every class patched: its backward runs in the mode its forward ran in
# (``modes.in_mode_of_forward``): the functions it applies read what that forward left.
_BACKWARDS = sorted({cls for cls, _, _ in _REPLACEMENTS}, key=lambda c: c.__name__)
# Their backwards find the bfloat16 copies their forwards kept (compute.onednn.copies).
_SHARE_COPIES = tuple(c for module in _FUNCTIONS for c in getattr(module, 'SHARE_COPIES', ()))


def table():
    """The replaced functions as Markdown rows (docs/compute.md, "What runs on oneDNN")."""
    rows = ["| Chainer function | Chainer's classes | computed by | on oneDNN / numba | "
            'left to Chainer, and why |', '|---|---|---|---|---|']
    for r in REPLACEMENTS:
        classes = ', '.join(dict.fromkeys(f'`{cls.__name__}`'
                                          for cls, _, _ in r.patches))
        name = f'`{r.function}`' if r.function.isidentifier() else r.function
        rows.append(f'| {name} | {classes} | {r.by} | {r.takes} | {r.left} |')
    return '\n'.join(rows)


def enable():
    """Chainer's functions above on oneDNN from now on (idempotent); raises where oneDNN
    does not load (``binding.DnnlError``, naming the fix)."""
    binding.lib()
    if not patches.applied('compute'):
        for cls, name, make in _REPLACEMENTS:
            patches.apply(cls, name, make(cls.__dict__[name]), 'compute',
                          f'Chainer\'s {cls.__name__} on oneDNN')
        for cls in _BACKWARDS:
            backward = modes.in_mode_of_forward(getattr(cls, 'backward'))
            if cls in _SHARE_COPIES:
                backward = common.with_copies(backward)
            patches.apply(cls, 'backward', backward, 'compute', 'Chainer\'s {} backward in '
                          'the mode its forward ran in{}'.format(
                              cls.__name__, ', with its forward\'s bfloat16 copies'
                              if cls in _SHARE_COPIES else ''))
    modes.set_on(True)


def disable():
    """Chainer's own functions for every forward from now on. A node whose forward ran on
    oneDNN still takes its gradient there (it reads oneDNN's workspace)."""
    modes.set_on(False)


def uninstall():
    """Chainer's classes exactly as they were (no node computed in oneDNN mode may be
    differentiated after this)."""
    modes.set_on(False)
    patches.uninstall('compute')
