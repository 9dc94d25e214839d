"""Chainer's import without its environment check's scans where that check has nothing to
find: half of every rank's start-up.

Chainer 7.8.1 ends ``import chainer`` with an environment check that imports
``numpy.distutils`` (and through setuptools' distutils shim, setuptools itself) and
``pkg_resources``, then asks ``pkg_resources`` 17 times whether an optional package is
installed (CuPy under 16 names, iDeep), each time scanning every directory on ``sys.path``
for installed distributions. On this project's test machine that is 0.47 of the 0.93 CPU-s
of ``import chainermn_torus`` (docs/development.md, "Start-up"); every rank of every job
pays it, all ranks of a node at once, on a cluster's shared file system. What the check can
find: a Python 3.5.0 (this package needs 3.8 or later), NumPy on macOS's Accelerate, and a
CuPy or iDeep of another version than Chainer supports, or two CuPy packages.

So ``import chainermn_torus``, where Chainer is not imported yet, imports it with a module
of its own in place of ``chainer._environment_check`` (``patches``, group 'chainer import',
in force for that one import, then undone and Chainer's namespace left without it, as if
the check had never been imported). When Chainer calls its ``check()``, this module looks
with Chainer's own list of optional packages: on macOS, or where a module of one of them
(``cupy``, ``ideep4py``) can be imported, or where that list cannot be read (another
Chainer than 7.8.1), Chainer's check runs, loaded from Chainer's file; otherwise it has
nothing to find and nothing runs. A script gets this by importing
``chainermn_torus`` before ``chainer`` (our examples do; ``python -m chainermn_torus.run``
does for the scripts it runs); one that imports Chainer first gets Chainer's check.
"""
import importlib.util
import os
import sys
import types

from chainermn_torus.runtime.chainer_glue import chainer_private, patches

__all__ = ['import_chainer']

_IN_CHAINER = chainer_private.ENVIRONMENT_CHECK.rsplit('.', 1)[1]  # its name in Chainer's


def _something_to_find():
    if sys.platform == 'darwin':  # the check's BLAS warning
        return True
    try:
        deps = chainer_private.optional_dependencies()
    except (ImportError, AttributeError):  # not the Chainer this was checked with: its check
        return True
    modules = set(package.split('-')[0]  # cupy-cuda120 and the others provide ``cupy``
                  for dep in deps for package in dep['packages'])
    return any(importlib.util.find_spec(m) is not None for m in sorted(modules))


def _check():
    """Called by Chainer's ``__init__`` where it calls its environment check."""
    if _something_to_find():
        path = os.path.join(os.path.dirname(sys.modules['chainer'].__file__),
                            _IN_CHAINER + '.py')
        spec = importlib.util.spec_from_file_location(chainer_private.ENVIRONMENT_CHECK, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.check()


def import_chainer():
    """``import chainer`` as above; nothing where Chainer is imported already."""
    if 'chainer' in sys.modules:
        return
    stand_in = types.ModuleType(chainer_private.ENVIRONMENT_CHECK,
                                'chainermn_torus.runtime.chainer_glue.chainer_import: looks '
                                "before it runs Chainer's environment check")
    stand_in.check = _check
    patch = patches.apply(sys.modules, chainer_private.ENVIRONMENT_CHECK, stand_in,
                          'chainer import', "Chainer's import-time package scans only where "
                          'they can find something (runtime.chainer_glue.chainer_import)')
    try:
        import chainer
    finally:
        patches.undo(patch)
    if getattr(chainer, _IN_CHAINER, None) is stand_in:
        delattr(chainer, _IN_CHAINER)
