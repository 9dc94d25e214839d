"""CuPy's name for the script under ``--gpu-to-cpu``: numpy, as ``chainer.cuda.cupy`` and as
``import cupy`` in the script's own modules (``script_view`` binds it there; it is never in
``sys.modules``, so every other importer finds no CuPy, as on any CPU node). ``asnumpy`` is
``numpy.asarray``, ``get_array_module`` numpy, ``fuse`` the function itself,
``cupy.cuda.Device(N)`` the CPU device of Chainer's cuda API. Raw kernels, NCCL and every
name numpy does not have are refused where the script uses them."""
import types

import numpy
from chainer.backends import cuda

from chainermn_torus.launch.gpu_to_cpu.calls import CUPY_KERNELS

__all__ = ['CupyOnCpu', 'Device', 'Namespace', 'GIVEN']

# What the stand-in has beyond numpy's names (the raw kernels: refused where called)
GIVEN = ('asnumpy', 'get_array_module', 'fuse', 'ndarray', 'cuda') + CUPY_KERNELS


class Device(cuda.DummyDeviceType):
    """``cuda.Device(N)`` / ``cupy.cuda.Device(N)`` as the script sees it: Chainer's CPU
    device of the cuda API (``use()`` and ``with`` do nothing)."""

    def __init__(self, device=None):
        super().__init__()


def _asnumpy(a, stream=None, order='C', out=None):
    return numpy.asarray(a, order=order)


def _get_array_module(*args):
    return numpy


def _fuse(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda function: function


class Namespace(types.ModuleType):
    """A module whose names the script reads: given ones, else numpy's (``numpy_too``),
    else refused where the script reads them."""

    def __init__(self, name, said, given, numpy_too):
        super().__init__(name)
        vars(self).update(given)
        vars(self)['_gpu_said'] = said
        vars(self)['_gpu_numpy_too'] = numpy_too

    def __getattr__(self, name):  # a name not set: numpy's, else refused
        if name.startswith('__'):
            raise AttributeError(name)
        if self._gpu_numpy_too and hasattr(numpy, name):
            return getattr(numpy, name)
        full = f'{self.__name__}.{name}'
        said = self._gpu_said
        said.refuse(full, full)  # the line that read it


class _Kernel:
    def __init__(self, said, name):
        self.said, self.name = said, name

    def __call__(self, *args, **kwargs):
        self.said.refuse(self.name, self.name)


def CupyOnCpu(said):
    """The module the script gets for ``cupy``."""
    cuda_names = {'Device': Device}
    cuda_names['__path__'] = []  # a package: ``from cupy.cuda import nccl`` asks it
    given = {'asnumpy': _asnumpy, 'get_array_module': _get_array_module, 'fuse': _fuse,
             'ndarray': numpy.ndarray, '__path__': [],
             'cuda': Namespace('cupy.cuda', said, cuda_names, numpy_too=False)}
    given.update((k, _Kernel(said, 'cupy.' + k)) for k in CUPY_KERNELS)
    return Namespace('cupy', said, given, numpy_too=True)
