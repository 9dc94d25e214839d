"""Datasets: MNIST-format IDX files (``mnist``; re-exported here, where it has always been
imported from) and ImageNet-format JPEG lists (``imagenet``)."""
from chainermn_torus.datasets.mnist import *  # NOQA: F401,F403
from chainermn_torus.datasets.mnist import __all__  # NOQA: F401
