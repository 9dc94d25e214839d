"""The watchdog's process on each node: names the rank or node a job waits for, and ends it.

    python -m chainermn_torus.runtime.node_watch BOARD LEADER_PID   (started by runtime.watchdog)

Why a process and not a thread of a rank: a thread needs the GIL, which a rank waiting in an
mpi4py object collective (``allreduce_obj``, ChainerMN's evaluator) does not give up, and MPI,
whose progress may be what stopped. This process uses neither. It reads the node's progress
board (``runtime.progress_board``: each rank's steps, phase and time of its last progress)
and exchanges a heartbeat with the watchers of the other nodes over UDP, at the addresses
every node's leader rank shared at start (all the node's IPv4 addresses, so any network that
routes will do). Up to 32 nodes every watcher hears every other; beyond, each node is
watched by the next ``RING`` nodes, so the traffic per node stays constant.

When a rank of this node has made no progress for longer than its phase allows (start-up,
to the end of the first step: the start-up limit; a training step or an evaluation batch:
the limit; between steps and in a checkpoint: ``outside`` x the limit; after training: a
wait in a call that long), or its process has been stopped or gone for the limit, the
watcher decides who the job waits for, from every rank's row (this node's board, the other
nodes' heartbeats) and process state:

* a node whose watcher fell silent: every process there stopped, or the node was lost;
* else a rank whose process is stopped (state T), a zombie or gone;
* else the ranks in no communication call while others wait in one (computing, or blocked
  in I/O, a lock, a sleep), furthest behind first;
* else, every rank in a call: one whose position or call count is behind the others' (the
  ranks' calls do not match);
* if none of these, every rank waits in the same call (a deadlock, or a message MPI lost),
  or none waits at all (the limit is shorter than the work).

Every rank stopped is a suspension of the whole job (``scontrol suspend``): no verdict.
It prints that on one line, tells the other watchers (they end their nodes' ranks at
once), kills this node's ranks (SIGKILL: a stopped process cannot act on anything else),
so the launcher ends the job, and removes what the ranks left in /dev/shm. A launcher
(mpiexec, srun) on this node still running 3 s later waits for a node that cannot answer
(MPICH's hydra waited for a frozen node's proxy in 4 runs of 8 on the emulated cluster,
once until the harness's limit): it is ended too, so the batch script goes on.
"""
import collections
import json
import os
import select
import signal
import socket
import sys
import time

import psutil

from chainermn_torus.runtime import board_layout, devshm, progress_board as pb, startup_watch
from chainermn_torus.runtime import sweep
from chainermn_torus.runtime.atomic import remove_temporary

__all__ = ['judge', 'main', 'RING', 'MAX_ALL']

_HELD = []     # the name that says this node's ranks are being ended on purpose
RING = 4       # beyond MAX_ALL nodes, the nodes that watch each node
MAX_ALL = 32   # up to this many nodes, every watcher hears every other
ENV = 'CHAINERMN_TORUS_WATCHDOG'
STARTUP_ENV = 'CHAINERMN_TORUS_WATCHDOG_STARTUP'


def monitored(me, n):
    """The nodes node ``me`` of ``n`` watches (and whose heartbeats it expects)."""
    if n <= MAX_ALL:
        return [i for i in range(n) if i != me]
    return sorted({(me + k) % n for k in range(1, RING + 1)} - {me})


def watchers_of(me, n):
    """The nodes that watch node ``me``: where its heartbeats go."""
    if n <= MAX_ALL:
        return [i for i in range(n) if i != me]
    return sorted({(me - k) % n for k in range(1, RING + 1)} - {me})


# A rank's process state, as the kernel shows it (psutil's names -> one letter).
_STATES = {psutil.STATUS_RUNNING: 'R', psutil.STATUS_SLEEPING: 'S',
           psutil.STATUS_DISK_SLEEP: 'D', psutil.STATUS_STOPPED: 'T',
           psutil.STATUS_TRACING_STOP: 'T', psutil.STATUS_ZOMBIE: 'Z', psutil.STATUS_DEAD: 'Z'}
BROKEN = 'TZX'  # stopped, a zombie, gone: never progress, whatever the phase
_SAID = {
    'T': 'stopped (process state T: SIGSTOP, a debugger, or a suspension of part of the job)',
    'Z': 'a zombie (its process exited without ending the job; not yet reaped)',
    'X': 'gone (its process no longer exists, and the job did not end)',
    'D': 'outside communication, in uninterruptible I/O (process state D: a file system or '
         'device that does not answer)',
    'S': 'outside communication, blocked (sleeping: I/O, a lock, a sleep)',
    'R': 'computing outside communication',
}

# One rank as the watchers see it (this node's from its board, the others' from heartbeats):
# position, phase, seconds since progress, process state, whether its main thread is in a
# communication call, which (a code of progress_board.CALLS), seconds since it entered or
# left it, the calls made since the phase's start, the same for the communication thread,
# and seconds the process has been seen stopped.
Seen = collections.namedtuple('Seen', 'rank pos phase age state inside call call_age calls '
                                      'bg_inside bg_call held')


def process_state(pid):
    """R, S, D, T, Z, or X (no such process), as /proc shows ``pid``."""
    try:
        return _STATES.get(psutil.Process(pid).status(), 'S')
    except psutil.NoSuchProcess:
        return 'X'
    except psutil.Error:
        return '?'


def summary(rows, now, states=None, held=None):
    """This node's rows as ``Seen`` lists (JSON for the heartbeats). ``states``: pid ->
    process state; ``held``: pid -> seconds seen stopped."""
    states, held = states or {}, held or {}
    out = []
    for row in rows:
        pid = int(row[pb.PID])
        if pid == 0:
            continue
        progress = int(row[pb.PROGRESS_NS])
        call_ns = int(row[pb.CALL_NS])
        out.append(list(Seen(
            int(row[pb.RANK]), list(pb.position(row)), int(row[pb.PHASE]),
            (now - progress) / 1e9 if progress else None, states.get(pid, '?'),
            int(row[pb.INSIDE]), int(row[pb.CALL]), (now - call_ns) / 1e9 if call_ns else None,
            int(row[pb.CALLS_MADE]), int(row[pb.BG_INSIDE]), int(row[pb.BG_CALL]),
            held.get(pid, 0.0))))
    return out


def _seen(rows):
    return [Seen(*r) for r in rows]


def _where(phase, pos):
    finished, _, count = pos
    return board_layout.where(phase, finished, count)


def _first_step(seen):
    return seen.pos[0] <= 0


def _trigger(board, seen):
    """(seconds, limit, why) when ``seen`` (a rank of this node) is past its limit, else
    None."""
    if seen.phase == pb.FINISHED:
        return None
    if seen.state in BROKEN and seen.held > board.limit_s:
        return seen.held, board.limit_s, 'stopped'
    limit = board.limit(seen.phase, first_step=_first_step(seen))
    if limit is None:
        return None
    if seen.phase == pb.AFTER:  # after training only a wait in a call is a stall
        if seen.inside and seen.call_age is not None and seen.call_age > limit:
            return seen.call_age, limit, 'after'
        return None
    if seen.age is not None and seen.age > limit:
        return seen.age, limit, 'phase'
    return None


def _limit_text(board, phase, seen, why):
    if why == 'stopped':
        return 'a stopped or vanished process is a stall after the step limit, {:g} s, ' \
            'set by {}'.format(board.limit_s, ENV)
    if phase == pb.STARTUP or (phase == pb.STEP and _first_step(seen)):
        return 'start-up limit {:g} s, set by {} (default: the larger of 900 s and the ' \
            'step limit)'.format(board.startup_s, STARTUP_ENV)
    if phase in (pb.STEP, pb.EVALUATION, pb.FINAL_EVALUATION):
        return 'limit {:g} s per step or evaluation batch, set by {}'.format(
            board.limit_s, ENV)
    return 'limit {:g} s between steps, in checkpoints and after training ({} x {})'.format(
        board.limit_s * board.outside, board.outside, ENV)


def _doing(seen):
    """What a rank is doing, in words: its state, and the call it is in or was last in."""
    if seen.state in BROKEN:
        text = _SAID[seen.state]
        if seen.state == 'T' and seen.held:
            text += ' for {:.0f} s'.format(seen.held)
    elif seen.inside:
        text = 'waiting in {}'.format(pb.call_name(seen.call))
    else:
        text = _SAID.get(seen.state, 'outside communication')
        if seen.call and seen.call_age is not None:
            text += ' for {:.0f} s since its last call ({})'.format(
                seen.call_age, pb.call_name(seen.call))
    if seen.state in BROKEN and seen.inside:
        text += ', inside {}'.format(pb.call_name(seen.call))
    if seen.bg_inside and not seen.inside:
        text += ' (its communication thread in {})'.format(pb.call_name(seen.bg_call))
    return text


def _name(entries):
    head = '; '.join('rank {} on {}, {}, {}'.format(s.rank, h, _doing(s), _where(s.phase,
                                                                                tuple(s.pos)))
                     for s, h in entries[:8])
    if len(entries) > 8:
        head += '; and {} more rank(s) alike'.format(len(entries) - 8)
    return head


def _waiters(entries):
    """"ranks 0, 2 (vm) wait in multi_node_mean_grad" for up to 4 calls."""
    calls = collections.OrderedDict()
    for s, h in entries:
        calls.setdefault(pb.call_name(s.call), []).append((s, h))
    parts = []
    for call, who in list(calls.items())[:4]:
        hosts = sorted({h for _, h in who})
        ranks = _ranks([[s.rank] for s, _ in who])
        longest = max((s.call_age or 0.0) for s, _ in who)
        parts.append('{} {} ({}) wait{} in {} ({:.0f} s)'.format(
            'rank' if len(who) == 1 else 'ranks', ranks, ', '.join(hosts[:4]),
            's' if len(who) == 1 else '', call, longest))
    return '; '.join(parts)


def judge(board, host, local, peers, now, silent_s):
    """The verdict line, or None while nothing is stalled.

    ``local``: this node's summary rows; ``peers``: {node: {'host', 'heard' (ns), 'rows',
    'gone'}} for the nodes this one watches."""
    local = _seen(local)
    stalled = [(s, t) for s, t in ((s, _trigger(board, s)) for s in local) if t]
    # Only a node heard from before can fall silent: one never heard is not reachable by
    # UDP from here (a firewall), which says nothing about its ranks (see Watcher.unheard).
    silent = sorted(((n, p) for n, p in peers.items()
                     if not p['gone'] and p.get('seen', True)
                     and (now - p['heard']) / 1e9 > silent_s),
                    key=lambda item: item[0])
    running = any(s.phase != pb.FINISHED for s in local)
    # A node silent for the limit is a verdict by itself, whatever this node's ranks do:
    # they may be in a checkpoint, with its longer limit, waiting for that node.
    lost = running and any((now - p['heard']) / 1e9 > board.limit_s for _, p in silent)
    if not stalled and not lost:
        return None
    everyone = [(s, host) for s in local]
    for p in peers.values():
        everyone += [(s, p['host']) for s in _seen(p['rows'])]
    active = [(s, h) for s, h in everyone if s.phase != pb.FINISHED]
    if not silent and active and all(s.state == 'T' for s, _ in active):
        return None  # every rank stopped: the job is suspended (scontrol suspend), not stuck
    if stalled:
        observer, (seconds, limit, why) = max(stalled, key=lambda st: st[1][0])
        limits = _limit_text(board, observer.phase, observer, why)
    else:
        observer, why = None, 'silent'
        limits = 'heartbeats missed for longer than the limit of {:g} s, set by {}'.format(
            board.limit_s, ENV)
    if silent:
        cause = '; '.join(
            'node {} (ranks {}) silent for {:.0f} s: every process there stopped, or the node '
            'was lost'.format(p['host'], _ranks(p['rows']) or '?', (now - p['heard']) / 1e9)
            for _, p in silent[:8])
        if len(silent) > 8:
            cause += '; and {} more node(s)'.format(len(silent) - 8)
        return _line(cause, limits, observer, host, None)
    culprits = _culprits(active, board)
    if culprits is None:
        return _line(_no_culprit(active), limits, observer, host, None)
    waiting = [(s, h) for s, h in active if s.inside and (s, h) not in culprits]
    cause = _name(culprits)
    if waiting:
        cause += '; ' + _waiters(waiting) + ' for it'
    return _line(cause, limits, observer, host, culprits)


def _culprits(active, board):
    """The ranks the others wait for, or None when no rank holds the others up."""
    broken = [e for e in active if e[0].state in BROKEN]
    if broken:
        return sorted(broken, key=lambda e: e[0].rank)
    outside = [e for e in active if not e[0].inside]
    waiting = [e for e in active if e[0].inside]
    if outside and waiting:  # the ranks in no call, furthest behind first
        return sorted(outside, key=lambda e: (tuple(e[0].pos), e[0].rank))
    if waiting:  # every rank in a call: one behind the others is in the wrong one
        low = min((tuple(s.pos), s.calls) for s, _ in waiting)
        behind = [e for e in waiting if (tuple(e[0].pos), e[0].calls) == low]
        if len(behind) < len(waiting):
            return sorted(behind, key=lambda e: e[0].rank)
        return None
    # No rank in a call: the ones past their own limit are stuck in their work, unless
    # every rank is (then no rank holds the others up).
    late = [e for e in active if _trigger(board, e[0])]
    if late and len(late) < len(active):
        return sorted(late, key=lambda e: (tuple(e[0].pos), e[0].rank))
    return None


def _no_culprit(active):
    """When no rank holds the others up: every rank in the same call, or none in any."""
    s = active[0][0]
    if all(x.inside for x, _ in active):
        calls = sorted({pb.call_name(x.call) for x, _ in active})
        return ('none: every rank waits in {} {}, none behind another (a deadlock, or a '
                'message MPI lost)'.format(' / '.join(calls), _where(s.phase, tuple(s.pos))))
    return ('none: no rank waits for another; every rank has been outside communication '
            '{}, past the limit (the limit is shorter than this work, or every rank is stuck '
            'in it)'.format(_where(s.phase, tuple(s.pos))))


def _line(cause, limits, observer, host, culprits):
    seen = ''
    if observer is not None and (culprits is None or
                                 all(observer.rank != s.rank for s, _ in culprits)):
        seen = '; noticed on {}: rank {} {} for {:.0f} s'.format(
            host, observer.rank, 'waited in ' + pb.call_name(observer.call)
            if observer.inside else 'made no progress', observer.call_age
            if observer.inside and observer.call_age is not None else (observer.age or 0.0))
    return ('chainermn_torus watchdog: the job waits for {} ({}{}). Ending the job instead of '
            'waiting for the batch time limit.'.format(cause, limits, seen))


def _ranks(rows):
    ranks = sorted(r[0] for r in rows)
    if not ranks:
        return ''
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return '{}-{}'.format(ranks[0], ranks[-1])
    return ', '.join(map(str, ranks))


def _end_ranks(pids):
    """SIGKILL this node's ranks, wait for them, remove what they left in /dev/shm. Their
    own watchers stay silent (``startup_watch.end_ranks``: their canaries first; and
    ``startup_watch.ending``, held until this process exits)."""
    _HELD.append(startup_watch.ending(*pids))
    startup_watch.end_ranks(pids)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and any(sweep.pid_alive(p) for p in pids):
        time.sleep(0.05)
    try:
        devshm.sweep()
    except OSError:
        pass


# Launchers whose exit ends the job step; the batch script above them is left alone.
LAUNCHERS = ('mpiexec', 'mpiexec.hydra', 'mpirun', 'prterun', 'srun', 'orterun')
LAUNCHER_GRACE_S = 3.0


def _launcher_of(pid):
    """The MPI launcher this rank descends from, where it runs on this node, or None."""
    try:
        for parent in psutil.Process(pid).parents():
            if parent.name() in LAUNCHERS:
                return parent
    except psutil.Error:
        pass
    return None


def _end_launcher(launcher):
    """A launcher still waiting LAUNCHER_GRACE_S after the ranks were killed is waiting
    for a node that cannot answer (a frozen node's proxy, seen with MPICH's hydra): end it,
    so that the job step and the batch script go on. Only on the node it runs on; silently,
    as the job's output streams are closed by then (the verdict line was said)."""
    if launcher is None:
        return
    try:
        launcher.wait(LAUNCHER_GRACE_S)
        return
    except psutil.TimeoutExpired:
        pass
    except psutil.Error:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            launcher.send_signal(sig)
            launcher.wait(3.0)
            return
        except psutil.TimeoutExpired:
            continue
        except psutil.Error:
            return


class Watcher(object):

    def __init__(self, board_path, leader_pid):
        self.board = pb.Board(board_path)
        self.leader = leader_pid
        self.launcher = _launcher_of(leader_pid)
        self.host = socket.gethostname()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(('0.0.0.0', 0))
        self.period = min(1.0, self.board.limit_s / 4)
        self._deferred = None  # when a verdict was first left to a lower node
        self._stopped_since = {}  # pid -> when it was first seen stopped (or gone), ns
        self.leader_done = False  # the leader rank finished: end once every rank has
        # Silent: three heartbeats missed, and at least 2 s (a loaded node's scheduler).
        self.silent_s = max(3 * self.period, 2.0)

    def configure(self, table, me):
        self.me = me
        n = len(table)
        now = pb.now_ns()
        self.started = now
        self.peers = {i: {'host': table[i]['host'], 'heard': now, 'rows': [], 'gone': False,
                          'seen': False} for i in monitored(me, n)}
        self._warned = False
        self.targets = [(a, table[i]['port']) for i in watchers_of(me, n)
                        for a in table[i]['addrs']]

    def send(self, message):
        data = json.dumps(message).encode()
        for target in self.targets:
            try:
                self.sock.sendto(data, target)
            except OSError:
                pass  # an address of the peer this node cannot reach

    def receive(self):
        while True:
            try:
                data, _ = self.sock.recvfrom(65536)
            except BlockingIOError:
                return None
            try:
                msg = json.loads(data.decode())
                node = int(msg['node'])
            except (ValueError, KeyError, TypeError):
                continue
            if msg.get('kind') == 'verdict':
                return msg
            peer = self.peers.get(node)
            if peer is None:
                continue
            peer['heard'] = pb.now_ns()
            peer['seen'] = True
            if msg.get('kind') == 'bye':
                peer['gone'] = True
            else:
                peer['rows'] = msg.get('rows', [])

    def run(self):
        self.sock.setblocking(False)
        stdin = sys.stdin.fileno()
        next_beat = 0.0
        while True:
            if os.getppid() != self.leader:
                return self.stop()  # the leader rank is gone: the job is ending
            timeout = max(0.0, next_beat - time.monotonic())
            ready, _, _ = select.select([self.sock, stdin], [], [], timeout)
            if stdin in ready:
                line = sys.stdin.readline()
                if not line:
                    return self.stop()  # the leader's end of the pipe closed: it is gone
                self.leader_done = line.strip() == 'stop' or self.leader_done
            if self.sock in ready:
                verdict = self.receive()
                if verdict is not None:  # another node found the job stalled: end ours
                    return self.end()
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + self.period
            now = pb.now_ns()
            board_rows = self.board.rows()
            if self.leader_done and all(r[pb.PHASE] == pb.FINISHED or not r[pb.PID]
                                        for r in board_rows):
                return self.stop()
            rows = summary(board_rows, now, *self.states(board_rows, now))
            self.send({'kind': 'beat', 'node': self.me, 'rows': rows})
            self.unheard(now)
            text = judge(self.board, self.host, rows, self.peers, now, self.silent_s)
            if text is not None and self._defer(now):
                continue  # a lower node that hears the same says it (one line, not N)
            if text is not None:
                sys.stderr.write(text + '\n')  # one write: it stays one line
                sys.stderr.flush()
                for _ in range(3):
                    self.send({'kind': 'verdict', 'node': self.me})
                time.sleep(0.5)  # let the launcher forward the line before the ranks go
                return self.end()

    def states(self, rows, now):
        """(pid -> process state, pid -> seconds seen stopped or gone) of this node's
        ranks still running."""
        states, held = {}, {}
        for r in rows:
            pid = int(r[pb.PID])
            if not pid or r[pb.PHASE] == pb.FINISHED:
                continue
            states[pid] = state = process_state(pid)
            if state in BROKEN:
                since = self._stopped_since.setdefault(pid, now)
                held[pid] = (now - since) / 1e9
            else:
                self._stopped_since.pop(pid, None)
        return states, held

    def unheard(self, now):
        """Once, a grace after the start: say which watched nodes were never heard from
        (UDP between nodes blocked). Their ranks are still watched through the ranks that
        wait for them; only a node frozen whole goes unnamed. Said by the first node only."""
        if self._warned or (now - self.started) / 1e9 < max(5.0, 4 * self.period):
            return
        self._warned = True
        never = sorted(p['host'] for p in self.peers.values() if not p['seen'])
        if never and self.me == min([self.me] + list(self.peers)):
            sys.stderr.write(
                'chainermn_torus watchdog: no heartbeat from the watcher(s) of {} node(s) ({}{}) '
                'at {}: UDP between nodes seems blocked; stalled ranks are still found, a node '
                'that freezes whole is not named\n'.format(
                    len(never), ', '.join(never[:8]), ', ...' if len(never) > 8 else '',
                    self.host))
            sys.stderr.flush()

    def _defer(self, now):
        """Whether to leave the verdict to a lower-numbered node that is still heard, for
        up to two heartbeats: every node sees a stall at about the same moment, and one
        line says it better than hundreds."""
        lower = [i for i, p in self.peers.items()
                 if i < self.me and not p['gone'] and (now - p['heard']) / 1e9 <= self.silent_s]
        if not lower:
            return False
        if self._deferred is None:
            self._deferred = now
        return (now - self._deferred) / 1e9 < 2 * self.period

    def end(self):
        rows = self.board.rows()
        live = [i for i, r in enumerate(rows) if r[pb.PID] and r[pb.PHASE] != pb.FINISHED]
        pids = [int(rows[i][pb.PID]) for i in live]
        _end_ranks(pids)
        # Who was writing a checkpoint, read once the ranks are gone: a rank that began one
        # while they were being ended is on the board now (runtime.rank_watch likewise).
        writing = [(pid, self.board.writing_to(i)) for i, pid in zip(live, pids)]
        self.board.close(remove=True)
        for pid, directory in writing:  # a writer killed halfway leaves nothing behind
            if directory and not sweep.pid_alive(pid):
                remove_temporary(directory, pid)
        # The launcher reads this process's stdout and stderr (the leader rank's, inherited)
        # until they close: let go of them before waiting for it.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        _end_launcher(self.launcher)
        return 0

    def stop(self):
        """Training ended here (or the leader rank is gone): say goodbye, remove the board."""
        for _ in range(3):  # UDP: said three times, so that no watcher waits for us
            self.send({'kind': 'bye', 'node': getattr(self, 'me', -1)})
        self.board.close(remove=True)
        return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    board_path, leader = argv[0], int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the ranks' to handle
    watcher = Watcher(board_path, leader)
    sys.stdout.write('{}\n'.format(watcher.sock.getsockname()[1]))
    sys.stdout.flush()
    setup = json.loads(sys.stdin.readline())
    watcher.configure(setup['nodes'], setup['me'])
    return watcher.run()


if __name__ == '__main__':
    sys.exit(main())
