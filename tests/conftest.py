"""Helpers for tests that start real MPI jobs with the virtualenv's mpiexec (mpich wheel)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from chainermn_torus import config
from chainermn_torus.tools import oversubscribe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKERS = os.path.join(ROOT, 'tests', 'mpi_workers')


# `make test MPI=impi|openmpi` (scripts/with_mpi.sh) names the MPI and its own mpiexec; the
# default is the venv's mpich wheel.
MPI = config.env('mpi')[0]


def mpiexec_path():
    chosen = config.env('mpiexec')[0]
    if chosen:
        return chosen
    here = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    return here if os.path.exists(here) else shutil.which('mpiexec')



def job_env(nprocs, env=None, yielding=True):
    """The environment of a test job of nprocs ranks on this machine."""
    full_env = dict(os.environ)
    # Oversubscribed ranks on 2 cores: one BLAS thread each, or they fight for the cores;
    # and (``yielding``: jobs of their own, which train) the MPI's own setting that makes a
    # waiting rank give its core up instead of spinning, where there are more ranks than
    # cores (tools/oversubscribe.py, which says why the check worlds go without).
    full_env.update({'OMP_NUM_THREADS': '1', 'OPENBLAS_NUM_THREADS': '1',
                     'PYTHONPATH': ROOT + os.pathsep + full_env.get('PYTHONPATH', '')})
    if yielding:
        full_env.update(oversubscribe.environment(MPI, nprocs))
    full_env.update(env or {})
    return full_env


def run_mpi(nprocs, argv, timeout=240, env=None, python=None):
    """Run `mpiexec -n nprocs python argv...` (``python``: another interpreter for the ranks,
    such as the aarch64 one under QEMU); returns CompletedProcess (text). For a job of its
    own: checks that do not end their job run in the session's worlds (``mpi_world``)."""
    exe = mpiexec_path()
    if exe is None:
        pytest.skip('no mpiexec: run `make setup` (installs the mpich wheel into .venv)')
    full_env = job_env(nprocs, env)
    cmd = [exe, '-n', str(nprocs), python or sys.executable] + list(argv)
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=full_env, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        pytest.fail('mpiexec -n {} {} did not finish in {} s (hang?)\nstdout:\n{}\nstderr:\n{}'
                    .format(nprocs, ' '.join(argv), timeout, e.stdout, e.stderr))


SLOW_FROM_RANKS = 4  # jobs this large (oversubscribed here) run in the full tier only


def ranks(counts, fast=None):
    """Rank counts for a parametrize, marked slow from SLOW_FROM_RANKS on, or, with
    ``fast``, all but those listed there (the fast tier's smoke set)."""
    def slow(n):
        return n >= SLOW_FROM_RANKS if fast is None else n not in fast
    return [pytest.param(n, marks=pytest.mark.slow) if slow(n) else n for n in counts]


def run_cli(argv, cwd=ROOT):
    """``chainermn-torus ARGV`` in this process (no interpreter start-up per call): an object
    with returncode, stdout and stderr, as subprocess.run gives."""
    import contextlib
    import io
    import types
    from chainermn_torus.tools import cli
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(argv))
            except SystemExit as e:  # argparse's errors and --help
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if isinstance(e.code, str):
                    err.write(e.code + '\n')
    finally:
        os.chdir(here)
    return types.SimpleNamespace(returncode=code or 0, stdout=out.getvalue(),
                                 stderr=err.getvalue())


def hide_numba(folder):
    """Make ``folder`` a PYTHONPATH entry under which ``import numba`` fails, as where it is
    not installed; returns it."""
    os.makedirs(os.path.join(folder, 'numba'))
    with open(os.path.join(folder, 'numba', '__init__.py'), 'w') as f:
        f.write('raise ImportError("numba is hidden by the test (tests/conftest.py, '
                'hide_numba)")\n')
    return folder


@pytest.fixture
def no_numba(tmp_path):
    return hide_numba(str(tmp_path))


def line_with(text, *facts):
    """The first line of ``text`` holding every one of ``facts`` (values, names: what a
    message must say, not its wording), or None."""
    for line in text.splitlines():
        if all(str(f) in line for f in facts):
            return line
    return None


def worker(name):
    return os.path.join(WORKERS, name)


def assert_ok(proc, nprocs, marker='OK'):
    # Ranks' lines can interleave in mpiexec's merged stdout: count the markers, not lines.
    lines = re.findall(marker + r' rank \d+[^\n]*?(?=OK rank|\n|$)', proc.stdout)
    ranks = set(re.findall(marker + r' rank (\d+)', proc.stdout))
    assert proc.returncode == 0 and len(ranks) == nprocs, (
        'exit code {}, {} of {} ranks reported {}\nstdout:\n{}\nstderr:\n{}'.format(
            proc.returncode, len(lines), nprocs, marker, proc.stdout[-6000:],
            proc.stderr[-6000:]))
    return lines


def _mpi_functions(module):
    """Names of the module's functions that start mpiexec, directly or through another."""
    import inspect
    sources = {}
    for name, fn in vars(module).items():
        if inspect.isfunction(fn) and fn.__module__ == module.__name__:
            try:
                sources[name] = inspect.getsource(fn)
            except OSError:
                pass
    found = {n for n, src in sources.items() if 'run_mpi(' in src}
    grown = True
    while grown:
        grown = False
        for name, src in sources.items():
            if name not in found and any(f + '(' in src for f in found):
                found.add(name)
                grown = True
    return found


# --- the session's MPI worlds (tests/mpi_world.py) -----------------------------------------
_WORLDS = []


@pytest.fixture(scope='session')
def mpi_world(tmp_path_factory):
    """``mpi_world(nprocs, module, function, *args, env=None, timeout=300)`` runs
    ``tests/mpi_workers/<module>.py``'s ``function(comm, *args)`` on every rank of the
    session's world of nprocs ranks; returns the ranks' return values. A test using it must
    take ``nprocs`` as a parameter: the tests are ordered by it, one world alive at a time."""
    import mpi_world as harness
    exe = mpiexec_path()
    if exe is None:
        pytest.skip('no mpiexec: run `make setup` (installs the mpich wheel into .venv)')
    worlds = harness.Worlds(str(tmp_path_factory.mktemp('worlds')), [exe], None)
    _WORLDS.append(worlds)

    def run(nprocs, module, function, *args, **kwargs):
        worlds.env = job_env(nprocs, yielding=False)
        try:
            return worlds.run(nprocs, module, function, *args, **kwargs)
        except harness.CheckFailed as e:
            failure = str(e)
        pytest.fail(failure, pytrace=False)  # outside the except: no chained traceback
    yield run
    worlds.close()


def _world_ranks(item):
    callspec = getattr(item, 'callspec', None)
    if 'mpi_world' not in getattr(item, 'fixturenames', ()):
        return None
    if callspec is None or 'nprocs' not in callspec.params:
        raise pytest.UsageError('{} uses mpi_world without an nprocs parameter'.format(
            item.nodeid))
    return callspec.params['nprocs']


def pytest_collection_modifyitems(config, items):
    # The `mpi` marker is given by what a test does, not by hand: every test whose function
    # (or a helper of its module that it calls) starts mpiexec through run_mpi, and every
    # test that runs its check in a world.
    cache = {}
    for item in items:
        module = getattr(item, 'module', None)
        if module is None:
            continue
        if module not in cache:
            cache[module] = _mpi_functions(module)
        if (getattr(item, 'originalname', None) in cache[module]
                or {'mpi_world', 'lane'} & set(getattr(item, 'fixturenames', ()))):
            item.add_marker(pytest.mark.mpi)
    # The world tests last, by rank count (stable): each world starts once and only one is
    # alive at a time. Before them the tests that take a job of the background lane: the
    # longer the rest ran, the more of that job is done when its test asks for it.
    ranks = {id(item): _world_ranks(item) for item in items}
    def group(item):
        if ranks[id(item)] is not None:
            return 3
        return 1 if item.get_closest_marker('lane') else \
            2 if item.get_closest_marker('after_lane') else 0
    groups = {id(i): group(i) for i in items}
    items[:] = ([i for g in (0, 1, 2) for i in items if groups[id(i)] == g]
                + sorted((i for i in items if ranks[id(i)] is not None),
                         key=lambda i: ranks[id(i)]))


# --- no test writes into the checkout ------------------------------------------------------
_SKIP_DIRS = {'.git', '.venv', '__pycache__', '.pytest_cache'}


def _checkout_files():
    found = set()
    for base, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.endswith('.egg-info')]
        found.update(os.path.relpath(os.path.join(base, f), ROOT) for f in files)
        found.update(os.path.relpath(os.path.join(base, d), ROOT) for d in dirs)
    return found


def pytest_sessionstart(session):
    session.config._checkout_before = _checkout_files()


# --- the background lane ---------------------------------------------------------------------
# Why: the full tier keeps 2 cores about 1.45 busy (single-process tests use one, jobs that
# wait for a watchdog, a batch system or a kill use less), and its largest CPU-bound jobs (the
# aarch64 ranks under QEMU: 85 s of both cores) need no clock: nothing in them is judged by
# time. Such a job starts when collection ends at the lowest priority (LOWEST) and takes what
# the other tests leave: it weighs 15 against their 1024, so the tests beside it, the timed
# ones among them (watchdogs, stalls), keep their cores. Its test runs after the
# others (before the worlds, which keep both cores busy) and waits for the job there, alone
# by then. A test declares its job with ``@pytest.mark.lane(name)`` and a module-level
# ``LANE = {name: function(folder)}``, the function returning ``run_mpi``'s arguments as a
# dict (``folder``: the job's own, removed at the end); the ``lane`` fixture gives its result
# as ``run_mpi`` would. Nothing is started for a test that is deselected or skipped by its
# module's ``skipif``. A test that reads the whole machine's state, which a job beside it
# changes (``/dev/shm``'s names), is marked ``after_lane``: it runs after the lane's tests.
# The lowest priority for a job in a session of its own (its process group is what kill()
# ends). `nice` alone is not enough: where the kernel groups processes by session
# (CONFIG_SCHED_AUTOGROUP, /proc/sys/kernel/sched_autogroup_enabled, on here), nice weighs a
# process only against its own session's, and each session weighs the same as every other
# (an ImageNet example test beside two niced busy loops: 33 -> 48-55 s wall). The session's
# own nice, /proc/self/autogroup, weighs the session (33 -> 35-37 s).
LOWEST = ['sh', '-c', 'echo 19 2>/dev/null >/proc/self/autogroup; exec nice -n 19 "$@"', 'lane']


class _LaneJob(object):
    """One job of the lane: started by ``start``, its end recorded by a thread that then
    starts the next job of the lane (``follow``): one at a time, since ranks beside each
    other on the cores left over would wait for each other instead of working."""

    def __init__(self, name, folder, nprocs, argv, timeout=240, env=None, python=None):
        self.name, self.folder, self.timeout = name, folder, timeout
        self.argv = [mpiexec_path(), '-n', str(nprocs), python or sys.executable] + list(argv)
        # A rank that waits gives its core up (the MPI's setting for more ranks than
        # cores, tools/oversubscribe.py): the cores it gets are others' leftovers.
        self.env = job_env(nprocs, env)
        self.env.update(oversubscribe.environment(MPI, nprocs, cores=1))
        self.proc = self.started = self.asked = self.ended = None
        self.follow = None
        self._lock = threading.Lock()

    def start(self):
        with self._lock:
            if self.proc is not None:
                return
            self.out = open(os.path.join(self.folder, 'stdout'), 'w+')
            self.err = open(os.path.join(self.folder, 'stderr'), 'w+')
            self.started = time.time()
            self.proc = subprocess.Popen(LOWEST + self.argv, stdout=self.out,
                                         stderr=self.err, stdin=subprocess.DEVNULL,
                                         env=self.env, cwd=ROOT,
                                         start_new_session=True)  # kill() ends every rank
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self):
        self.proc.wait()
        self.ended = time.time()
        if self.follow is not None:
            self.follow.start()

    def result(self):
        """The job's CompletedProcess; its limit counts from when its test asks (before
        that it ran at the lowest priority, as long as the other tests took)."""
        self.asked = time.time()
        self.start()  # where the job before it in the lane has not ended yet
        try:
            self.proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail('background job {!r} ({}) did not finish within {} s of its test '
                        'asking (hang?)\nstdout:\n{}\nstderr:\n{}'.format(
                            self.name, ' '.join(self.argv), self.timeout, self._read(self.out),
                            self._read(self.err)))
        return subprocess.CompletedProcess(self.argv, self.proc.returncode,
                                           self._read(self.out), self._read(self.err))

    @staticmethod
    def _read(f):
        f.seek(0)
        return f.read()

    def kill(self):
        self.follow = None
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()

    def close(self):
        self.kill()
        if self.proc is not None:
            self.out.close()
            self.err.close()
        shutil.rmtree(self.folder, ignore_errors=True)


_LANE = {}  # name -> _LaneJob, in the lane's order


def _lane_name(item):
    marker = item.get_closest_marker('lane')
    return marker.args[0] if marker else None


def _skipped_by_module(item):
    for marker in item.iter_markers('skipif'):
        if marker.args and marker.args[0] is True:
            return True
    return False


def _lane_job(name, module):
    if name not in _LANE:
        import tempfile
        folder = tempfile.mkdtemp(prefix='chainermn_torus_lane_')  # removed at the end
        job = _LaneJob(name, folder, **getattr(module, 'LANE')[name](folder))
        if _LANE:
            list(_LANE.values())[-1].follow = job
        _LANE[name] = job
    return _LANE[name]


def pytest_collection_finish(session):
    if mpiexec_path() is None:
        return
    for item in session.items:
        name = _lane_name(item)
        if name and not _skipped_by_module(item):
            _lane_job(name, item.module)
    if _LANE:
        next(iter(_LANE.values())).start()


@pytest.fixture
def lane(request):
    """The result of the test's background-lane job (see above), as ``run_mpi`` gives it."""
    name = _lane_name(request.node)
    if name is None:
        raise pytest.UsageError('{} uses lane without @pytest.mark.lane(name)'.format(
            request.node.nodeid))
    if mpiexec_path() is None:
        pytest.skip('no mpiexec: run `make setup` (installs the mpich wheel into .venv)')
    return _lane_job(name, request.module).result()


# --- one summary of what was skipped, and why ---------------------------------------------
# A skip for a real part that apt or pip installs on the test machine names the command in
# its reason; in CI (.ci/run sets CHAINERMN_TORUS_CI=1) each such skip fails the run.
INSTALLABLE = ('make simgrid', 'make aarch64', 'make setup', 'apt-get')
_SKIPS = {}  # reason -> test ids


def pytest_runtest_logreport(report):
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = report.longrepr[2]
        if reason.startswith('Skipped: '):
            reason = reason[len('Skipped: '):]
        _SKIPS.setdefault(reason, []).append(report.nodeid)


def installable(reason):
    return any(command in reason for command in INSTALLABLE)


def pytest_terminal_summary(terminalreporter):
    write = terminalreporter.write_line
    if _WORLDS:
        started = sum(sum(w.started.values()) for w in _WORLDS)
        checks = {}
        for w in _WORLDS:
            for p, n in w.checks.items():
                checks[p] = checks.get(p, 0) + n
        write('MPI worlds: {} started, checks by P: {}'.format(
            started, ', '.join('{}: {}'.format(p, checks[p]) for p in sorted(checks))))
    for job in _LANE.values():
        if job.ended and job.asked:
            write('background lane: {} ran {:.0f} s, {:.0f} s of them after its test asked'
                  .format(job.name, job.ended - job.started,
                          max(0.0, job.ended - job.asked)))
    if not _SKIPS:
        write('skipped: none')
        return
    write('skipped: {} tests, by reason:'.format(sum(len(v) for v in _SKIPS.values())))
    for reason, ids in sorted(_SKIPS.items(), key=lambda kv: -len(kv[1])):
        mark = ' [installable here]' if installable(reason) else ''
        write('  {:3d} x {}{}   e.g. {}'.format(len(ids), reason, mark, ids[0]))


def pytest_sessionfinish(session, exitstatus):
    for job in _LANE.values():  # a run cut short leaves no job behind
        job.close()
    if os.environ.get('CHAINERMN_TORUS_CI') and any(installable(r) for r in _SKIPS):
        sys.stderr.write('\nCI: tests skipped for parts this machine can install: {}\n'.format(
            '; '.join(r for r in _SKIPS if installable(r))))
        session.exitstatus = 1

    # Outputs belong in tmp_path: a file or folder that appeared in the checkout during the
    # run fails it, naming the paths.
    before = getattr(session.config, '_checkout_before', None)
    if before is None:
        return
    new = sorted(_checkout_files() - before)
    if new:
        sys.stderr.write('\ntests wrote into the checkout: {}\n'.format(', '.join(new[:20])))
        session.exitstatus = 1
