"""Gradient sets filled for communication benchmarks: the shapes of
``algorithms.gradient_sets`` with reproducible, rank-specific gradients."""
import numpy

from chainermn_torus.algorithms.gradient_sets import GRADIENT_SETS, build

__all__ = ['GRADIENT_SETS', 'make_model']


def make_model(name, seed=0):
    """The model with every parameter's grad filled with reproducible, rank-specific values."""
    model = build(name)
    rng = numpy.random.RandomState(seed)
    for _, p in sorted(model.namedparams()):
        p.grad = rng.standard_normal(p.data.shape).astype(p.data.dtype)
    return model
