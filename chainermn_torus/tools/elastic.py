"""``chainermn-torus elastic``: a job that goes on, on the nodes it has left, when one is lost.
The supervisor runs on the batch host, where the job script runs.

    chainermn-torus elastic [--hosts h0:2,h1:2,h2:2] [--min-nodes N] [--global-batch B]
                            [--launcher-args '...'] [--report FILE] -- python train.py ...

The script keeps snapshots in node memory (the examples' ``--memory-snapshots K``, or
``chainermn-torus run --memory-snapshots K`` for an unchanged script; where the command asks
for none, its steps get ``CHAINERMN_TORUS_MEMORY_SNAPSHOTS`` = ``in_memory.DEFAULT_K``, which
both read), and each step after the first restores from them. A command that keeps none (it
runs neither) is one step: the job ends with its exit code. The supervisor

1. finds the job's nodes (``job_nodes.discover``: ``--hosts``, Slurm's allocation, PBS's
   node file) and asks each to answer (``elastic_node``: one process per node through the
   launcher; its host name is the name the watch uses);
2. starts the MPI step on them: the same command, with ``CHAINERMN_TORUS_ELASTIC_STEP`` set
   to the run and the step's number, and passes its output on as it comes;
3. when the step ends, it believes only the step's own lines (``elastic_lines``): "training
   is complete" ends the job with the step's exit code, never a launcher's exit code alone
   (Open MPI's mpirun exits 0 after losing a node);
4. otherwise it learns the lost nodes from the watch (a node named silent: frozen, or its
   link down) and from the nodes themselves: one that does not answer within
   ``--probe-timeout`` is lost. Those that answer end what the old step left there (its
   processes, its files in /dev/shm) and keep the snapshots;
5. plans the next step on the nodes left (``job_nodes.plan``: ``--min-nodes``, the global
   batch split over the ranks left), and starts it with the same command, which restores
   the newest snapshot every survivor holds complete (``in_memory``) and trains on. A loss
   during a recovery is one more failed step: recovery starts again on the nodes still left.

A step that fails with every node answering is the script's own failure: the job ends with
its exit code, as without the supervisor. Below ``--min-nodes``, or where the global batch
does not split, the job ends in one line naming the nodes; the snapshots are removed, and a
disk checkpoint (``--checkpoint-dir``) is what a requeue with ``--auto-resume`` goes on
from. So is the loss of the batch host, where this process runs: it cannot be survived.
"""
import argparse
import collections
import ctypes
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from chainermn_torus import command_line, config, settings_table
from chainermn_torus.errors import ConfigError
from chainermn_torus.extensions.checkpoint import arguments, elastic_lines, in_memory
from chainermn_torus.tools import elastic_node, job_nodes

__all__ = ['main', 'Launcher', 'Supervisor', 'Guard']

_SILENT = re.compile(r'node (\S+) \(ranks? [^)]*\) silent')
# runtime.watch.abort's line (abort.signal_text) where a signal from outside reached a rank:
# its node is treated as a lost one (an orderly shutdown of that node, or the batch system
# signalling it).
_SIGNALLED = re.compile(r'rank (\d+) \((\S+)\): (SIGTERM|SIGINT) \([^)]*\) received')
_VARIABLE = settings_table.SETTINGS['elastic_step'].env
_EXPECT = settings_table.SETTINGS['expect_ranks'].env
_SNAPSHOTS = settings_table.SETTINGS['memory_snapshots'].env
_VIRTUAL = settings_table.SETTINGS['virtual_ranks'].env
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def say(text):
    sys.stdout.write(elastic_lines.PREFIX + text + '\n')
    sys.stdout.flush()


class Launcher:
    """How a command is started on chosen nodes: MPICH's and Intel MPI's hydra
    (``-hosts h:n,... -n N``), Open MPI's mpirun (``--host h:n,... -np N``, the step's
    variable passed with ``-x``) or Slurm's srun (a step on ``--nodelist``)."""

    def __init__(self, kind, program, extra=()):
        self.kind, self.program, self.extra = kind, program, list(extra)

    @classmethod
    def find(cls, kind='auto', program=None, extra=()):
        if kind == 'auto':
            kind = 'srun' if os.environ.get('SLURM_JOB_ID') and shutil.which('srun') and \
                program is None else 'mpiexec'
        if kind == 'srun':
            return cls('srun', program or shutil.which('srun') or 'srun', extra)
        venv = os.path.join(os.path.dirname(sys.executable), 'mpiexec')  # the mpich wheel's
        program = program or config.current()['mpiexec'] or (
            venv if os.access(venv, os.X_OK) else shutil.which('mpiexec') or 'mpiexec')
        try:
            text = subprocess.run([program, '--version'], capture_output=True, text=True,
                                  timeout=30)
        except OSError as e:
            raise ConfigError('chainermn_torus: cannot run the '
                              f'launcher {program!r}: {e.strerror or e}') from None
        flavour = 'openmpi' if re.search(r'Open MPI|OpenRTE|Open RTE|prte',
                                         text.stdout + text.stderr, re.I) else 'hydra'
        return cls(flavour, program, extra)

    def command(self, nodes, argv, passed=(_VARIABLE, _EXPECT)):
        """The launcher's command line for ``argv`` on ``nodes``; ``passed``: the
        variables Open MPI's mpirun must be told to pass on (the others pass the whole
        environment)."""
        hosts = ','.join(f'{n.host}:{n.ranks}' for n in nodes)
        ranks = sum(n.ranks for n in nodes)
        if self.kind == 'srun':
            return [self.program, f'--nodes={len(nodes)}', f'--ntasks={ranks}',
                    '--nodelist={}'.format(','.join(n.host for n in nodes)),
                    '--distribution=block', '--kill-on-bad-exit=1'] + self.extra + argv
        if self.kind == 'openmpi':
            # mpirun passes a remote rank only the variables named with -x. --map-by slot:
            # each node's ranks as planned, whatever default policy the site set (a
            # policy by core with oversubscription puts every rank on the first node).
            named = [w for name in passed for w in ('-x', name)]
            return [self.program, '--host', hosts, '-np', str(ranks), '--map-by',
                    'slot'] + named + self.extra + argv
        return [self.program] + self.extra + ['-hosts', hosts, '-n', str(ranks)] + argv


Step = collections.namedtuple('Step', 'code complete keeping silent restored first_step '
                                      'started ended signalled')


class Supervisor:
    def __init__(self, nodes, command, launcher, min_nodes=1, global_batch=None,
                 probe_timeout=20.0, grace=30.0, max_steps=None, slurm=False,
                 keep_snapshots=False, virtual_ranks=None):
        self.nodes, self.command, self.launcher = nodes, command, launcher
        # V virtual ranks for every step (the steps' CHAINERMN_TORUS_VIRTUAL_RANKS): the
        # survivors take the lost ranks' over, and the result is the uninterrupted job's.
        self.virtual_ranks = virtual_ranks
        # Nodes from Slurm's allocation: Slurm is asked first which of them it holds lost.
        self.slurm = slurm or launcher.kind == 'srun'
        self.min_nodes, self.global_batch = min_nodes, global_batch
        self.probe_timeout, self.grace = probe_timeout, grace
        self.max_steps = max_steps if max_steps is not None else len(nodes) + 1
        self.run_id = secrets.token_hex(8)
        self.lost, self.names = [], {}  # names: allocation host -> the node's host name
        self.recoveries, self.snapshots = [], None
        self.unanswered = {}  # host -> why its last probe failed
        self.proc, self.stopping = None, None
        self.keep_snapshots, self.completed = keep_snapshots, False
        self.signalled = []  # hosts counted lost because a signal ended their ranks
        # The steps' snapshots in node memory where the command asks for none: the setting
        # the launcher and the examples read (without it a lost node ends the job).
        self.given = None if os.environ.get(_SNAPSHOTS) or \
            arguments.snapshots_asked(command) is not None else in_memory.DEFAULT_K
        self.guard = None  # a Guard (main): what outlives this process if it is killed

    def _tell(self, what, value):
        if self.guard is not None:
            self.guard.tell(what, value)

    # --- the nodes ------------------------------------------------------------------------
    def probe(self, nodes, remove_snapshots=False, since=None):
        """{host: (ended, removed)} of the nodes that answered within the probe time; ends
        what earlier steps (the last started at ``since``) left on them."""
        # The run id only in the probe's environment: a command line is there for every
        # user to read (ps), and the id names the run's snapshots and processes.
        argv = [sys.executable, '-m', 'chainermn_torus.tools.elastic_node']
        if since is not None:
            argv += ['--since', f'{since:.3f}']
        if remove_snapshots and self.snapshots:
            argv += ['--snapshots', self.snapshots]
        env = {k: v for k, v in os.environ.items() if k != _VARIABLE}
        env[elastic_node.RUN_VARIABLE] = self.run_id
        if self.slurm:
            # srun (itself, or under hydra's -launcher slurm) waits for a node Slurm holds
            # DOWN until the probe's time is out: those are counted out at once (a node
            # Slurm has not yet marked is still asked: DOWN comes after SlurmdTimeout).
            gone = job_nodes.slurm_unavailable([n.host for n in nodes])
            for host, state in gone.items():
                self.unanswered[host] = f'Slurm holds it {state} (sinfo)'
            nodes = [n for n in nodes if n.host not in gone]
        return self._ask(nodes, argv, env, time.time() + self.probe_timeout)

    def _ask(self, nodes, argv, env, deadline):
        """{host: (ended, removed)} of the nodes that answered by ``deadline``; why for the
        others in ``unanswered``. A launcher that ends without an answer is started once
        more at once, beside the ones still waiting: Open MPI's PRRTE failed now and then to
        start its PMIx listener (exit code 213, one probe in dozens on this machine), which
        says nothing of the node; a node silent to the end is not asked again."""
        def ask(host):
            # Into a file, not a pipe: a launcher that says much cannot block on a full pipe
            # while the loop below only polls it.
            said = tempfile.TemporaryFile(mode='w+')
            proc = subprocess.Popen(
                self.launcher.command([job_nodes.Node(host, 1)], argv,
                                      passed=(elastic_node.RUN_VARIABLE,)),
                stdout=said, stderr=subprocess.STDOUT, text=True, env=env,
                start_new_session=True, preexec_fn=_die_with_parent)
            return proc, said
        procs = {n.host: ask(n.host) for n in nodes}
        asked = dict.fromkeys(procs, 1)
        answered = {}
        while procs:
            for host, (proc, said) in list(procs.items()):
                if proc.poll() is None and time.time() < deadline:
                    continue
                if proc.poll() is None:
                    _kill_group(proc)
                    out = ''
                else:
                    said.seek(0)
                    out = said.read()
                said.close()
                ready = elastic_node.parse_ready(out)
                gone = proc.returncode is None or proc.returncode < 0
                if not ready and not gone and asked[host] == 1 and time.time() < deadline:
                    procs[host], asked[host] = ask(host), 2
                    continue
                del procs[host]
                if ready:
                    name = next(iter(ready))
                    self.names[host] = name
                    answered[host] = ready[name]
                    continue
                # The launcher's own words (ssh's) first, its traceback lines after them;
                # PRRTE's rules of dashes are no words.
                said = [ln for ln in out.splitlines() if ln.strip().strip('-')]
                last = [ln for ln in said if not ln.startswith('[mpiexec@')][:1] or said[-1:]
                self.unanswered[host] = f'no answer within {self.probe_timeout:g} s' if gone \
                    else 'the launcher could not reach it (exit code {}{})'.format(
                        proc.returncode, ': ' + last[0].strip()[:200] if last else '')
            if procs:
                time.sleep(0.02)
        return answered

    # --- one step -------------------------------------------------------------------------
    def run_step(self, step, number):
        env = dict(os.environ)
        env[_VARIABLE] = f'{self.run_id}:{number}'
        # The ranks MPI must start this time (a job script's count was the whole allocation's)
        env[_EXPECT] = str(step.ranks)
        if self.given is not None:
            env[_SNAPSHOTS] = str(self.given)
        if self.virtual_ranks is not None:
            env[_VIRTUAL] = str(self.virtual_ranks)
        passed = (_VARIABLE, _EXPECT) + ((_SNAPSHOTS,) if env.get(_SNAPSHOTS) else ()) + \
            ((_VIRTUAL,) if env.get(_VIRTUAL) else ())
        argv = self.launcher.command(step.nodes, self.command, passed)
        seen = {'complete': None, 'keeping': None, 'restored': None, 'first_step': None,
                'silent': set(), 'verdict_at': None, 'signalled': {}}
        started = time.time()
        self.proc = proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, env=env,
                                            start_new_session=True,
                                            preexec_fn=_die_with_parent)
        self._tell('step', proc.pid)  # its session: the launcher and its local ranks

        def pump(stream, sink):
            for line in stream:
                sink.write(line)
                sink.flush()
                for kind in ('complete', 'keeping', 'restored', 'first_step'):
                    if seen[kind] is None:
                        found = elastic_lines.find(kind, line)
                        if found:
                            seen[kind] = (time.time(), found)
                            if kind == 'keeping':  # the guard removes them if this dies
                                self._tell('snapshots', found[0])
                for rank, host, name in _SIGNALLED.findall(line):
                    seen['signalled'].setdefault(host, (name, rank))
                for host in _SILENT.findall(line):
                    seen['silent'].add(host)
                    seen['verdict_at'] = seen['verdict_at'] or time.time()

        threads = [threading.Thread(target=pump, args=(proc.stdout, sys.stdout), daemon=True),
                   threading.Thread(target=pump, args=(proc.stderr, sys.stderr), daemon=True)]
        for t in threads:
            t.start()
        while proc.poll() is None:
            time.sleep(0.05)
            verdict = seen['verdict_at']
            if verdict is not None and time.time() - verdict > self.grace:
                # The watch ended its ranks; a launcher that still waits for the lost node's
                # proxy is ended here.
                say('the step still runs {:g} s after the watch named node(s) {}: ending '
                    'its launcher'.format(self.grace, ', '.join(sorted(seen['silent']))))
                _kill_group(proc)
        ended = time.time()
        for t in threads:
            t.join(5)
        self.proc = None
        if seen['keeping']:
            self.snapshots = seen['keeping'][1][0]  # the guard was told as it was said
        return Step(proc.returncode, seen['complete'], seen['keeping'], seen['silent'],
                    seen['restored'], seen['first_step'], started, ended, seen['signalled'])

    # --- the job --------------------------------------------------------------------------
    def run(self):
        """The job, step after step; its exit code. However it ends but by completing (a
        script's failure, too few nodes, a signal to this process), the run's snapshots are
        removed from the nodes left, unless ``keep_snapshots``."""
        try:
            return self._run()
        finally:
            if not self.completed and self.snapshots:
                if self.keep_snapshots:
                    say(f'the run\'s snapshots stay in node memory ({self.snapshots}) as '
                        '--keep-snapshots '
                        'asks; remove them with: chainermn-torus clean --snapshots, on each '
                        'node')
                else:
                    self.finish()
            elif self.completed and self.signalled and self.snapshots:
                # The steps' own good end removed the survivors' snapshots; the nodes whose
                # ranks a signal ended are up, and still hold theirs.
                self.probe([n for n in self.nodes if n.host in self.signalled],
                           remove_snapshots=True)
            self._tell('done', '')

    def _run(self):
        answered = self.probe(self.nodes)
        missing = [n.host for n in self.nodes if n.host not in answered]
        if missing:
            say('node(s) {} left out from the start: {}'.format(
                ', '.join(missing), '; '.join(self.unanswered[h] for h in missing)))
            self.lost += missing
        number, pending = 0, None
        while True:
            try:
                step = job_nodes.plan(self.nodes, self.lost, self.global_batch,
                                       self.min_nodes)
            except job_nodes.NoStep as e:
                say(str(e).replace('chainermn_torus: ', '', 1))
                return 1
            if number:
                say('step {} on {} ({} ranks), after losing {}'.format(
                    number, ', '.join(n.host for n in step.nodes), step.ranks,
                    ', '.join(self.lost)))
            if pending is not None:
                pending['launched'] = time.time()
            result = self.run_step(step, number)
            if pending is not None:
                pending.update(self._timing(result))
                self.recoveries.append(pending)
                pending = None
            if self.stopping is not None:
                return result.code if result.code else 128 + self.stopping
            if result.complete:
                self.completed = True
                return result.code
            if not result.keeping and self.snapshots is None:
                # No snapshot extension, so no line says the training is complete: the
                # step's exit code is the job's, a good one included.
                say(f'the step ended (exit code {result.code}) without keeping snapshots in node '
                    'memory '
                    '(the command neither runs chainermn_torus.run nor reads --memory-'
                    'snapshots): there is nothing to go on from, and the job ends with its '
                    'exit code')
                return result.code
            if number + 1 >= self.max_steps:
                say(f'{number + 1} steps started: the job ends (--max-steps)')
                return result.code or 1
            pending = {'step': number + 1, 'ended': result.ended,
                       'verdict_at': None, 'exit_code': result.code}
            answered = self.probe(step.nodes, since=result.started)
            pending['probed'] = time.time()
            silent = {h for h, name in self.names.items() if name in result.silent}
            # A node whose ranks a signal ended (not this supervisor's: handled above) is
            # going away or being taken back: treated as lost.
            signalled = {h: result.signalled[name] for h, name in self.names.items()
                         if name in result.signalled}
            newly = [n.host for n in step.nodes if n.host not in answered or n.host in silent
                     or n.host in signalled]
            if not newly:
                say(f'the step ended with exit code {result.code} and every node answers: no node '
                    'was '
                    'lost, so the job ends with it')
                return result.code or 1
            for host in newly:
                why = 'named silent by the watch' if host in silent else \
                    '{} reached its rank {}'.format(*signalled[host]) \
                    if host in signalled else self.unanswered.get(host, 'no answer')
                say(f'node {host} lost ({why})')
            self.lost += newly
            self.signalled += [h for h in newly if h in signalled]
            for host in newly:
                self._tell('signalled' if host in signalled else 'lost', host)
            pending['lost'] = newly
            number += 1

    def _timing(self, result):
        out = {'restored': result.restored[0] if result.restored else None,
               'iteration': int(result.restored[1][1]) if result.restored else None,
               'first_step': float(result.first_step[1][1]) if result.first_step else None,
               'keeping': result.keeping[0] if result.keeping else None}
        return out

    def reachable(self):
        """The nodes left, and those whose ranks a signal ended (still up)."""
        return [n for n in self.nodes if n.host not in self.lost or n.host in self.signalled]

    def finish(self):
        """The run ends for good: the reachable nodes remove its snapshots."""
        left = self.reachable()
        if left and self.snapshots:
            self.probe(left, remove_snapshots=True)

    def signal(self, signum, _frame):
        """SIGTERM or SIGINT (the batch system ends the job): to the step, no recovery."""
        self.stopping = signum
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signum)
            except ProcessLookupError:
                pass


class Guard:
    """A process forked at the supervisor's start, in a session of its own, that outlives
    it. The supervisor tells it, through a pipe, the current step's session (the launcher
    and its local ranks), the run's snapshots and the nodes lost, and says ``done`` however
    it ends by itself. Where the pipe closes without ``done`` (the supervisor was SIGKILLed,
    or the OOM killer took it), the guard ends the step's session (Open MPI's mpirun, ended
    by PR_SET_PDEATHSIG, left its ranks running) and removes the run's snapshots from the
    nodes, as every other end does (unless --keep-snapshots), and says so on stderr."""

    def __init__(self, sup):
        read, self._write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:  # the guard
            os.close(self._write)
            code = 0
            try:
                os.setsid()  # a signal to the supervisor's process group misses it
                # The batch system's SIGTERM reaches every process of the job: the
                # supervisor ends the job then, and says done; the guard waits for that.
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                _guard(sup, read)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(read)

    def tell(self, what, value):
        if self._write is None:  # done already: the descriptor's number may be reused
            return
        try:
            os.write(self._write, f'{what} {value}\n'.encode())
        except OSError:
            pass  # the guard is gone: nothing to tell
        if what == 'done':
            os.close(self._write)
            self._write = None
            os.waitpid(self.pid, 0)


def _guard(sup, read):
    step = since = None
    with os.fdopen(read, 'rb') as pipe:
        for raw in pipe:
            what, _, value = raw.decode().rstrip('\n').partition(' ')
            if what == 'step':
                step, since = int(value), time.time()
            elif what == 'snapshots':
                sup.snapshots = value
            elif what in ('lost', 'signalled'):
                sup.lost.append(value)
                if what == 'signalled':
                    sup.signalled.append(value)
            elif what == 'done':
                return
    # The pipe closed without "done": the supervisor died.
    if step is not None:
        try:
            os.killpg(step, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    # The launcher's session does not hold every rank (Open MPI's daemons put each in a
    # group of its own): each node's probe ends the run's processes there, found by the
    # run in their environment, removes the snapshots, and MPICH's topology files the
    # killed launcher left since the step began.
    kept = bool(sup.snapshots) and not sup.keep_snapshots
    sup.guard = None
    sup.probe(sup.reachable(), remove_snapshots=kept, since=since)
    sys.stderr.write(elastic_lines.PREFIX + 'the supervisor of run {} ended without a word '
                     '(killed): its step ended{}\n'.format(
                         sup.run_id, ', and its snapshots removed from the nodes left'
                         if kept else ''))
    sys.stderr.flush()


def _die_with_parent():
    """In a launcher's child, before its exec: the kernel ends it when the supervisor's
    process ends, SIGKILL included (a supervisor killed so left its whole step running and
    forking). The launcher then takes its ranks down with it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the step outlives a killed supervisor, as without this


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def build_parser():
    p = argparse.ArgumentParser(
        prog='chainermn-torus elastic',
        description='Run an MPI training job that goes on, on the nodes left, when a node is '
                    'lost (docs/cluster.md, "When a node is lost").')
    p.add_argument('--hosts', default=None, metavar='H:R,...',
                   help="the job's nodes and ranks per node (default: Slurm's allocation, "
                        "else PBS's node file)")
    p.add_argument('--min-nodes', type=command_line.arg_type('count'), default=1, metavar='N',
                   help='end the job where fewer nodes are left (default 1)')
    p.add_argument('--global-batch', type=command_line.arg_type('count'), default=None, metavar='B',
                   help='the global batch the script keeps (--resume-batch keep): a step on '
                        'ranks that do not divide it is refused in one line')
    p.add_argument('--virtual-ranks', nargs='?', const='first', default=None, metavar='V',
                   help='every step computes as V virtual ranks (bare: the first step\'s '
                        'ranks), so that the survivors of a lost node take its virtual ranks '
                        'over and the job ends with the bits of the job never interrupted; '
                        f'sets {_VIRTUAL} for the steps')
    p.add_argument('--launcher', choices=('auto', 'mpiexec', 'srun'), default='auto',
                   help='how steps start (default: srun inside Slurm, else mpiexec)')
    p.add_argument('--launcher-program', default=None, metavar='PATH',
                   help="the launcher's path (default: CHAINERMN_TORUS_MPIEXEC, or mpiexec on "
                        'PATH)')
    p.add_argument('--launcher-args', default='', metavar='ARGS',
                   help='more arguments for the launcher, before the hosts (one string)')
    p.add_argument('--probe-timeout', type=command_line.arg_type('seconds'), default=20.0,
                   metavar='S', help='a node that does not answer within this is lost '
                                     '(default %(default)s)')
    p.add_argument('--grace', type=command_line.arg_type('seconds'), default=30.0, metavar='S',
                   help='end a step this long after the watch named a node silent '
                        '(default %(default)s)')
    p.add_argument('--max-steps', type=command_line.arg_type('count'), default=None, metavar='N',
                   help='steps started at most (default: the node count + 1)')
    p.add_argument('--keep-snapshots', action='store_true',
                   help="where the job ends without completing, leave the run's snapshots in "
                        'node memory (default: removed from every node left; chainermn-torus '
                        'clean --snapshots removes what is kept)')
    p.add_argument('--report', default=None, metavar='FILE',
                   help='write the recoveries and their times as JSON')
    p.add_argument('command', nargs=argparse.REMAINDER,
                   help='-- then the command each rank runs')
    return p


def main(argv=None):
    p = build_parser()
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    if not command:
        p.error('no command: give -- python script.py ... after the options')
    try:
        extra = shlex.split(args.launcher_args)
    except ValueError as e:
        p.error(f'--launcher-args {args.launcher_args!r} does not parse as a shell would split '
                f'it: {e}')
    try:
        nodes, source = job_nodes.discover(args.hosts)
        launcher = Launcher.find(args.launcher, args.launcher_program, extra)
    except ConfigError as e:
        p.error(str(e).replace('chainermn_torus: ', '', 1))
    virtual = None
    if args.virtual_ranks is not None:
        total = sum(n.ranks for n in nodes)
        try:
            virtual = total if args.virtual_ranks == 'first' else \
                command_line.arg_type('count')(args.virtual_ranks)
        except argparse.ArgumentTypeError as e:
            p.error(f'--virtual-ranks {e}')
        if virtual < total:
            p.error(f'--virtual-ranks {virtual} is fewer than the first step\'s {total} ranks '
                    f'({len(nodes)} nodes): give at least {total}, or --virtual-ranks alone')
        if args.global_batch is not None:
            p.error('--virtual-ranks keeps the job\'s batch on any number of ranks (each '
                    'virtual rank its own); leave --global-batch out')
    sup = Supervisor(nodes, command, launcher, args.min_nodes, args.global_batch,
                     args.probe_timeout, args.grace, args.max_steps,
                     slurm=source == job_nodes.SLURM_SOURCE,
                     keep_snapshots=args.keep_snapshots, virtual_ranks=virtual)
    # Before any thread starts (the step's output pumps): the guard is a fork of this.
    sup.guard = Guard(sup)
    signal.signal(signal.SIGTERM, sup.signal)
    signal.signal(signal.SIGINT, sup.signal)
    say('run {}: {} node(s) from {} ({}), launcher {}'.format(
        sup.run_id, len(nodes), source, ', '.join(f'{n.host}:{n.ranks}'
                                                   for n in nodes), launcher.kind))
    if sup.given is not None:
        say('the command asks for no snapshots in node memory: its steps keep one '
            f'every {sup.given} '
            f'iterations ({_SNAPSHOTS}={sup.given}; read by chainermn_torus.run and the examples)')
    if virtual is not None:
        say(f'every step computes as {virtual} virtual ranks ({_VIRTUAL}={virtual}): a lost '
            'node\'s are taken over by the survivors, and the job ends as it would have '
            'without the loss')
    code = sup.run()
    if args.report:
        with open(args.report, 'w') as f:
            json.dump({'run': sup.run_id, 'nodes': [list(n) for n in nodes], 'lost': sup.lost,
                       'names': sup.names, 'exit_code': code,
                       'recoveries': sup.recoveries}, f, indent=1)
    return code


if __name__ == '__main__':
    sys.exit(main())
