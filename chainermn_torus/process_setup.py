"""``init``: the one place that configures the process, each step once, in this order.

1. **abort hook** and **fault handler** (``runtime.watch.abort``): first, so that a bad
   value below ends the job in one line naming it, and a crash in native code prints the
   Python stacks;
2. **settings** (``config``): resolved once, frozen; a bad value is refused here;
3. **MPI's segment names** (``runtime.files.devshm``): MPICH's /dev/shm names removed once
   every rank of the communicator has mapped them (the node split below is collective);
4. **timeline**, where one is asked for (``runtime.timeline``);
5. **malloc** (``runtime.cpu.allocation``): freed memory kept for the next iteration;
6. **compute and precision** (``compute``): Chainer's heavy layers on oneDNN or numpy; oneDNN
   loading sets OpenMP's spin (``GOMP_SPINCOUNT``) before libgomp reads it;
7. **threads** (``runtime.cpu.threads``): after compute, whose OpenMP runtime is then in the
   budget; per node, from the ranks on it;
8. **fp environment** (``optimizers.fpenv``): flush-to-zero, where a multi-node optimizer
   asks for it (``flush_denormals``);
9. **watch** (``runtime.watch.watchdog``): the watchdog's processes, where a limit is set;
   last, since its step limit runs from here.

Who calls it, and with what: this package's communicator factory (``ours``: every step), its
multi-node optimizer factory (the abort hook, and flush-to-zero and the watchdog where its
options ask), the launcher (every step; the watch, and the threads unless
``--threads`` asks for them now, left to the script's first communicator), a script or an
example that wants the process configured before it makes anything (``chainermn_torus.init``).
ChainerMN's own communicators, made through the registered factory, get only the steps a
setting asks for by its flag or variable (the timeline, malloc, compute, threads, the
watch) and the abort hook where ``CHAINERMN_TORUS_ABORT_HOOK=on`` asks (ChainerMN's own hook
is opt-in too); with none given, ``naive`` runs in the process as ChainerMN leaves it. A
communicator class made directly, not by a factory, configures nothing: call ``init`` first.

The result (``Setup``, one per process) holds the settings, the node's facts and each change
made with the way to undo it; rank 0 says in one line what was applied and which settings a
flag or variable gave.
"""
import faulthandler
import sys
from typing import Any, Callable, Iterable, Optional

from chainermn_torus import compute, config
from chainermn_torus.config import Flags, Settings
from chainermn_torus.process import STATE
from chainermn_torus.runtime import report, timeline
from chainermn_torus.runtime.cpu import allocation, threads
from chainermn_torus.runtime.files import devshm
from chainermn_torus.runtime.watch import abort, watchdog

__all__ = ['init', 'STEPS', 'applied', 'setup', 'Setup', 'Node', 'Change']

# The steps, in the order applied (the module's docstring says why this order).
STEPS = ('abort', 'settings', 'segment names', 'timeline', 'malloc', 'compute', 'threads',
         'fp environment', 'watch')


class Node:
    """This rank and its node, from an mpi4py communicator (a collective split, as
    ChainerMN's): ``rank``, ``size``, ``intra_rank``, ``intra_size``."""

    def __init__(self, mpi_comm: Any) -> None:
        from mpi4py import MPI
        node = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            self.rank, self.size = mpi_comm.rank, mpi_comm.size
            self.intra_rank, self.intra_size = node.rank, node.size
        finally:
            node.Free()

    def __repr__(self) -> str:
        return (f'Node(rank={self.rank}, size={self.size}, intra_rank={self.intra_rank}, '
                f'intra_size={self.intra_size})')


class Change:
    """One step applied: ``value`` (what it applied, as said), ``undo`` (a callable that
    puts the process back, or None) and ``why_kept`` (why there is nothing to undo)."""

    __slots__ = ('step', 'value', 'undo', 'why_kept')

    def __init__(self, step: str, value: Any, undo: Optional[Callable[[], Any]] = None,
                 why_kept: Optional[str] = None) -> None:
        self.step, self.value, self.undo, self.why_kept = step, value, undo, why_kept

    def __repr__(self) -> str:
        return 'Change({!r}, {!r}{})'.format(
            self.step, self.value, '' if self.undo else f', kept: {self.why_kept}')


class Setup:
    """What ``init`` did to this process: ``settings`` (resolved, frozen), ``node``
    (``Node``, or None before a communicator), ``changes`` ({step: Change}, in ``STEPS``'
    order) and ``ours`` (whether this package's steps were asked for, not only a setting's).
    ``undo()`` undoes every change that can be, newest first (a test, a notebook)."""

    def __init__(self) -> None:
        self.settings: Optional[Settings] = None
        self.node: Optional[Node] = None
        self.changes: dict[str, Change] = {}
        self.ours = False
        self.said = False

    def applied(self) -> dict[str, Any]:
        """{step: the value said} for the steps applied so far."""
        return {step: change.value for step, change in self.changes.items()}

    def undo(self) -> list[str]:
        """Put back what can be put back, newest first; returns the steps undone. A step
        kept says why (``Change.why_kept``); every step may be applied again after."""
        undone = []
        for step in reversed(STEPS):
            change = self.changes.get(step)
            if change is not None and change.undo is not None:
                change.undo()
                undone.append(step)
                del self.changes[step]
        return undone


def applied() -> dict[str, Any]:
    """{step: what was applied} so far (empty before the first ``init``)."""
    return STATE.configured.applied() if STATE.configured is not None else {}


def setup() -> Optional[Setup]:
    """The process's ``Setup`` (what ``init`` returned), or None before the first."""
    return STATE.configured


def init(mpi_comm: Any = None, flags: Optional[Flags] = None, ours: bool = True,
         later: Iterable[str] = (), flush_denormals: bool = False,
         watchdog: Optional[float] = None, abort_hook: bool = False) -> Setup:
    """Apply the steps not yet done (module docstring); returns the process's ``Setup``.

    Collective over ``mpi_comm`` (an mpi4py communicator, default COMM_WORLD: the one a
    communicator is being made on). ``flags``: {setting: (value, option)}, an entry point's
    command line (``command_line.parse_command_line``), over the variables, for the process's
    settings where none are yet (the launcher installs its own); resolved after the abort
    hook, so a bad value ends the job in one line. ``ours``: every step (this package's
    communicators and optimizer, the launcher, a script's own call); False: only what a
    setting asks (ChainerMN's communicators). ``later``: steps left for the next call.
    ``flush_denormals``, ``watchdog``: a multi-node optimizer's options (flush-to-zero; the
    watchdog's step limit in seconds, over the settings'); ``abort_hook``: the hook without
    the other steps (this package's optimizer over a communicator of ChainerMN's)."""
    from mpi4py import MPI  # a communicator is being made: MPI starts here, if not before
    mpi_comm = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
    if STATE.configured is None:
        STATE.configured = Setup()
    setup = STATE.configured
    setup.ours = setup.ours or ours
    # Read by itself: the hook comes first, so a bad value of another setting is refused
    # through it in one line.
    hook = config.alone('abort_hook')
    if hook is True or (hook == 'auto' and (setup.ours or abort_hook)):
        _step(setup, 'abort', _abort)
    _step(setup, 'settings', lambda: _settings(flags))
    settings = setup.settings = config.current()
    pending = [s for s in STEPS[2:] if s not in later
               and _wanted(setup, settings, s, flush_denormals)
               and (s not in setup.changes or (s == 'watch' and watchdog is not None))]
    if not pending:
        return setup
    if setup.node is None or setup.node.size != mpi_comm.size:
        setup.node = Node(mpi_comm)  # collective: every rank is past MPI_Init
    node = setup.node
    for step, apply in (
            ('segment names', _segment_names),
            ('timeline', lambda: _timeline(settings)),
            ('malloc', lambda: _malloc(node)),
            ('compute', lambda: _compute(settings, node)),
            ('threads', lambda: _threads(settings, node)),
            ('fp environment', _flush_denormals),
            ('watch', lambda: _watch(mpi_comm, watchdog, settings))):
        if step in pending:
            _step(setup, step, apply)
    if 'watch' not in later:
        _say(setup, settings, node.rank)
    return setup


def _wanted(setup: Setup, settings: Settings, step: str, flush_denormals: bool) -> bool:
    """Whether ``step`` is asked for: by this package (``setup.ours``) or by a setting."""
    if step == 'fp environment':
        return bool(flush_denormals)
    if step == 'watch':
        return True  # a limit set asks; none: nothing starts (_watch)
    if step == 'timeline':
        return bool(settings['timeline'])
    if step == 'segment names':
        return setup.ours
    keys = {'malloc': ('keep_freed_memory',), 'compute': ('compute', 'precision'),
            'threads': ('threads',)}[step]
    return setup.ours or any(settings.source(k) is not None for k in keys)


def _step(setup: Setup, name: str, apply: Callable[[], Optional[Change]]) -> None:
    if name in setup.changes and name != 'watch':  # a running watchdog takes a new limit
        return
    change = apply()
    if change is not None:
        setup.changes[name] = change


def _settings(flags: Optional[Flags]) -> Change:
    if config.installed() is None:  # the launcher's, where it installed its own
        config.install(config.resolve(flags))  # the variables under the entry point's flags
    return Change('settings', True, why_kept='values resolved: nothing of the process changed')


def _abort() -> Change:
    abort.install()
    enabled = not faulthandler.is_enabled()
    if enabled:
        # The process's stderr: a test harness may have put an object without a file, or
        # none (a daemon's).
        stderr = sys.__stderr__
        try:
            faulthandler.enable(file=stderr.fileno() if stderr is not None else 2,
                                all_threads=True)
        except (AttributeError, OSError, ValueError):
            faulthandler.enable(file=2, all_threads=True)

    def undo() -> None:
        abort.uninstall()
        if enabled:
            faulthandler.disable()
    return Change('abort', True, undo)


def _segment_names() -> Change:
    return Change('segment names', devshm.unlink_mpi_segments(),
                  why_kept='the names are gone; the segments stay mapped until MPI_Finalize')


def _timeline(settings: Settings) -> Change:
    prefix = settings['timeline']
    timeline.enable(prefix, settings.source('timeline'))
    return Change('timeline', prefix, timeline.disable)


def _malloc(node: Node) -> Change:
    return Change('malloc', allocation.keep(rank=node.rank), allocation.release)


def _compute(settings: Settings, node: Node) -> Change:
    return Change('compute', compute.use(
        settings['compute'], settings.source('compute') or 'compute (default)', node.rank,
        settings['precision'], settings.source('precision') or 'precision (default)',
        settings['onednn_cache']), compute.release)


def _threads(settings: Settings, node: Node) -> Change:
    budget = threads.ensure(node, settings['threads'], settings.source('threads'))
    return Change('threads', budget, threads.release)


def _flush_denormals() -> Change:
    from chainermn_torus.optimizers import fpenv  # numba: loaded where asked for
    previous = fpenv.set_flush_denormals(True)
    return Change('fp environment', 'flush-to-zero',
                  lambda: fpenv.set_flush_denormals(previous))


def _watch(mpi_comm: Any, timeout: Optional[float], settings: Settings) -> Optional[Change]:
    dog = watchdog.start(mpi_comm, timeout, settings)
    return None if dog is None else Change('watch', dog, dog.stop)


def _say(setup: Setup, settings: Settings, rank: int) -> None:
    """Rank 0's one line: what was applied, and the settings from a flag or variable."""
    done = setup.applied()
    if setup.said or not (setup.ours or set(done) - {'settings'}):
        return  # said once; nothing said where ChainerMN's communicator got nothing
    setup.said = True
    budget = done.get('threads')
    parts = ['abort hook' if done.get('abort') else None,
             'segment names removed' if done.get('segment names') else None,
             'timeline {}'.format(done['timeline']) if done.get('timeline') else None,
             'malloc keeps freed memory' if done.get('malloc') else None,
             'compute {}'.format(done['compute']) if done.get('compute') else None,
             'threads {}'.format(budget['threads']) if budget and budget.get('threads')
             else None,
             'flush-to-zero' if done.get('fp environment') else None,
             'watchdog {:g} s'.format(done['watch'].timeout) if done.get('watch') else None]
    report.say('process: {}; settings: {}'.format(
        ', '.join(p for p in parts if p) or 'nothing applied', settings.describe()), rank)
