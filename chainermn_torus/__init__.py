"""chainermn-torus: 2D-torus gradient communicators for ChainerMN on CPU clusters.

What ``import chainermn_torus`` does: two things, and nothing else.

* It imports Chainer, without the package scans of Chainer's environment check where that
  check has nothing to find (``runtime.chainer_glue.chainer_import``: half of a rank's
  start-up).
* It registers ``pure_allreduce``, ``rsaa``, ``rsap`` and ``auto`` with
  ``chainermn.create_communicator``, and makes ``chainermn.create_multi_node_optimizer``
  this package's wrapper (the same behaviour with ChainerMN's defaults; double buffering,
  float16 communication and fused updates also on CPU).

It starts no process or thread, resolves no setting and changes nothing of the process:
mpi4py.MPI, numba and the communicator modules load when first used. The process is
configured in one place, ``init`` (``process_setup``): by this package's communicator and
optimizer factories, by the launcher, or by a script's own call; ChainerMN's own
communicators get only what a setting asks for.
"""
from chainermn_torus.runtime.chainer_glue import chainer_import as _chainer_import

_chainer_import.import_chainer()

from chainermn_torus import communicators as _communicators  # NOQA: E402 (Chainer first)
from chainermn_torus._registry import create_communicator  # NOQA: E402
from chainermn_torus._registry import create_multi_node_optimizer  # NOQA: E402
from chainermn_torus._registry import force_communicator  # NOQA: E402
from chainermn_torus._registry import register  # NOQA: E402
from chainermn_torus._registry import valid_names  # NOQA: E402
from chainermn_torus.process_setup import init  # NOQA: E402

__version__ = '0.1.0'
# The classes (_LAZY) are left out: a star import would load MPI.
__all__ = ['create_communicator', 'create_multi_node_optimizer', 'force_communicator',
           'init', 'register', 'valid_names', '__version__']

_LAZY = ('PureAllreduceCommunicator', 'RsaaCommunicator', 'RsapCommunicator')


def __getattr__(name):  # PEP 562: the classes import their modules (and MPI) on first use
    if name in _LAZY:
        return getattr(_communicators, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


register()
