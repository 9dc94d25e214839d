"""Chainer's device API with every GPU device request made the rank's CPU (calls.MAPPED);
without ``--gpu-to-cpu`` the same places refuse a GPU request in one line that names the
option. The node has no GPU, so no request is told apart from another: the decision is
made once, when the launcher installs these, not per call.

The patches (group 'gpu to cpu'):

* the functions that take a GPU device (``chainer.get_device``, which the ``device=`` of an
  updater, an evaluator, a converter, ``to_device`` and ``using_device`` reach too;
  ``cuda.get_device_from_id``, ``cuda.get_device``, ``cuda.to_gpu``, ``Link.to_gpu``) map
  a GPU request and pass every other call to Chainer's function unchanged;
* the raw-kernel functions (``cuda.elementwise``, ``reduce``, ``raw``), ``chainermn.nccl``'s
  missing names and the updaters of several GPUs (``ParallelUpdater``,
  ``MultiprocessParallelUpdater``, before Chainer's constructor runs) refuse in one line
  naming the file and line that used them.

What the script reads of CUDA's state (``cuda.available``, ``cuda.cupy``, ``import cupy``)
is not here: it is bound into the script's own modules (``script_view``); Chainer's module
keeps its class, and its hot path (``get_array_module`` reads ``cuda.available``) its cost.
"""
import importlib
import numbers

import chainer
import numpy
from chainer import backend, device_resident
from chainer.backends import cuda
from chainer.training import updaters

from chainermn_torus.launch.gpu_to_cpu.calls import CUDA_KERNELS, MULTI_GPU_UPDATERS
from chainermn_torus.runtime.chainer_glue import patches

__all__ = ['install', 'is_gpu_spec', 'GROUP']

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


def install(said):
    """Apply the patches for one launch (``said``: calls.Said, which knows whether requests
    are mapped or refused)."""
    _device_functions(said)
    _refusals(said)


def _patch(owner, name, replacement, why):
    replacement.__wrapped__ = getattr(owner, name)
    patches.apply(owner, name, replacement, GROUP, why)


def _device_functions(said):
    get_device = backend.get_device

    def mapped_get_device(device_spec):
        if is_gpu_spec(device_spec) and said.request(
                'chainer.get_device', f'chainer.get_device({device_spec!r})'):
            return backend.CpuDevice()
        return get_device(device_spec)

    for owner in (backend, chainer):  # chainer.get_device is bound apart from backend's
        _patch(owner, 'get_device', mapped_get_device, 'a GPU asked for is the CPU')

    get_device_from_id = cuda.get_device_from_id

    def mapped_get_device_from_id(device_id):
        if is_gpu_spec(device_id) and said.request(
                'chainer.cuda.get_device_from_id',
                f'chainer.cuda.get_device_from_id({device_id!r})'):
            return cuda.DummyDevice
        return get_device_from_id(device_id)

    _patch(cuda, 'get_device_from_id', mapped_get_device_from_id, 'the CPU device')
    deprecated_get_device = cuda.get_device

    def mapped_cuda_get_device(*args):
        if any(is_gpu_spec(a) for a in args if isinstance(a, _INTEGERS)) and \
                said.request('chainer.cuda.get_device', f'chainer.cuda.get_device{args!r}'):
            return cuda.DummyDevice
        return deprecated_get_device(*args)

    _patch(cuda, 'get_device', mapped_cuda_get_device, 'the CPU device')

    def mapped_to_gpu(array, device=None, stream=None):
        said.request('chainer.cuda.to_gpu', 'chainer.cuda.to_gpu')
        return array

    _patch(cuda, 'to_gpu', mapped_to_gpu, 'arrays stay numpy')

    def mapped_link_to_gpu(self, device=None):
        said.request('Link.to_gpu', '{}.to_gpu({})'.format(
            type(self).__name__, '' if device is None else repr(device)))
        return self.to_device(backend.CpuDevice())

    _patch(device_resident.DeviceResident, 'to_gpu', mapped_link_to_gpu, 'arrays stay numpy')


def _refusals(said):
    for name in CUDA_KERNELS:
        def refused(*args, _name=name, **kwargs):
            said.refuse('chainer.cuda.' + _name, 'chainer.cuda.' + _name)

        _patch(cuda, name, refused, 'a raw CUDA kernel: refused in one line')

    for name in MULTI_GPU_UPDATERS:
        cls = getattr(updaters, name)

        def refused_updater(self, *args, _name=name, _init=cls.__init__, **kwargs):
            # MultiprocessParallelUpdater needs NCCL: always GPUs. ParallelUpdater takes any
            # devices; the refusal is for GPU ones (``devices=``, its fifth argument).
            devices = kwargs.get('devices', args[4] if len(args) > 4 else None) or {}
            if _name != 'ParallelUpdater' or any(is_gpu_spec(d) for d in devices.values()):
                said.refuse('chainer.training.updaters.' + _name, _name)
            _init(self, *args, **kwargs)

        _patch(cls, '__init__', refused_updater, 'several GPUs in one process: refused '
               "before Chainer's constructor")

    module = importlib.import_module('chainermn.nccl')  # cupy's NCCL, absent here

    def missing(name):
        if name.startswith('__'):  # a tool's probe (copy, pickle, inspect): not a use
            raise AttributeError(name)
        said.refuse('chainermn.nccl', 'chainermn.nccl.' + name)

    patches.apply(module, '__getattr__', missing, GROUP, 'NCCL used directly: refused')
