"""The watchdog's process on each node: names the rank or node a job waits for, and ends it.

    python -m chainermn_torus.runtime.watch.node_watch BOARD LEADER_PID
                                                        (started by the watchdog)

Why a process and not a thread of a rank: a thread needs the GIL, which a rank waiting in an
mpi4py object collective (``allreduce_obj``, ChainerMN's evaluator) does not give up, and MPI,
whose progress may be what stopped. This process uses neither. Once per heartbeat period it
reads the node's progress board (``runtime.watch.progress_board``: each rank's steps, phase and
time of its last progress) and its ranks' process states (``watchers.processes``), exchanges
heartbeats with the watchers of the other nodes (``heartbeat``: UDP), and asks the verdict
(``verdict.judge``, a pure function of those rows) whether the job is stalled and on whom.
With a verdict it prints that on one line, tells the other watchers (they end their nodes'
ranks at once) and ends this node's ranks, what they left, and a launcher that waits for a
node that cannot answer (``node_end``).

This module is the loop and its command line; each of those jobs is its own module.
"""
import json
import os
import select
import signal
import socket
import sys
import time

from chainermn_torus.watchers import board_layout, processes
from chainermn_torus.runtime.files import devshm
from chainermn_torus.runtime.watch import heartbeat as hb, node_end
from chainermn_torus.runtime.watch import progress_board as pb, verdict

__all__ = ['Watcher', 'main']

_HELD = []     # the name that says this node's ranks are being ended on purpose


class Watcher:
    """One node's watch: its board, the leader rank it serves, its heartbeats (joined to
    the other nodes' already: ``main`` makes it once the table of nodes is known)."""

    def __init__(self, board, leader_pid, heartbeat, launcher=None):
        self.board, self.leader, self.heartbeat = board, leader_pid, heartbeat
        self.launcher = launcher
        self.host = socket.gethostname()
        self.period = min(1.0, self.board.limit_s / 4)
        # Silent: three heartbeats missed, and at least 2 s (a loaded node's scheduler).
        self.silent_s = max(3 * self.period, 2.0)
        self.started = pb.now_ns()
        self.wall_started = time.time()
        self.leader_done = False  # the leader rank finished: end once every rank has
        self._deferred = None     # when a verdict was first left to a lower node
        self._stopped_since = {}  # pid -> when it was first seen stopped (or gone), ns
        self._warned = False
        self.stopped_children = {}  # rank -> pids of stopped processes it started
        self._drops_said = 0      # refused datagrams said so far (runtime.watch.heartbeat)

    def run(self):
        stdin = sys.stdin.fileno()
        next_beat = 0.0
        while True:
            if os.getppid() != self.leader:
                return self.stop()  # the leader rank is gone: the job is ending
            timeout = max(0.0, next_beat - time.monotonic())
            ready, _, _ = select.select(self.heartbeat.socks + [stdin], [], [], timeout)
            if stdin in ready:
                line = sys.stdin.readline()
                if not line:
                    return self.stop()  # the leader's end of the pipe closed: it is gone
                if line.strip() == 'stop':
                    # the leader waits for this process at its exit: judge now whether
                    # every rank is done, not a period later
                    self.leader_done, next_beat = True, 0.0
            socks = [r for r in ready if r is not stdin]
            if socks and self.heartbeat.receive(pb.now_ns(), socks):
                return self.end()  # another node found the job stalled: end ours
            self.said_drops()
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + self.period
            done = self.beat()
            if done is not None:
                return done

    def beat(self):
        """One heartbeat: read, send, judge. An exit code once the watch is over."""
        now = pb.now_ns()
        board_rows = self.board.rows()
        if self.leader_done and all(r[board_layout.PHASE] == board_layout.FINISHED or
                                    not r[board_layout.PID] for r in board_rows):
            return self.stop()
        rows = verdict.summary(board_rows, now, *self.states(board_rows, now))
        self.heartbeat.send('beat', rows)
        self.unheard(now)
        text = verdict.judge(self.board.limits(), self.host, rows, self.heartbeat.peers, now,
                             self.silent_s)
        if text is None or self._defer(now):
            return None  # a lower node that hears the same says it (one line, not N)
        for rank, pids in sorted(self.stopped_children.items()):
            said = 'rank {} on {}, {}'.format(rank, self.host, verdict.SAID['L'].split(' (')[0])
            text = text.replace(said, '{}, pid {}'.format(said, ', '.join(map(str, pids))))
        sys.stderr.write(text + '\n')  # one write: it stays one line
        sys.stderr.flush()
        self.heartbeat.send('verdict', times=3)
        time.sleep(0.5)  # let the launcher forward the line before the ranks go
        return self.end()

    def states(self, rows, now):
        """(pid -> process state, pid -> seconds seen stopped or gone) of this node's
        ranks still running. A rank whose own state is fine but that started a process now
        stopped (a loader process) is 'L': it waits for that one."""
        states, held = {}, {}
        families = None
        self.stopped_children = {}
        for r in rows:
            pid = int(r[board_layout.PID])
            if not pid or r[board_layout.PHASE] == board_layout.FINISHED:
                continue
            state = processes.state(pid)
            if state not in verdict.BROKEN:
                families = processes.families() if families is None else families
                stopped = sorted(c for c, (parent, _) in families.items()
                                 if parent == pid and processes.state(c) == 'T')
                if stopped:
                    state, self.stopped_children[int(r[board_layout.RANK])] = 'L', stopped
            states[pid] = state
            if state in verdict.BROKEN:
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
        peers, me = self.heartbeat.peers, self.heartbeat.me
        never = sorted(p['host'] for p in peers.values() if not p['seen'])
        if never and me == min([me] + list(peers)):
            sys.stderr.write(
                'chainermn_torus watchdog: no heartbeat from the watcher(s) of {} node(s) ({}{}) '
                'at {}: UDP between nodes seems blocked; stalled ranks are still found, a node '
                'that freezes whole is not named\n'.format(
                    len(never), ', '.join(never[:8]), ', ...' if len(never) > 8 else '',
                    self.host))
            sys.stderr.flush()

    def said_drops(self, final=False):
        """Say the first datagram refused (someone else sent to this watcher's port), once;
        and, as the watch ends, how many were refused in all."""
        beats = self.heartbeat
        if not beats.dropped or self._drops_said == (beats.dropped if final else 1):
            return
        if final:
            text = f'{beats.dropped} datagram(s) in all were refused at {self.host}'
        else:
            text = 'refused a datagram at {} from {} ({}): not this job\'s; the job goes ' \
                'on, later ones are counted'.format(self.host, *beats.first_drop)
        self._drops_said = beats.dropped if final else 1
        sys.stderr.write(f'chainermn_torus watchdog: {text}\n')
        sys.stderr.flush()

    def _defer(self, now):
        """Whether to leave the verdict to a lower-numbered node that is still heard, for
        up to two heartbeats: every node sees a stall at about the same moment, and one
        line says it better than hundreds."""
        lower = [i for i, p in self.heartbeat.peers.items()
                 if i < self.heartbeat.me and not p['gone']
                 and (now - p['heard']) / 1e9 <= self.silent_s]
        if not lower:
            return False
        if self._deferred is None:
            self._deferred = now
        return (now - self._deferred) / 1e9 < 2 * self.period

    def end(self):
        rows = self.board.rows()
        live = [i for i, r in enumerate(rows)
                if r[board_layout.PID] and r[board_layout.PHASE] != board_layout.FINISHED]
        pids = [int(rows[i][board_layout.PID]) for i in live]
        # The launcher's proxy, killed with the job, leaves MPICH's topology file in /tmp;
        # the node's ranks had read it before this watcher started.
        devshm.remove_launcher_topology(pids[0] if pids else None, self.wall_started)
        node_end.end_ranks(pids, _HELD)
        # Who was writing a checkpoint, read once the ranks are gone: a rank that began one
        # while they were being ended is on the board now (watchers.rank_watch likewise).
        writing = [(pid, self.board.writing_to(i)) for i, pid in zip(live, pids)]
        self.board.close(remove=True)
        node_end.remove_writers_temporaries(writing)
        # The launcher reads this process's stdout and stderr (the leader rank's, inherited)
        # until they close: let go of them before waiting for it.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        node_end.end_launcher(self.launcher)
        return 0

    def stop(self):
        """Training ended here (or the leader rank is gone): say goodbye, remove the board."""
        self.heartbeat.send('bye', times=3)  # so that no watcher waits for us
        self.said_drops(final=True)
        self.board.close(remove=True)
        return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    board_path, leader = argv[0], int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the ranks' to handle
    board = pb.Board(board_path)
    beats = hb.Heartbeat()
    # The leader rank shares the addresses and ports with the other nodes, and gives back
    # the table and the job's key on stdin (a pipe: never on a command line).
    sys.stdout.write(json.dumps(beats.addresses()) + '\n')
    sys.stdout.flush()
    setup = json.loads(sys.stdin.readline())
    beats.join(setup['nodes'], setup['me'], pb.now_ns(), bytes.fromhex(setup['key']))
    return Watcher(board, leader, beats, node_end.launcher_of(leader)).run()


if __name__ == '__main__':
    sys.exit(main())
