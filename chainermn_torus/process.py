"""What the package holds for the whole process, in one object made at import (``STATE``).

Each field has one owner, the module named beside it, which alone changes it and through
which everything else reads it; the object gathers them so that the process's state is read
in one place (and a test's or a second job's reset is one assignment per field):

* ``patches``: the changes to Chainer's and ChainerMN's objects in force, oldest first
  (``runtime.chainer_glue.patches``);
* ``said``: the keys of the lines said once (``runtime.report``);
* ``compute``: the mode ``compute.use`` applied, whether new forwards take oneDNN, the
  precision they compute in (``compute.modes``; each node records its own for its
  backward);
* ``settings``: every setting resolved once, frozen, installed by an entry point (``config``:
  ``init``'s, the launcher's or a command's; None before one did);
* ``configured``: what ``init`` changed in the process, with each undo (``process_setup``'s
  ``Setup``);
* ``policy``: the launch policy both factories read, frozen (``_registry``);
* ``watchdogs``: the watchdogs attached (``runtime.watch.watchdog``);
* ``threads``: the thread budget last applied, and how many times the OpenMP thread count
  changed, with the count it changed to (``runtime.cpu.threads``);
* ``allocation``: whether freed memory is kept, once decided (``runtime.cpu.allocation``);
* ``timeline``: the rank's timeline (``runtime.timeline``);
* ``devshm``: whether MPICH's segment names were removed, and when MPI_Init had returned
  (``runtime.files.devshm``);
* ``abort``: the installed abort hook's record (the hook before it, the refusal channel, the
  SIGTERM watcher's pipe, the sockets held, whether a refusal is on its way), what the
  process passed to ``sys.exit`` and what a checkpointer says is on disk
  (``runtime.watch.abort``);
* ``windows``: the RMA windows not freed yet, oldest first (``communicators._window``);
* ``draw_epoch``: the epoch the augmentation draws are keyed by (``datasets.draws``);
* ``kernel_fpenv``: the flush-to-zero mode last set in numba's worker threads and their
  count (``optimizers.kernels``).

The other process-wide holders are tables that plugins add rows to, caches, per-thread
scratch, a loaded library's handles and the watcher processes' own (docs/development.md,
"Process-wide state").
"""
import types

__all__ = ['Process', 'STATE']


class Process:
    __slots__ = ('patches', 'said', 'settings', 'configured', 'compute', 'policy', 'watchdogs',
                 'threads', 'allocation', 'timeline', 'devshm', 'abort',
                 'windows', 'draw_epoch', 'kernel_fpenv')

    def __init__(self):
        self.patches = []
        self.said = set()
        self.settings = None  # None: resolved at the first read
        self.configured = None
        self.compute = {'applied': None, 'on': False, 'precision': 'fp32'}
        self.policy = None  # None: the default policy (which changes nothing)
        self.watchdogs = []
        self.threads = {'applied': None, 'generation': 0, 'openmp': None}
        self.allocation = {}  # 'kept': decided once
        self.timeline = None
        self.devshm = {'unlinked': False, 'mpi_started': None}
        self.abort = types.SimpleNamespace(previous=None, channel=None, wakeup=None, said=[],
                                           refusing=False, exit={}, on_disk=[])
        self.windows = []
        self.draw_epoch = None
        self.kernel_fpenv = {'ftz': None, 'threads': None}


STATE = Process()
