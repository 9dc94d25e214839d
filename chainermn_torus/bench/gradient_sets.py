"""Gradient sets for communication benchmarks: real models' parameter shapes.

resnet50: ``chainer.links.ResNet50Layers(pretrained_model=None)`` (162 arrays, 25,557,096
float32); mlp: the MNIST MLP 784-1000-1000-10 (6 arrays, 1,796,010 float32).
"""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy

__all__ = ['GRADIENT_SETS', 'MLP', 'make_model', 'model_params']


class MLP(chainer.Chain):
    """The MNIST MLP of ChainerMN's example (784-n_units-n_units-10, ReLU)."""

    def __init__(self, n_units=1000, n_out=10):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(784, n_units)
            self.l2 = L.Linear(n_units, n_units)
            self.l3 = L.Linear(n_units, n_out)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


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
