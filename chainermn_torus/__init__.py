"""chainermn-torus: 2D-torus gradient communicators for ChainerMN on CPU clusters.

Importing this package registers ``pure_allreduce``, ``rsaa``, ``rsap`` and ``auto`` with
``chainermn.create_communicator``, and makes ``chainermn.create_multi_node_optimizer`` this
package's wrapper (the same behaviour with ChainerMN's defaults; double buffering, float16
communication and fused updates also on CPU). Nothing else happens at import, as with
``import chainermn``: mpi4py.MPI, numba and the communicator modules load when first used,
and the abort hook and the timeline start with the first communicator or optimizer
(``runtime.startup``).

Imported before Chainer, it imports Chainer without the package scans of Chainer's
environment check where that check has nothing to find (``runtime.chainer_glue.chainer_import``: half of
a rank's start-up).
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
