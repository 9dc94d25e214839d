"""The gradient sets of the benchmarks and the planner: real models' parameter shapes.

resnet50: ``chainer.links.ResNet50Layers(pretrained_model=None)`` (162 arrays, 25,557,096
float32); mlp: the MNIST MLP 784-1000-1000-10 (6 arrays, 1,796,010 float32).
"""
import functools

import chainer.links as L

from chainermn_torus.models import MLP

__all__ = ['GRADIENT_SETS', 'MODEL_BYTES', 'model_params', 'build']


def _resnet50():
    return L.ResNet50Layers(pretrained_model=None)


GRADIENT_SETS = {'resnet50': _resnet50, 'mlp': MLP}

# Gradient bytes of the sets (float32), without building the models.
MODEL_BYTES = {'resnet50': 25557096 * 4, 'mlp': 1796010 * 4}


def build(name):
    """A fresh model of gradient set ``name``."""
    if name not in GRADIENT_SETS:
        raise ValueError('unknown gradient set {!r}; choose from {}'.format(
            name, ', '.join(GRADIENT_SETS)))
    return GRADIENT_SETS[name]()


@functools.lru_cache(maxsize=None)
def model_params(name):
    """(name, shape) of every parameter of a gradient set, in ChainerMN's sorted order."""
    return tuple((n, p.data.shape) for n, p in sorted(build(name).namedparams()))
