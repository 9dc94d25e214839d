"""Per-iteration phase timeline on every rank, written as a Chrome trace (like Horovod's).

Turn it on with ``CHAINERMN_TORUS_TIMELINE=PREFIX`` (or ``timeline.enable(PREFIX)``, or the
examples' ``--timeline PREFIX``). Each rank records the phases it goes through:

  forward_backward, update, wait (double buffering)   the multi-node optimizer;
  pack, reduce_scatter, allreduce, allgather / put,   the communicators, per segment;
  reduce (shm), gather (shm), tail

and writes ``PREFIX.rank<R>.json`` when the process exits (or on ``flush()``), and also
when the job ends abnormally: before the abort hook's or the watchdog's MPI_Abort, which
is also how SIGTERM ends a rank (what batch systems send at the time limit; see abort).

Ranks that never get there (the peers MPI_Abort kills, kill -9, a node lost) keep what
they streamed: a thread appends new events to ``PREFIX.rank<R>.events`` (JSON lines,
a header naming the rank, host and rank count first) every ``STREAM_S`` seconds, so such
an end loses at most the last half second. The complete ``.json`` replaces the log at a
normal or aborting exit. ``timeline merge`` uses the log where the ``.json`` is missing
and says which ranks' files are missing or cut short. Then
(``chainermn_torus.tools.timeline``)

    chainermn-torus timeline merge PREFIX -o trace.json   # open in chrome://tracing, Perfetto
    chainermn-torus timeline plot PREFIX -o timeline.png  # matplotlib, a few iterations

Times are wall-clock microseconds (perf_counter offset to time.time once per process), so
ranks of one host line up exactly and ranks of different hosts as well as their clocks agree.
When the timeline is off, a phase costs one global lookup and a no-op context manager.
"""
import atexit
import json
import os
import socket
import sys
import threading
import time

from chainermn_torus import config, settings_table
from chainermn_torus.errors import ConfigError, UnsafePath
from chainermn_torus.process import STATE
from chainermn_torus.runtime.files import held

__all__ = ['enable', 'disable', 'phase', 'timed', 'flush', 'emergency_flush', 'trace_events',
           'active', 'TIMELINE_ENV']

TIMELINE_ENV = settings_table.SETTINGS['timeline'].env


def active():
    """The process's Timeline (``process.STATE.timeline``), or None."""
    return STATE.timeline


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NULL = _Null()


class _Span:
    __slots__ = ('tl', 'name', 't0')

    def __init__(self, tl, name):
        self.tl, self.name = tl, name

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.tl.add(self.name, self.t0, time.perf_counter())
        return False


STREAM_S = 0.5  # the most an end without a last write loses


class Timeline:

    def __init__(self, prefix, place):
        self.prefix = prefix
        # The prefix's directory, walked and held (runtime.files.held): every file is made
        # inside it by name, never through a link or a directory swapped after the start.
        self.place, self.base = place, os.path.basename(prefix)
        self.offset = time.time() - time.perf_counter()
        self.events = []
        self.iteration = 0
        self._tids = {}
        self._lock = threading.Lock()
        self._streamed = 0       # events already in the log
        self._log = None         # the log's path, once its header is written
        self._stream_lock = threading.Lock()
        self._closed = False

    # --- the log a killed rank leaves ---------------------------------------------------
    def stream(self):
        """Append the events recorded since the last call to PREFIX.rank<R>.events."""
        with self._stream_lock:
            if self._closed:
                return
            end = len(self.events)
            if end == self._streamed and self._log is not None:
                return
            lines, log = [], self._log
            if log is None:
                rank = _rank()
                log = f'{self.base}.rank{rank}.events'
                lines.append(json.dumps({'timeline': 1, 'rank': rank, 'ranks': _size(),
                                         'host': socket.gethostname(), 'pid': os.getpid(),
                                         'offset': self.offset}))
            for name, t0, t1, tid, it in self.events[self._streamed:end]:
                lines.append(json.dumps([name, round((t0 + self.offset) * 1e6, 1),
                                         round((t1 - t0) * 1e6, 1), tid, it]))
            # Never through a link planted under the predictable name: made new, then
            # appended to only while it is this process's own file.
            with os.fdopen(self.place.create(log, 0o644, replace_own=True) if self._log is None
                           else self.place.open_append(log), 'w') as f:
                f.write('\n'.join(lines) + '\n')
            self._log, self._streamed = log, end

    def close_log(self):
        """The complete .json is written: the log is no longer needed."""
        with self._stream_lock:
            self._closed = True
            if self._log is not None:
                try:
                    self.place.remove_own(self._log)
                except OSError:
                    pass

    def _tid(self):
        ident = threading.get_ident()
        tid = self._tids.get(ident)
        if tid is None:
            with self._lock:
                tid = self._tids.setdefault(ident, len(self._tids))
        return tid

    def span(self, name):
        return _Span(self, name)

    def add(self, name, t0, t1):
        # list.append is atomic under the GIL: the double-buffering thread records too.
        self.events.append((name, t0, t1, self._tid(), self.iteration))

    def next_iteration(self):
        self.iteration += 1

    def trace(self, rank):
        return trace_events(rank, socket.gethostname(), self._tids.values(), (
            (name, (t0 + self.offset) * 1e6, (t1 - t0) * 1e6, tid, it)
            for name, t0, t1, tid, it in self.events))

    def write(self):
        rank = _rank()
        name = f'{self.base}.rank{rank}.json'
        trace = {'traceEvents': self.trace(rank), 'displayTimeUnit': 'ms'}
        # A reader never sees half a file; tools.timeline names a left '.tmp' unfinished.
        self.place.write_atomic(name, lambda f: json.dump(trace, f), mode='w', perm=0o644,
                                tmp=name + '.tmp')
        return f'{self.prefix}.rank{rank}.json'


def trace_events(rank, host, tids, spans):
    """A rank's Chrome trace events: its name, its threads', and ``spans`` (name, start
    and duration in microseconds, thread, iteration). The one format of the .json files and
    of the logs' merge (tools.timeline)."""
    events = [{'name': 'process_name', 'ph': 'M', 'pid': rank,
               'args': {'name': f'rank {rank} ({host})'}}]
    for tid in sorted(set(tids)):
        events.append({'name': 'thread_name', 'ph': 'M', 'pid': rank, 'tid': tid,
                       'args': {'name': 'main' if tid == 0 else 'communication'}})
    for name, ts, dur, tid, it in spans:
        events.append({'name': name, 'cat': _category(name), 'ph': 'X', 'pid': rank,
                       'tid': tid, 'ts': ts, 'dur': dur, 'args': {'iteration': it}})
    return events


def _category(name):
    if name in ('forward_backward', 'update', 'wait'):
        return 'optimizer'
    return 'communication'


def _size():
    return _world(('PMI_SIZE', 'OMPI_COMM_WORLD_SIZE', 'PMIX_SIZE', 'SLURM_NTASKS'), 'size',
                  None)


def _streamer(tl):
    """Daemon thread: stream ``tl``'s new events every STREAM_S while it is the active one.
    It holds no lock while sleeping, and waits in the kernel: MPI calls release the GIL."""
    while STATE.timeline is tl and not tl._closed:
        time.sleep(STREAM_S)
        try:
            tl.stream()
        except Exception as e:  # noqa: BLE001 -- a full disk must not end the training
            sys.stderr.write(f'chainermn_torus: timeline log stopped: {_unprefixed(e)}\n')
            return


def _unprefixed(error):
    return str(error).replace('chainermn_torus: ', '', 1)


def _rank():
    return _world(('PMI_RANK', 'OMPI_COMM_WORLD_RANK', 'PMIX_RANK', 'SLURM_PROCID'), 'rank', 0)


def _world(keys, attr, default):
    """COMM_WORLD's rank or size: from the launcher's environment (before MPI_Init and
    after MPI_Finalize too), else from MPI, else ``default``."""
    for key in keys:
        try:
            return int(os.environ[key])
        except (KeyError, ValueError):
            continue
    try:
        from mpi4py import MPI
        if MPI.Is_initialized() and not MPI.Is_finalized():
            return getattr(MPI.COMM_WORLD, attr)
    except ImportError:
        pass
    return default


def enable(prefix, source='the timeline prefix'):
    """Record from now on; written to PREFIX.rank<R>.json at exit (or on flush())."""
    directory = os.path.dirname(os.path.abspath(prefix))
    if STATE.timeline is None or STATE.timeline.prefix != prefix:
        # Walked and judged as an output directory is (sticky and shared allowed as the
        # last; nothing on the way another user's), then held.
        try:
            place = held.walk(directory, 'the timeline directory', shared=True,
                              trusted=config.current()['trust_out_dir'])
        except UnsafePath:
            raise
        except OSError as e:
            raise ConfigError('chainermn_torus: {} {!r} must be a path in a writable '
                              'directory: {} {}'.format(
                                  source, prefix, directory, 'does not exist'
                                  if isinstance(e, FileNotFoundError) else
                                  f'cannot be entered ({e.strerror or e})')) from None
        if not os.access(directory, os.W_OK):
            place.close()
            raise ConfigError(f'chainermn_torus: {source} {prefix!r} must be a path in a writable '
                              f'directory: {directory} is not writable')
        STATE.timeline = Timeline(prefix, place)
        atexit.register(_write_at_exit, STATE.timeline)
        threading.Thread(target=_streamer, args=(STATE.timeline,), daemon=True,
                         name='chainermn_torus-timeline').start()
    return STATE.timeline


_EMERGENCY = threading.Lock()  # one emergency write per process, whoever asks first


def emergency_flush():
    """Write what the timeline holds, if on, before the process is torn down (abort, a
    signal); never raises, and writes once even when several paths ask at the same time."""
    tl = STATE.timeline
    if tl is None or not tl.events or not _EMERGENCY.acquire(blocking=False):
        return None
    try:
        path = tl.write()
        tl.close_log()
        return path
    except Exception as e:  # noqa: BLE001 -- the job is ending for another reason
        sys.stderr.write(f'chainermn_torus: could not write the timeline: {e}\n')
        return None



def disable():
    STATE.timeline = None


def _write_at_exit(tl):
    if tl.events:
        try:
            tl.write()
            tl.close_log()
        except OSError as e:
            sys.stderr.write(f'chainermn_torus: could not write the timeline: {_unprefixed(e)}\n')


def phase(name):
    """``with phase('allreduce'):`` records the block when the timeline is on."""
    tl = STATE.timeline
    return _NULL if tl is None else tl.span(name)


class timed:
    """``with timed('update', stats):`` the one way a span is timed: the block's seconds
    (two clock reads) are added to ``stats[key or name]`` (with ``count``, 1 to
    ``stats[count]`` per block), and it is recorded on the timeline when one is on, from the
    same two readings. Also when the block raises."""
    __slots__ = ('name', 'stats', 'key', 'count', 't0')

    def __init__(self, name, stats, key=None, count=None):
        self.name, self.stats, self.key, self.count = name, stats, key or name, count

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        t1 = time.perf_counter()
        self.stats[self.key] += t1 - self.t0
        if self.count is not None:
            self.stats[self.count] += 1
        tl = STATE.timeline
        if tl is not None and self.name is not None:
            tl.add(self.name, self.t0, t1)
        return False


def next_iteration():
    tl = STATE.timeline
    if tl is not None:
        tl.next_iteration()


def flush():
    """Write this rank's file now (it is written again, complete, at exit)."""
    return None if STATE.timeline is None else STATE.timeline.write()
