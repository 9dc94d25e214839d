"""The one place that configures the process: each effect applied here once, in this order.

1. **abort hook** and **fault handler** (``runtime.watch.abort``): first, so that a bad
   value below ends the job in one line naming it, and a crash in native code prints the
   Python stacks;
2. **settings** (``config.current``): resolved once, frozen; a bad value is refused here;
3. **MPI's segment names** (``runtime.files.devshm``): MPICH's /dev/shm names removed once
   every rank of the communicator has mapped them (the node split of step 6 is collective);
4. **timeline**, where one is asked for (``runtime.timeline``);
5. **malloc** (``runtime.cpu.allocation``): freed memory kept for the next iteration;
6. **compute and precision** (``compute``): Chainer's heavy layers on oneDNN or numpy; oneDNN
   loading sets OpenMP's spin (``GOMP_SPINCOUNT``) before libgomp reads it;
7. **threads** (``runtime.cpu.threads``): after compute, whose OpenMP runtime is then in the
   budget; per node, from the ranks on it;
8. **watch** (``runtime.watch.watchdog``): the watchdog's processes, where a limit is set;
   last, since its start-up limit runs from here.

``configure(mpi_comm, ours)`` is called by the communicator factory before it constructs
(``ours``: one of this package's communicators), by the multi-node optimizer factory, and by
the launcher before the script runs (all but the watch, which the script's first
communicator starts). Each step runs once per process; a later call finds it done. Rank 0
then says, in one line, what was applied and the settings a flag or variable gave, with
which. A communicator class made directly, not by the factory, configures nothing: call
``configure`` first. Effects a setting asks for beyond these are applied where their object is made
(a multi-node optimizer's fused kernel, the launcher's patches of the script's Chainer).

With ChainerMN's own communicators (``ours=False``), malloc, compute and threads are applied
only where a setting asks for them (its flag or variable): importing this package and
calling ``create_communicator('naive')`` leaves Chainer's functions and the libraries' thread
pools as they are (docs/compute.md, "compute=auto").
"""
import faulthandler
import sys
import types

from chainermn_torus import compute, config
from chainermn_torus.process import STATE
from chainermn_torus.runtime import report, timeline
from chainermn_torus.runtime.cpu import allocation, threads
from chainermn_torus.runtime.files import devshm
from chainermn_torus.runtime.watch import abort, watchdog

__all__ = ['configure', 'STEPS', 'applied']

# The steps, in the order applied (the module's docstring says why this order).
STEPS = ('abort', 'settings', 'segment names', 'timeline', 'malloc', 'compute', 'threads',
         'watch')


def applied():
    """{step: what was applied} so far (empty before the first call)."""
    return dict(STATE.configured.done) if STATE.configured is not None else {}


def configure(mpi_comm=None, ours=True, later=()):
    """Apply the steps not yet done (module docstring); returns the settings. Collective over
    ``mpi_comm`` (an mpi4py communicator, default COMM_WORLD: the one being made's).
    ``ours``: for one of this package's communicators or the launcher; ``later``: steps
    left for the next call (the launcher leaves the watch and the threads to the script's
    first communicator)."""
    from mpi4py import MPI  # a communicator is being made: MPI starts here, if not before
    mpi_comm = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
    if STATE.configured is None:
        STATE.configured = types.SimpleNamespace(done={}, said=False, ours=False)
    record = STATE.configured
    record.ours = record.ours or ours
    _step(record, 'abort', _abort)
    _step(record, 'settings', config.current)
    settings = config.current()
    if all(s in record.done or s in later for s in STEPS):
        return settings
    node = _Node(mpi_comm)  # collective: every rank of the communicator is past MPI_Init
    _step(record, 'segment names', devshm.unlink_mpi_segments)
    _step(record, 'timeline', lambda: _timeline(settings))
    if record.ours or _asked(settings, 'keep_freed_memory'):
        _step(record, 'malloc', lambda: allocation.keep(rank=node.rank))
    if record.ours or _asked(settings, 'compute') or _asked(settings, 'precision'):
        _step(record, 'compute', lambda: compute.use(
            settings['compute'], settings.source('compute') or 'compute (default)', node.rank,
            settings['precision'], settings.source('precision') or 'precision (default)'))
    if (record.ours or _asked(settings, 'threads')) and 'threads' not in later:
        _step(record, 'threads', lambda: threads.ensure(node, settings['threads'],
                                                        settings.source('threads')))
    if 'watch' not in later:
        _step(record, 'watch', lambda: watchdog.start(mpi_comm))
        _say(record, settings, node.rank)
    return settings


def _step(record, name, apply):
    if name in record.done:
        return None
    value = apply()
    record.done[name] = value
    return value


def _abort():
    abort.install()
    if not faulthandler.is_enabled():
        try:  # the process's stderr: a test harness may have put an object without a file
            faulthandler.enable(file=sys.__stderr__.fileno(), all_threads=True)
        except (AttributeError, OSError, ValueError):
            faulthandler.enable(file=2, all_threads=True)
    return True


def _timeline(settings):
    prefix = settings['timeline']
    if prefix:
        timeline.enable(prefix, settings.source('timeline'))
    return prefix


def _asked(settings, key):
    return settings.source(key) is not None


class _Node:
    """What the thread budget asks of a communicator, from an mpi4py one: the rank, the
    ranks on this node and this rank among them (a collective split, as ChainerMN's)."""

    def __init__(self, mpi_comm):
        from mpi4py import MPI
        node = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            self.rank, self.intra_size, self.intra_rank = \
                mpi_comm.rank, node.size, node.rank
        finally:
            node.Free()


def _say(record, settings, rank):
    """Rank 0's one line: what was applied, and the settings from a flag or variable."""
    if record.said:
        return
    record.said = True
    done = record.done
    parts = ['abort hook' if done.get('abort') else None,
             'segment names removed' if done.get('segment names') else None,
             'timeline {}'.format(done['timeline']) if done.get('timeline') else None,
             'malloc keeps freed memory' if done.get('malloc') else None,
             'compute {}'.format(done['compute']) if done.get('compute') else None,
             'threads {}'.format(done['threads']['threads'])
             if done.get('threads') and done['threads'].get('threads') else None,
             'watchdog {:g} s'.format(done['watch'].timeout) if done.get('watch') else None]
    report.say('process: {}; settings: {}'.format(
        ', '.join(p for p in parts if p) or 'nothing applied', settings.describe()), rank)
