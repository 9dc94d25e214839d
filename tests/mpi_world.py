"""One MPI world per rank count for the whole pytest session (the harness's pytest side).

Why: every MPI test used to start its own ``mpiexec`` job, and every rank paid the
interpreter, Chainer, ChainerMN and MPI start-up (2 s and more) before a check of a second
or two. Here ``mpiexec -n P`` starts once per P, on first use, with the loop of
``tests/mpi_workers/world_loop.py`` on every rank; each check is a function of a module in
``tests/mpi_workers`` that takes a fresh communicator (a ``Dup`` of the world, freed after).

Why plain sockets and not MPI or mpi4py.futures: the requests must reach every rank without
MPI, so that a rank that waits for the next check sleeps in the kernel instead of spinning
in a collective, and so that a check that hangs in MPI or raised on one rank can still be
answered, every rank on its own. Each rank connects to a Unix socket of this process and
answers for itself (``multiprocessing.connection`` frames and pickles the messages).

A check that fails, raises on one rank or does not answer within its limit fails its own
test with every rank's message (a rank still waiting is asked for its Python stack with
SIGUSR1, see ``faulthandler``), and the world is ended; the next check starts a new one.
"""
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection, wait

HERE = os.path.dirname(os.path.abspath(__file__))
LOOP = os.path.join(HERE, 'mpi_workers', 'world_loop.py')
START_LIMIT = 120   # seconds for P ranks to start and connect (P = 8 on 2 cores: ~15 s)
GRACE = 2           # after one rank failed, how long the others get to answer


class CheckFailed(AssertionError):
    pass


def _zombie(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] == 'Z'
    except OSError:
        return True


class World:
    """``mpiexec -n nprocs`` running the check loop on every rank."""

    def __init__(self, nprocs, folder, command, env):
        self.nprocs = nprocs
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        self.address = os.path.join(folder, 'socket')
        self.log_path = os.path.join(folder, 'mpiexec.log')
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(self.address)
        server.listen(nprocs)
        self.log = open(self.log_path, 'wb')
        self.proc = subprocess.Popen(
            command + ['-n', str(nprocs), sys.executable, LOOP, self.address, folder],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)  # its own process group: kill() ends every rank
        self.conns, self.pids, self.hosts = {}, {}, {}
        try:
            self._accept(server)
        except BaseException:
            self.kill()
            raise
        finally:
            server.close()

    def _accept(self, server):
        deadline = time.time() + START_LIMIT
        server.settimeout(1.0)
        while len(self.conns) < self.nprocs:
            if self.proc.poll() is not None:
                raise CheckFailed(f'mpiexec -n {self.nprocs} ended (exit '
                                  f'code {self.proc.returncode}) before every rank '
                                  f'connected:\n{self.log_tail()}')
            if time.time() > deadline:
                raise CheckFailed(f'{len(self.conns)} of {self.nprocs} ranks connected '
                                  f'within {START_LIMIT} s:\n{self.log_tail()}')
            try:
                sock, _ = server.accept()
            except socket.timeout:
                continue
            sock.setblocking(True)
            conn = Connection(sock.detach())
            _, rank, pid, host = conn.recv()
            self.conns[rank], self.pids[rank], self.hosts[rank] = conn, pid, host

    def alive(self):
        return self.proc.poll() is None

    def log_tail(self, limit=4000):
        self.log.flush()
        with open(self.log_path, 'rb') as f:
            return f.read().decode('utf-8', 'replace')[-limit:]

    def run(self, module, function, args=(), env=None, timeout=300):
        """Run ``module.function(comm, *args)`` on every rank; returns the ranks' return
        values (a list by rank) or raises CheckFailed with every rank's report."""
        request = ('run', module, function, tuple(args), dict(env or {}))
        for rank in range(self.nprocs):
            self.conns[rank].send(request)
        answers, failed_at = {}, None
        deadline = time.time() + timeout
        by_conn = {c: r for r, c in self.conns.items()}
        while len(answers) < self.nprocs:
            limit = deadline if failed_at is None else min(deadline, failed_at + GRACE)
            ready = wait([c for c, r in by_conn.items() if r not in answers],
                         timeout=max(0.0, limit - time.time()))
            if not ready:
                break
            for conn in ready:
                rank = by_conn[conn]
                try:
                    answers[rank] = conn.recv()
                except (EOFError, OSError):
                    answers[rank] = ('died', 'the rank ended (its connection closed)', '')
                if answers[rank][0] != 'ok' and failed_at is None:
                    failed_at = time.time()
        if len(answers) == self.nprocs and all(a[0] == 'ok' for a in answers.values()):
            return [answers[r][1] for r in range(self.nprocs)]
        report = self._report(answers, timeout, failed_at)
        self.kill()
        raise CheckFailed(f'{module}.{function}{args} at P = {self.nprocs}:\n{report}')

    def _report(self, answers, timeout, failed_at):
        waiting = [r for r in range(self.nprocs) if r not in answers]
        stacks = {}
        for rank in waiting:  # their Python stacks, written by faulthandler on SIGUSR1
            try:
                os.kill(self.pids[rank], signal.SIGUSR1)
            except ProcessLookupError:
                pass
        if waiting:
            time.sleep(0.5)
            for rank in waiting:
                path = os.path.join(self.folder, f'stack.{rank}')
                stacks[rank] = open(path).read()[-3000:] if os.path.exists(path) else ''
        lines = []
        for rank in range(self.nprocs):
            head = f'rank {rank} (pid {self.pids.get(rank)}, {self.hosts.get(rank)}): '
            if rank in answers:
                kind, text, output = answers[rank][:3]
                lines.append(head + ('passed' if kind == 'ok' else kind))
                if kind != 'ok':
                    lines.append(str(text).rstrip())
                if output.strip():
                    lines.append('  its output:\n' + output.rstrip()[-3000:])
            else:
                why = (f'no answer {GRACE} s after another rank failed'
                       if failed_at else f'no answer within {timeout} s (hang?)')
                lines.append(head + why + '; its stack:\n' + stacks[rank].rstrip())
        lines.append('mpiexec output:\n' + self.log_tail(2000))
        return '\n'.join(lines)

    def close(self, limit=20):
        if self.alive():
            for conn in self.conns.values():
                try:
                    conn.send(('stop',))
                except OSError:
                    pass
            try:
                self.proc.wait(limit)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self):
        if self.proc.poll() is None:
            # Killed, MPICH's proxy leaves its topology file in /tmp (it removes it at a
            # normal end only): removed first, while the proxy is there to say which.
            from chainermn_torus.runtime.files import devshm
            for pid in list(self.pids.values())[:1]:
                devshm.remove_launcher_topology(pid, time.time())
            # mpiexec's process group, and the ranks by pid: Hydra may start them in
            # groups of their own.
            for kill, pid in [(os.killpg, self.proc.pid)] + [
                    (os.kill, p) for p in self.pids.values()]:
                try:
                    kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait()
            deadline = time.time() + 10
            while time.time() < deadline and any(
                    os.path.exists(f'/proc/{p}') and not _zombie(p)
                    for p in self.pids.values()):
                time.sleep(0.05)
            # Ranks killed leave MPICH's shared segments in /dev/shm: removed, as
            # `chainermn-torus clean --others` would (never a file a live process maps).
            from chainermn_torus.runtime.files import devshm
            devshm.sweep(others=True, min_age=0)
        for conn in self.conns.values():
            conn.close()
        self.conns = {}
        self.log.close()


class Worlds:
    """The session's worlds: one alive at a time (the tests that use them are ordered by P,
    see conftest.py), a new one after a failure."""

    def __init__(self, folder, command, env):
        self.folder, self.command, self.env = folder, command, env
        self.current = None
        self.started = {}   # P -> worlds started
        self.checks = {}    # P -> checks run

    def get(self, nprocs):
        world = self.current
        if world is not None and (world.nprocs != nprocs or not world.alive()
                                  or not world.conns):
            world.close()
            world = self.current = None
        if world is None:
            n = self.started.get(nprocs, 0)
            self.started[nprocs] = n + 1
            folder = os.path.join(self.folder, f'p{nprocs}-{n}')
            world = self.current = World(nprocs, folder, self.command, self.env)
        return world

    def run(self, nprocs, module, function, *args, **kwargs):
        self.checks[nprocs] = self.checks.get(nprocs, 0) + 1
        return self.get(nprocs).run(module, function, args, **kwargs)

    def close(self):
        if self.current is not None:
            self.current.close()
            self.current = None
