"""chainermn-torus: 2D-torus gradient communicators for ChainerMN on CPU clusters.

Importing this package does three things, and nothing else:

* it imports Chainer, without the package scans of Chainer's environment check where that
  check has nothing to find (``runtime.chainer_glue.chainer_import``: half of a rank's
  start-up);
* it registers ``pure_allreduce``, ``rsaa``, ``rsap`` and ``auto`` with
  ``chainermn.create_communicator``, and makes ``chainermn.create_multi_node_optimizer``
  this package's wrapper (the same behaviour with ChainerMN's defaults; double buffering,
  float16 communication and fused updates also on CPU);
* in a process an MPI launcher started, with a watchdog set, it starts the start-up watcher
  beside the rank (``watchers.startup_watch``: a rank stopped before its communicator exists
  is named), the launcher's ``--watchdog`` replacing it with the flag's limits.

It resolves no setting (a variable the script sets before its first communicator is heard)
and configures nothing else: mpi4py.MPI, numba and the communicator modules load when first
used; the settings are resolved and the process configured (the abort hook, malloc, compute,
the threads, the watchdog) in one place, ``process_setup``, by the first communicator or
multi-node optimizer, or by the launcher.
"""
from chainermn_torus.runtime.chainer_glue import chainer_import as _chainer_import

_chainer_import.import_chainer()

from chainermn_torus import communicators as _communicators  # NOQA: E402 (Chainer first)
from chainermn_torus._registry import create_communicator  # NOQA: E402
from chainermn_torus._registry import create_multi_node_optimizer  # NOQA: E402
from chainermn_torus._registry import force_communicator  # NOQA: E402
from chainermn_torus._registry import register  # NOQA: E402
from chainermn_torus._registry import valid_names  # NOQA: E402

__version__ = '0.1.0'
# The classes (_LAZY) are left out: a star import would load MPI.
__all__ = ['create_communicator', 'create_multi_node_optimizer', 'force_communicator',
           'register', 'valid_names', '__version__']

_LAZY = ('PureAllreduceCommunicator', 'RsaaCommunicator', 'RsapCommunicator')


def __getattr__(name):  # PEP 562: the classes import their modules (and MPI) on first use
    if name in _LAZY:
        return getattr(_communicators, name)
    raise AttributeError('module {!r} has no attribute {!r}'.format(__name__, name))


register()

# With a watchdog set, in a process an MPI launcher started: watched from here, before MPI
# (watchers.startup_watch; a process of a few milliseconds beside the rank, nothing else).
from chainermn_torus.runtime.watch import watchdog as watchdog_mod  # NOQA: E402

watchdog_mod.watch_from_start()
del watchdog_mod  # not a name of the package's API
