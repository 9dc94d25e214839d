"""Chainer's device API as a script written for GPUs uses it, each GPU device it asks for
made the rank's CPU (calls.MAPPED); without ``--gpu-to-cpu`` the same places refuse the
script's first GPU request in one line that names the option.

Two kinds of patch (group 'gpu to cpu'):

* the functions that take a GPU device (``chainer.get_device``, which the ``device=`` of an
  updater, an evaluator, a converter, ``to_device`` and ``using_device`` reach too;
  ``cuda.get_device_from_id``, ``cuda.get_device``, ``cuda.to_gpu``, ``Link.to_gpu``) map
  a request whose asker (scope: the innermost frame not a library's) is the script, and
  pass every other call to Chainer's function unchanged;
* the module ``chainer.backends.cuda`` (also ``chainer.cuda``) gets a class whose properties
  answer ``available``, ``check_cuda_available``, ``Device`` and ``cupy`` with the mapped
  value only where the reading frame is the script's. Chainer's functions inside that module
  read its globals, not these properties; its other modules read the properties as
  Chainer's: on a CPU-only machine every library still sees no GPU.

The raw-kernel functions (``cuda.elementwise``, ``reduce``, ``raw``) and ``chainermn.nccl``'s
missing names refuse the script's use in one line naming its file and line.
"""
import importlib
import numbers
import sys
import types

import chainer
import numpy
from chainer import backend, device_resident
from chainer.backends import cuda

from chainermn_torus.launch.gpu_to_cpu import cupy_on_cpu
from chainermn_torus.launch.gpu_to_cpu.calls import CUDA_KERNELS
from chainermn_torus.launch.gpu_to_cpu.scope import SCRIPT
from chainermn_torus.runtime.chainer_glue import patches

__all__ = ['install', 'is_gpu_spec']

GROUP = 'gpu to cpu'
_INTEGERS = (numbers.Integral, numpy.integer)  # what Chainer takes as a device number


def is_gpu_spec(spec):
    """Whether ``spec`` names a GPU: a device number >= 0, '@cupy:N', ChainerX's 'cuda:N',
    or a cuda-API device object."""
    if isinstance(spec, (backend.Device, bool)):  # first: what Chainer passes on every batch
        return False
    if isinstance(spec, _INTEGERS):
        return spec >= 0
    if isinstance(spec, str):
        text = spec.strip()
        if text.lstrip('-').isdigit():
            return int(text) >= 0
        return text.startswith(('@cupy:', 'cuda'))
    return isinstance(spec, cuda.DummyDeviceType)


def _check_nothing():
    pass


def install(said):
    """Apply the patches for one launch (``said``: calls.Said, which knows the scope and
    whether requests are mapped or refused)."""
    _device_functions(said)
    _kernels(said)
    if said.mapping:  # without the option Chainer's module keeps its class: no cost
        _cuda_state(said)
    _nccl(said)


def _patch(owner, name, replacement, why):
    replacement.__wrapped__ = getattr(owner, name)
    patches.apply(owner, name, replacement, GROUP, why)


def _device_functions(said):
    get_device = backend.get_device

    def mapped_get_device(device_spec):
        if is_gpu_spec(device_spec) and said.request(
                'chainer.get_device', 'chainer.get_device({!r})'.format(device_spec)):
            return backend.CpuDevice()
        return get_device(device_spec)

    for owner in (backend, chainer):  # chainer.get_device is bound apart from backend's
        _patch(owner, 'get_device', mapped_get_device, "a GPU the script asks for is the CPU")

    get_device_from_id = cuda.get_device_from_id

    def mapped_get_device_from_id(device_id):
        if is_gpu_spec(device_id) and said.request(
                'chainer.cuda.get_device_from_id',
                'chainer.cuda.get_device_from_id({!r})'.format(device_id)):
            return cuda.DummyDevice
        return get_device_from_id(device_id)

    _patch(cuda, 'get_device_from_id', mapped_get_device_from_id, 'the CPU device')
    deprecated_get_device = cuda.get_device

    def mapped_cuda_get_device(*args):
        if any(is_gpu_spec(a) for a in args if isinstance(a, _INTEGERS)) and \
                said.request('chainer.cuda.get_device', 'chainer.cuda.get_device{!r}'.format(
                    args)):
            return cuda.DummyDevice
        return deprecated_get_device(*args)

    _patch(cuda, 'get_device', mapped_cuda_get_device, 'the CPU device')
    to_gpu = cuda.to_gpu

    def mapped_to_gpu(array, device=None, stream=None):
        if said.request('chainer.cuda.to_gpu', 'chainer.cuda.to_gpu'):
            return array
        return to_gpu(array, device, stream)

    _patch(cuda, 'to_gpu', mapped_to_gpu, 'arrays stay numpy')
    link_to_gpu = device_resident.DeviceResident.to_gpu

    def mapped_link_to_gpu(self, device=None):
        if said.request('Link.to_gpu', '{}.to_gpu({})'.format(
                type(self).__name__, '' if device is None else repr(device))):
            return self.to_device(backend.CpuDevice())
        return link_to_gpu(self, device)

    _patch(device_resident.DeviceResident, 'to_gpu', mapped_link_to_gpu, 'arrays stay numpy')


def _kernels(said):
    for name in CUDA_KERNELS:
        original = getattr(cuda, name)

        def refused(*args, _name=name, _original=original, **kwargs):
            kind, frame = said.scope.asker(1)
            if kind == SCRIPT:
                said.refuse('chainer.cuda.' + _name, 'chainer.cuda.' + _name, frame)
            return _original(*args, **kwargs)

        _patch(cuda, name, refused, 'a raw CUDA kernel: refused in one line')


def _cuda_state(said):
    cupy = cupy_on_cpu.CupyOnCpu(said)
    cupy_on_cpu.install_import(said, cupy)
    values = {'available': True, 'check_cuda_available': _check_nothing,
              'Device': cupy_on_cpu.Device, 'cupy': cupy}
    attributes = {name: _state(said, name, value) for name, value in values.items()}
    cls = type('CudaOnCpu', (types.ModuleType,), dict(
        attributes, __doc__='chainer.backends.cuda, its GPU state mapped for the script'))
    patches.apply(cuda, '__class__', cls, GROUP,
                  "the script reads a GPU's state; Chainer's own code reads the CPU's")


def _state(said, name, mapped):
    full = 'chainer.cuda.' + name

    kinds, classify = said.scope.kinds, said.scope.kind

    def get(module):
        # Read on Chainer's hot paths (get_array_module reads cuda.available): inlined.
        frame = sys._getframe(1)
        filename = frame.f_code.co_filename
        if (kinds.get(filename) or classify(filename)) != SCRIPT:
            return module.__dict__[name]
        said.mapped(full, frame)
        return mapped

    def put(module, value):  # a test's monkeypatch of cuda.available still works
        vars(module)[name] = value

    def remove(module):
        del vars(module)[name]

    return property(get, put, remove)


def _nccl(said):
    module = importlib.import_module('chainermn.nccl')  # cupy's NCCL, absent here

    def missing(name):
        frame = said.scope.reader(1)
        if frame is not None:
            said.refuse('chainermn.nccl', 'chainermn.nccl.' + name, frame)
        raise AttributeError("module 'chainermn.nccl' has no attribute {!r}".format(name))

    patches.apply(module, '__getattr__', missing, GROUP, 'NCCL used directly: refused')
