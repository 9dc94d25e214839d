"""What the script's own modules see of CUDA and CuPy under ``--gpu-to-cpu``, bound into them
when they are imported, never into ``sys.modules``.

Each module of the script (scope.SCRIPT: the script and the files under its directory and
``CHAINERMN_TORUS_GPU_TO_CPU_PATHS``) runs with its own ``__builtins__``, whose
``__import__`` gives:

* ``import cupy`` (``cupy.cuda``, ``from cupy import ...``): the stand-in (cupy_on_cpu),
  ``cupy.cuda.nccl`` refused; a library's ``import cupy``, before or after, fails as on any
  CPU node;
* ``import chainer`` and its ``backends``/``cuda``, however spelled (``from chainer import
  cuda``, ``import chainer.backends.cuda as cuda``): views of Chainer's modules in which
  ``cuda.available`` is True, ``check_cuda_available`` checks nothing, ``cuda.Device`` is
  the CPU device and ``cuda.cupy`` the stand-in; every other name is Chainer's own.

The script itself gets these through ``runpy``'s ``init_globals`` (``globals_for_script``);
the modules it imports through ``Finder``, which sits in front of Python's path finder and
hands each module of the script its loader with the builtins set. Chainer's own modules keep
theirs: nothing of this runs on Chainer's paths.
"""
import builtins
import importlib.abc
import importlib.machinery
import sys
import types

import chainer
from chainer import backends
from chainer.backends import cuda

from chainermn_torus.launch.gpu_to_cpu import cupy_on_cpu
from chainermn_torus.launch.gpu_to_cpu.scope import SCRIPT
from chainermn_torus.runtime.chainer_glue import patches

__all__ = ['View', 'install', 'globals_for_script']

GROUP = 'gpu to cpu'


class View(types.ModuleType):
    """A module of Chainer as the script sees it: the names set on the view's class, else
    the real module's (reads and writes go to it)."""

    def __init__(self, real):
        super().__init__(real.__name__, real.__doc__)
        vars(self)['_real'] = real
        for name in ('__spec__', '__loader__', '__package__'):
            vars(self)[name] = getattr(real, name, None)

    def __getattr__(self, name):
        return getattr(vars(self)['_real'], name)

    def __setattr__(self, name, value):
        setattr(vars(self)['_real'], name, value)

    def __dir__(self):
        return dir(vars(self)['_real'])


def _said_once(said, name, value):
    full = 'chainer.cuda.' + name

    def get(view):
        said.mapped(full)  # said once, naming the reading line
        return value
    return property(get)


def _views(said, stand_in):
    def _nothing():
        pass

    state = {'available': True, 'check_cuda_available': _nothing,
             'Device': cupy_on_cpu.Device, 'cupy': stand_in}
    cuda_view = type('CudaForTheScript', (View,), {
        name: _said_once(said, name, value) for name, value in state.items()})(cuda)
    backends_view = type('BackendsForTheScript', (View,), {'cuda': cuda_view})(backends)
    chainer_view = type('ChainerForTheScript', (View,), {
        'cuda': cuda_view, 'backends': backends_view})(chainer)
    return {id(chainer): chainer_view, id(backends): backends_view, id(cuda): cuda_view}


def _builtins(said):
    """The script's modules' ``__builtins__``: Python's, but ``__import__``."""
    stand_in = cupy_on_cpu.CupyOnCpu(said)
    views = _views(said, stand_in)
    real_import = builtins.__import__

    def script_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and (name == 'cupy' or name.startswith('cupy.')):
            if name == 'cupy.cuda.nccl' or (name == 'cupy.cuda' and 'nccl' in (fromlist or ())):
                said.refuse('cupy.cuda.nccl', 'cupy.cuda.nccl')
            if name not in ('cupy', 'cupy.cuda'):
                said.refuse('cupy.*', 'import ' + name)
            said.mapped('import cupy')
            return stand_in.cuda if fromlist and name == 'cupy.cuda' else stand_in
        module = real_import(name, globals, locals, fromlist, level)
        return views.get(id(module), module)

    table = dict(vars(builtins))
    table['__import__'] = script_import
    return table


class _Loader(importlib.abc.Loader):
    """A module of the script loaded by its own loader, with the script's builtins."""

    def __init__(self, inner, table):
        self.inner, self.table = inner, table

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        vars(module)['__builtins__'] = self.table  # exec() keeps a __builtins__ it is given
        self.inner.exec_module(module)

    def __getattr__(self, name):  # get_source, get_filename, ... (tracebacks, inspect)
        return getattr(self.inner, name)


class Finder(importlib.abc.MetaPathFinder):
    """Python's path finder, whose answer is passed on as it is, but that a module of the
    script gets the loader above."""

    def __init__(self, scope, table):
        self.scope, self.table = scope, table

    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.origin and spec.has_location and \
                isinstance(spec.loader, importlib.machinery.SourceFileLoader) and \
                self.scope.kind(spec.origin) == SCRIPT:
            spec.loader = _Loader(spec.loader, self.table)
        return spec

    def invalidate_caches(self):
        pass


def install(said):
    """Bind the script's view for one launch; returns the builtins its modules run with."""
    table = _builtins(said)
    finders = list(sys.meta_path)
    at = next((i for i, f in enumerate(finders) if f is importlib.machinery.PathFinder),
              len(finders))
    finders.insert(at, Finder(said.scope, table))
    patches.apply(sys, 'meta_path', finders, GROUP,
                  "the script's modules see CUDA and CuPy as the script does")
    return table


def globals_for_script(said):
    """``runpy.run_path``'s ``init_globals`` for the script: its builtins under the option,
    Python's without."""
    table = getattr(said, 'builtins', None)
    return {'__builtins__': table} if table is not None else {}
