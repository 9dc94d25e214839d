"""Gradient sets for communication benchmarks: real models' parameter shapes.

resnet50: ``chainer.links.ResNet50Layers(pretrained_model=None)`` (162 arrays, 25,557,096
float32); mlp: the MNIST MLP 784-1000-1000-10 (6 arrays, 1,796,010 float32).
"""
import chainer.links as L
import numpy

from chainermn_torus.models import MLP  # NOQA: F401 (bench modules import it from here)

__all__ = ['GRADIENT_SETS', 'MLP', 'make_model', 'model_params']


def _resnet50():
    return L.ResNet50Layers(pretrained_model=None)


GRADIENT_SETS = {'resnet50': _resnet50, 'mlp': MLP}


def make_model(name, seed=0):
    """The model with every parameter's grad filled with reproducible, rank-specific values."""
    if name not in GRADIENT_SETS:
        raise ValueError('unknown gradient set {!r}; choose from {}'.format(
            name, ', '.join(GRADIENT_SETS)))
    model = GRADIENT_SETS[name]()
    rng = numpy.random.RandomState(seed)
    for _, p in sorted(model.namedparams()):
        p.grad = rng.standard_normal(p.data.shape).astype(p.data.dtype)
    return model


def model_params(name):
    """(name, shape) of every parameter of a gradient set, in ChainerMN's sorted order."""
    if name not in GRADIENT_SETS:
        raise ValueError('unknown gradient set {!r}; choose from {}'.format(
            name, ', '.join(GRADIENT_SETS)))
    return [(n, p.data.shape) for n, p in sorted(GRADIENT_SETS[name]().namedparams())]
