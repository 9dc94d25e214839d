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

When a rank of this node has made no progress for longer than its phase allows (a training
step or an evaluation batch: the limit; between steps and in a checkpoint: ``outside`` x
the limit; before the first step: never), the watcher decides who the job waits for:

* a node whose watcher fell silent: every process there stopped, or the node was lost;
* else the ranks furthest behind (steps finished, then where in the evaluation or
  checkpoint that follows, then evaluation batches), named with their host and phase;
* if no rank is behind another, every rank waits in the same call.

It prints that on one line, tells the other watchers (they end their nodes' ranks at
once), kills this node's ranks (SIGKILL: a stopped process cannot act on anything else),
so the launcher ends the job, and removes what the ranks left in /dev/shm. A launcher
(mpiexec, srun) on this node still running 3 s later waits for a node that cannot answer
(MPICH's hydra waited for a frozen node's proxy in 4 runs of 8 on the emulated cluster,
once until the harness's limit): it is ended too, so the batch script goes on.
"""
import json
import os
import select
import signal
import socket
import sys
import time

import psutil

from chainermn_torus.runtime import devshm, progress_board as pb

__all__ = ['judge', 'main', 'RING', 'MAX_ALL']

RING = 4       # beyond MAX_ALL nodes, the nodes that watch each node
MAX_ALL = 32   # up to this many nodes, every watcher hears every other
ENV = 'CHAINERMN_TORUS_WATCHDOG'


def addresses():
    """This node's IPv4 addresses, loopback last (a one-node job still reaches itself)."""
    found = []
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and a.address not in found:
                found.append(a.address)
    return sorted(found, key=lambda a: a.startswith('127.'))


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


def summary(rows, now):
    """This node's rows for a heartbeat: [rank, position, phase, seconds since progress]."""
    out = []
    for row in rows:
        if row[pb.PID] == 0:
            continue
        out.append([int(row[pb.RANK]), list(pb.position(row)), int(row[pb.PHASE]),
                    (now - int(row[pb.PROGRESS_NS])) / 1e9 if row[pb.PROGRESS_NS] else None])
    return out


def _where(phase, pos):
    finished, _, count = pos
    if phase == pb.STEP:
        return 'in training step {}'.format(finished + 1)
    if phase == pb.EVALUATION:
        return 'in the evaluation after step {} (batch {})'.format(finished, count)
    if phase == pb.CHECKPOINT:
        return 'writing the checkpoint after step {}'.format(finished)
    if phase == pb.BETWEEN:
        return 'between steps {} and {} (data, extensions)'.format(finished, finished + 1)
    return pb.PHASES.get(phase, 'phase {}'.format(phase))


def judge(board, host, local, peers, now, silent_s):
    """The verdict line, or None while nothing is stalled.

    ``local``: this node's summary rows; ``peers``: {node: {'host', 'heard' (ns), 'rows',
    'gone'}} for the nodes this one watches."""
    stalled = []
    for rank, pos, phase, age in local:
        limit = board.limit(phase)
        if limit is not None and age is not None and age > limit:
            stalled.append((rank, phase, pos, age, limit))
    # Only a node heard from before can fall silent: one never heard is not reachable by
    # UDP from here (a firewall), which says nothing about its ranks (see Watcher.unheard).
    silent = sorted(((n, p) for n, p in peers.items()
                     if not p['gone'] and p.get('seen', True)
                     and (now - p['heard']) / 1e9 > silent_s),
                    key=lambda item: item[0])
    running = any(phase != pb.FINISHED for _, _, phase, _ in local)
    # A node silent for the limit is a verdict by itself, whatever this node's ranks do:
    # they may be in a checkpoint, with its longer limit, waiting for that node.
    lost = running and any((now - p['heard']) / 1e9 > board.limit_s for _, p in silent)
    if not stalled and not lost:
        return None
    if stalled:
        rank, phase, pos, age, limit = max(stalled, key=lambda s: s[3])
        observer = 'rank {} ({}) has made no progress for {:.0f} s {} (limit {:g} s there, ' \
            'set by {})'.format(rank, host, age, _where(phase, tuple(pos)), limit, ENV)
    else:
        rank, phase, limit = None, pb.STEP, board.limit_s
        observer = 'heartbeats missed for longer than the limit of {:g} s, set by {}'.format(
            limit, ENV)
    culprits = set()
    if silent:
        cause = '; '.join(
            'node {} (ranks {}) silent for {:.0f} s: every process there stopped, or the node '
            'was lost'.format(p['host'], _ranks(p['rows']) or '?', (now - p['heard']) / 1e9)
            for _, p in silent[:8])
        if len(silent) > 8:
            cause += '; and {} more node(s)'.format(len(silent) - 8)
    else:
        everyone = [(r, tuple(po), ph, a, host) for r, po, ph, a in local]
        for p in peers.values():
            everyone += [(r, tuple(po), ph, a, p['host']) for r, po, ph, a in p['rows']]
        active = [e for e in everyone if e[2] not in (pb.FINISHED, pb.NOT_ARMED)]
        if not active:
            active = everyone
        low = min(e[1] for e in active)
        behind = sorted(e for e in active if e[1] == low)
        if len(behind) == len(active):
            cause = 'none: every rank is {}, none behind another, all wait in the same call ' \
                '(a deadlock, or a message MPI lost)'.format(_where(behind[0][2], low))
        else:
            cause = '; '.join('rank {} on {}, stopped {}, {} s since its last progress'.format(
                r, h, _where(ph, po), '?' if a is None else '{:.0f}'.format(a))
                for r, po, ph, a, h in behind[:8])
            if len(behind) > 8:
                cause += '; and {} more rank(s) at the same point'.format(len(behind) - 8)
            culprits = {r for r, _, _, _, _ in behind}
    seen = '' if rank in culprits else ' ({})'.format(observer)
    limits = '' if rank not in culprits else ' (limit {:g} s {}, set by {})'.format(
        limit, 'per step or evaluation batch' if phase in (pb.STEP, pb.EVALUATION) else
        'between steps and in checkpoints', ENV)
    return ('chainermn_torus watchdog: the job waits for {}{}{}. Ending the job instead of '
            'waiting for the batch time limit.'.format(cause, limits, seen))


def _ranks(rows):
    ranks = sorted(r[0] for r in rows)
    if not ranks:
        return ''
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return '{}-{}'.format(ranks[0], ranks[-1])
    return ', '.join(map(str, ranks))


def _end_ranks(pids):
    """SIGKILL this node's ranks, wait for them, remove what they left in /dev/shm."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and any(devshm.pid_alive(p) for p in pids):
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
                if not line or line.strip() == 'stop':
                    return self.stop()
            if self.sock in ready:
                verdict = self.receive()
                if verdict is not None:  # another node found the job stalled: end ours
                    return self.end()
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + self.period
            now = pb.now_ns()
            rows = summary(self.board.rows(), now)
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
        pids = [int(r[pb.PID]) for r in self.board.rows()
                if r[pb.PID] and r[pb.PHASE] != pb.FINISHED]
        self.board.close(remove=True)
        _end_ranks(pids)
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
