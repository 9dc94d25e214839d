"""The watcher of one rank: a small process beside each rank of a job of several ranks,
started by ``runtime.watch.abort`` with its hook (``command.argv('rank', ...)``): it
imports nothing beyond this package, starts in milliseconds, needs no MPI and is no process
of the job. It

* says the rank's death when the rank ends without the package's word (killed by a signal,
  the out-of-memory killer's SIGKILL, ``os._exit``): the rank, its host and pid, the phase
  (from the node's progress board, with a watchdog) and how it ended. The launcher's own
  report names another rank's pid, or none;
* ends the rank when SIGTERM reached it and it is still there ``GRACE`` seconds later (its
  main thread blocked in MPI, holding the GIL: no handler of its can run);
* while its rank leads the node's watchdog, watches the watchdog's process: one that dies
  is a stall of its own, said, and the node's ranks ended.

    watchers rank FD PID GRACE WHO OOM_KILLS

FD: the read end of the rank's pipe (``signal.set_wakeup_fd``'s signal numbers, and the
messages of ``runtime.watch.abort``: ``BYE``, ``ABORTING``, ``NEWS``).

Why it is built so: docs/internals.md (watchers/rank_watch.py).
"""
import errno
import fcntl
import json
import os
import select
import signal
import struct
import time

from . import board_layout, processes, ranks, temporaries

BYE = 0xfc       # a normal end follows: not a death to explain
NEWS = 0xfd      # a JSON object on one line follows: the board, the node's watchdog pid
ABORTING = 0xfe  # the package's hook is ending the job, and says why
CANARY_LOST_S = 2.0  # the canary gone and the rank alive this long after: a new canary
NODE_WATCHER_POLL_S = 1.0
_PIDFD_GET_INFO = 0xC040FF0B  # _IOWR(0xFF, 11, struct pidfd_info of 64 bytes): linux/pidfd.h
_PIDFD_INFO_EXIT = 0x8
_EXIT_CODE_AT = 60  # struct pidfd_info: mask, cgroupid (u64), 11 u32 ids, then exit_code
SAID = {9: 'kill -9, or the kernel\'s out-of-memory killer', 11: 'a crash in native code',
        7: 'memory it had mapped went away (a full /dev/shm?)',
        6: 'an abort in native code', 4: 'an illegal instruction (a build for another CPU?)'}



def _pidfd_exit(pidfd):
    buf = bytearray(64)
    struct.pack_into('Q', buf, 0, _PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(pidfd, _PIDFD_GET_INFO, buf)
    except OSError:
        return None
    if not struct.unpack_from('Q', buf)[0] & _PIDFD_INFO_EXIT:
        return None
    return struct.unpack_from('i', buf, _EXIT_CODE_AT)[0]


def exit_status(pid, pidfd):
    """The wait status of the ended process ``pid``, or None where nothing says it."""
    if pidfd is not None:
        status = _pidfd_exit(pidfd)
        if status is not None:
            return status
    seen = processes.stat(pid)
    if seen is not None:
        return seen.exit_status
    return None if pidfd is None else _pidfd_exit(pidfd)  # reaped meanwhile


def fork_canary(group):
    """A process in process group ``group`` that waits for this watcher's end (the module
    doc): (its pid, its pidfd, the pipe's write end that holds it), or None."""
    read, write = os.pipe()
    try:
        child = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        return None
    if child == 0:
        try:
            os.setpgid(0, group)
            for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(s, signal.SIG_DFL)  # a signal to the group ends it with the rank
            null = os.open(os.devnull, os.O_RDWR)
            for i in (0, 1, 2):
                os.dup2(null, i)  # the job's output is not held open by it
            os.closerange(3, read)
            os.closerange(read + 1, 1024)  # the watcher's few: the rank's pipe, the pidfds
            while os.read(read, 1):
                pass
        finally:
            os._exit(0)
    os.close(read)
    try:
        return child, os.pidfd_open(child), write
    except OSError:
        os.kill(child, signal.SIGKILL)
        os.close(write)
        return None


def remove_temporaries(pids, read_writers, wait_s=3.0):
    """Remove the checkpoint temporaries of the ranks ``pids`` that were ended halfway
    through writing them: once every one is gone (waiting up to ``wait_s``),
    ``read_writers()`` gives [(pid, directory)] from the board. Read after the ends, not
    before: a rank that began a checkpoint while its node's ranks were being ended (the
    canaries first, up to a second) left a file no earlier reading named (seen once in CI).
    The watchdog process does this for the ranks it ends; here it is the one that is gone."""
    if not pids:
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(
            processes.alive(pid) for pid in pids):
        time.sleep(0.005)
    writers = read_writers()
    if not writers:
        return
    for pid, directory in writers:
        if not processes.alive(pid):  # a live writer's file is its own
            temporaries.remove_temporary(directory, pid)


class Watch:

    def __init__(self, argv):
        self.fd, self.pid = int(argv[0]), int(argv[1])
        self.grace, self.who = float(argv[2]), argv[3]
        self.oom_at_start = int(argv[4])
        self.key = ranks.key_of(self.pid)  # read now: the rank's parent, while it is there
        self.aborting = self.bye = False
        self.board = self.layout = None  # the board's path, and an fd that outlives it
        self.board_fd = None
        self.deadline = None  # SIGTERM reached the rank: killed if still there then
        self.pending = b''
        self.node_watcher = 0  # the node's watchdog process, while this rank leads it
        self.group_ended = None  # when the canary ended before the rank
        self.poll = select.epoll()
        self.poll.register(self.fd, select.EPOLLIN)
        self.rank_fd = self.canary = self.group = None
        try:
            self.group = os.getpgid(self.pid)
            self.rank_fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            return  # no pidfds (or the rank is gone already): inside its group, as it was
        self.poll.register(self.rank_fd, select.EPOLLIN)
        try:
            os.setpgid(0, 0)
        except OSError:
            return
        self._new_canary()

    def _new_canary(self):
        self.canary = fork_canary(self.group)
        if self.canary is None:
            try:
                os.setpgid(0, self.group)  # back in the group: no order to read without it
            except OSError:
                pass
            return
        self.poll.register(self.canary[1], select.EPOLLIN)
        self.group_ended = None

    def _drop_canary(self):
        child, pidfd, write = self.canary
        self.poll.unregister(pidfd)
        os.close(pidfd)
        os.close(write)
        try:
            os.waitpid(child, os.WNOHANG)
        except OSError:
            pass
        self.canary = None

    # --- what the rank writes -------------------------------------------------------------
    def take(self, data):
        data, self.pending = self.pending + data, b''
        while bytes([NEWS]) in data:  # a JSON line, written in one piece
            head, _, rest = data.partition(bytes([NEWS]))
            if b'\n' not in rest:
                data, self.pending = head, bytes([NEWS]) + rest
                break
            line, _, tail = rest.partition(b'\n')
            self._news(line)
            data = head + tail
        if BYE in data:
            self.bye = True
        if ABORTING in data and not self.aborting:
            self.aborting = True
            if self.deadline is not None:
                self.deadline += 4 * self.grace
        if signal.SIGTERM in data and self.deadline is None:
            self.deadline = time.monotonic() + self.grace * (5 if self.aborting else 1)

    def _news(self, line):
        try:
            news = json.loads(line.decode())
            self.node_watcher = int(news.get('node_watcher', self.node_watcher))
            if 'board' in news:
                self.board = news['board']
                self.layout = board_layout
                # Held open: the board is read after the rank's death, maybe removed by then.
                self.board_fd = os.open(self.board, os.O_RDONLY)
        except (ValueError, OSError, ImportError, TypeError, AttributeError):
            self.board = self.layout = None

    def _read(self):
        """Read what the rank wrote; False at the end of file."""
        try:
            data = os.read(self.fd, 4096)
        except BlockingIOError:
            return True
        if data:
            self.take(data)
        return bool(data)

    def _drain(self):
        os.set_blocking(self.fd, False)
        try:
            while self._read():
                if not select.select([self.fd], [], [], 0)[0]:
                    break
        except OSError:
            pass

    # --- the words ------------------------------------------------------------------------
    def how_it_ended(self, status):
        """Words for a wait status: the signal and why it may have come, or the exit code."""
        if status & 0x7f and status & 0x7f != 0x7f:
            number = status & 0x7f
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = f'signal {number}'
            why = SAID.get(number, 'a signal it does not handle')
            now = processes.oom_kills()  # None: not known
            if number == 9 and now is not None and 0 <= self.oom_at_start < now:
                why = (f'the kernel\'s out-of-memory killer ended {now - self.oom_at_start} '
                       'process(es) on this node since the job started (dmesg names them)')
            return f'killed by signal {number} ({name}: {why})'
        return f'exited with code {(status >> 8) & 0xff}'

    def _board_path(self):
        return None if self.board_fd is None else f'/proc/self/fd/{self.board_fd}'

    def say_death(self):
        """The rank ended without a normal end, the hook's word or an end of its group."""
        if ranks.being_ended(self.key):
            return  # a watcher of the node ended it on purpose, and said why
        status = exit_status(self.pid, self.rank_fd)
        where = ' (the phase is recorded with a watchdog: --watchdog SECONDS)'
        if self.layout is not None:
            try:
                row = self.layout.row_of(self._board_path(), self.pid)
                if row is not None and row[self.layout.PHASE] != self.layout.FINISHED:
                    where = ' ' + self.layout.where(row[self.layout.PHASE],
                                                    row[self.layout.FINISHED_STEPS],
                                                    row[self.layout.COUNT])
            except Exception:
                pass
        if status is None:
            how = 'its process ended without a word (its exit status could not be read)'
        elif status & 0x7f and status & 0x7f != 0x7f:
            how = self.how_it_ended(status)
        else:
            code = (status >> 8) & 0xff
            if code == 0:
                return  # it ended without the package's exit hook (os._exit(0)): not a death
            how = f'exited with code {code} without saying why (os._exit, or exit() in a native ' \
                  'library)'
        os.write(2, f'chainermn_torus: {self.who} died{where}: {how}; the job ends\n'.encode())

    def end_group(self):
        """The rank ended abnormally: end what is left of its process group (a child it
        forked, a fork-based iterator's workers). The launcher ends the groups of the ranks
        still alive, not always the dead one's; left, such a child held the job's output
        open, and the launcher waited for it (60 s in a test). Only a group the rank led:
        never the launcher's."""
        if self.group == self.pid:
            try:
                os.killpg(self.group, signal.SIGKILL)
            except OSError:
                pass

    def watcher_lost(self):
        """The node's watchdog process is gone while the rank runs: nothing watches the
        node's ranks any more (a rank stopped now would hold the job until its time limit).
        A stall of its own: said, and the node's ranks ended, as the watchdog would have."""
        seen = processes.stat(self.node_watcher)
        if seen is not None and processes.alive(self.node_watcher):
            return False
        how = 'is gone' if seen is None else self.how_it_ended(seen.exit_status)
        how = 'was ' + how if how.startswith('killed') else how
        pids = [self.pid]
        if self.layout is not None:
            pids = [r[self.layout.PID] for r in self.layout.read_rows(self._board_path())
                    if r[self.layout.PID]] or pids
        held = ranks.ending(*pids)  # noqa: F841  the deaths that follow are its doing
        os.write(2, 'chainermn_torus watchdog: the watchdog\'s process on {} (pid {}) {}: '
                 'nothing watches this node\'s ranks any more; ending them (pids {}) and with '
                 'them the job\n'.format(self.who.split('(')[1].split(',')[0],
                                         self.node_watcher, how,
                                         ', '.join(str(p) for p in pids)).encode())
        board = self._board_path()
        if self.canary is not None:
            self._drop_canary()  # its own rank too is ended on purpose
        ranks.end_ranks(pids)
        remove_temporaries(pids, lambda: self.layout.writing(board)
                           if self.layout and board else [])
        if self.board:
            try:
                os.unlink(self.board)  # the watchdog that would have removed it is gone
            except OSError:
                pass
        time.sleep(1.0)  # the name held while the ranks' own watchers look
        return True

    # --- the loop -------------------------------------------------------------------------
    def _timeout(self):
        now = time.monotonic()
        waits = []
        if self.deadline is not None:
            waits.append(self.deadline - now)
        if self.node_watcher and not (self.aborting or self.bye):
            waits.append(NODE_WATCHER_POLL_S)
        if self.group_ended is not None:
            waits.append(self.group_ended + CANARY_LOST_S - now)
        return max(0.0, min(waits)) if waits else -1

    def run(self):
        while True:
            if self.node_watcher and not (self.aborting or self.bye) and self.watcher_lost():
                return
            dead = False
            for f, _ in self.poll.poll(self._timeout()):  # in the order the events came
                if f == self.fd:
                    if not self._read():  # the rank's files closed as it ended (or later)
                        self.poll.unregister(self.fd)
                        dead = True
                elif f == self.rank_fd:  # the rank ended (its files may be held by others)
                    dead = True
                elif self.canary is not None and f == self.canary[1] and not dead:
                    self.group_ended = time.monotonic()
                    self._drop_canary()
            if dead:
                self._drain()  # what the rank wrote before it ended (a normal end's word)
                if self.bye:
                    return
                if not (self.aborting or self.group_ended is not None):
                    self.say_death()
                self.end_group()
                return
            now = time.monotonic()
            if self.group_ended is not None and now >= self.group_ended + CANARY_LOST_S:
                self._new_canary()  # the canary alone was killed: the rank is still there
            if self.deadline is not None and now >= self.deadline:
                os.write(2, f'chainermn_torus: {self.who}: '
                            f'SIGTERM {(5 if self.aborting else 1) * self.grace:g} s ago and the '
                            'process is still '
                         'there: its main thread is blocked (in MPI, holding the GIL?) and '
                         'cannot run the handler; killing it so the job ends\n'.encode())
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except OSError:
                    pass
                return


def main(argv):
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)  # signals to the job are the rank's to handle
    try:
        Watch(argv).run()
    except OSError as e:
        if e.errno != errno.EPIPE:  # the job's output gone: nothing left to say it to
            raise

