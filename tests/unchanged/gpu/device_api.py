"""Every call of Chainer 7.8.1's device API a GPU-written script makes, one after the other,
with what each returned written to a JSON file (tests/launch/test_gpu_to_cpu.py reads it).
``--other DIR``: a module there (not the script's code) reads the same GPU state, which must
stay the CPU-only machine's.

    python -m chainermn_torus.run --gpu-to-cpu device_api.py OUT.json [--other DIR]
"""
import argparse
import importlib
import json
import sys

import numpy

import chainer
import chainer.links as L
from chainer import cuda
import cupy


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('out')
    parser.add_argument('--other', default=None)
    args = parser.parse_args()
    seen = {}
    cuda.check_cuda_available()
    seen['available'] = chainer.cuda.available
    seen['backends.cuda.available'] = chainer.backends.cuda.available
    with cuda.Device(0):
        cuda.Device(1).use()
    cuda.get_device_from_id(0).use()
    seen['get_device(0)'] = str(chainer.get_device(0))
    seen['@cupy:1'] = str(chainer.get_device('@cupy:1'))
    seen['cuda:0'] = str(chainer.get_device('cuda:0'))
    seen['numpy stays'] = str(chainer.get_device('@numpy'))
    with chainer.using_device('@cupy:0'):
        seen['using_device'] = 'entered'
    link = L.Linear(3, 2)
    link.to_gpu()
    link.to_gpu(1)
    link.to_device('@cupy:0')
    seen['Link.device'] = str(link.device)
    seen['W module'] = type(link.W.array).__module__
    x = cuda.to_gpu(numpy.arange(6, dtype=numpy.float32).reshape(2, 3))
    seen['to_gpu module'] = type(x).__module__
    seen['get_device_from_array'] = str(chainer.backend.get_device_from_array(x))
    seen['get_array_module'] = cuda.get_array_module(x).__name__
    batch = [(numpy.ones(3, numpy.float32), numpy.int32(1))] * 2
    xs, ts = chainer.dataset.concat_examples(batch, device=0)
    seen['concat_examples'] = type(xs).__module__
    y = link(x)
    seen['to_cpu'] = float(cuda.to_cpu(y.array).sum())
    seen['cupy.asnumpy'] = float(cuda.cupy.asnumpy(y.array).sum())
    seen['cupy.zeros'] = type(cuda.cupy.zeros(3)).__module__
    seen['import cupy'] = cupy.asnumpy(cupy.arange(3)).tolist()
    seen['cupy.get_array_module'] = cupy.get_array_module(x).__name__
    seen['xp'] = link.xp.__name__
    if args.other:
        sys.path.insert(0, args.other)
        other = importlib.import_module('other_reader')
        seen['other'] = other.read()
    with open(args.out, 'w') as f:
        json.dump(seen, f)


if __name__ == '__main__':
    main()
