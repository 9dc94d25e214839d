"""Helpers for tests that start real MPI jobs with the virtualenv's mpiexec (mpich wheel)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from chainermn_torus import config
from chainermn_torus.process import STATE
from chainermn_torus.runtime.files import devshm
from chainermn_torus.tools import oversubscribe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A stand-in Chainer checkout: its tests are run by scripts/chainer_function_tests.sh in
# its own sessions (tests/scripts/test_chainer_function_tests.py), never in this one.
collect_ignore = [os.path.join("scripts", "chainer_checkout")]
WORKERS = os.path.join(ROOT, 'tests', 'mpi_workers')
# The tests' sitecustomize (its docstring says why): last on every child's PYTHONPATH, so
# that a measuring one put first (scripts/interpreter_census.py) still wins.
SITE = os.path.join(ROOT, 'tests', 'site')
os.environ['PYTHONPATH'] = os.pathsep.join(
    [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p and p != SITE] + [SITE])


@pytest.fixture(autouse=True)
def fresh_settings():
    """Each test resolves the settings from its own environment (a job resolves them once;
    this process runs many tests, some with a variable of their own)."""
    STATE.settings = None
    yield
    STATE.settings = None


def settings_again():
    """Resolve the settings again from the environment now and hold them, as a new job
    would (a test that changes a variable after something read them)."""
    return config.install(config.resolve())


def pythonpath(*first):
    """PYTHONPATH for a process a test starts: ``first``, this checkout, the tests' site
    folder."""
    return os.pathsep.join(list(first) + [ROOT, SITE])


# `make test MPI=impi|openmpi` (scripts/with_mpi.sh) names the MPI and its own mpiexec; the
# default is the venv's mpich wheel.
MPI = config.resolve()['mpi']


def mpiexec_path():
    chosen = config.resolve()['mpiexec']
    if chosen:
        return chosen
    here = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    return here if os.path.exists(here) else shutil.which('mpiexec')



def unlimited_env():
    """This environment without the test jobs' thread limits: the libraries' own defaults
    (the cores), so that a limit the code under test fails to apply shows."""
    env = dict(os.environ, PYTHONPATH=pythonpath())
    for name in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS',
                 'NUMBA_NUM_THREADS', 'CHAINERMN_TORUS_THREADS'):
        env.pop(name, None)
    return env


def job_env(nprocs, env=None, yielding=True):
    """The environment of a test job of nprocs ranks on this machine."""
    full_env = dict(os.environ)
    # Oversubscribed ranks on 2 cores: one BLAS thread each, or they fight for the cores;
    # and (``yielding``) the MPI's own setting that makes a waiting rank give its core up
    # instead of spinning (tools/oversubscribe.py), for any job of 2 ranks or more: a test
    # job never has the cores to itself (its loader processes; the other lane of `make
    # test`, scripts/test_lanes.sh), and a spinning rank takes the core from the process it
    # waits for. The MPICH worlds go without: they run alone, and MPICH's sleep costs their
    # many small collectives more than the spinning (docs/development.md).
    full_env.update({'OMP_NUM_THREADS': '1', 'OPENBLAS_NUM_THREADS': '1',
                     'PYTHONPATH': ROOT + os.pathsep + full_env.get('PYTHONPATH', '')})
    if yielding:
        full_env.update(oversubscribe.environment(MPI, nprocs, cores=1))
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


@pytest.fixture
def no_numba(tmp_path):
    """A PYTHONPATH entry under which ``import numba`` fails, as where it is not installed."""
    (tmp_path / 'numba').mkdir()
    (tmp_path / 'numba' / '__init__.py').write_text(
        'raise ImportError("numba is hidden by the test (tests/conftest.py, no_numba)")\n')
    return str(tmp_path)


def netns_refused():
    """Why this machine cannot create a network namespace (the emulated cluster's nodes), or
    None. The probe's name is this process's: the two pytest lanes of `make test` collect
    the same modules at the same time."""
    name = f'cmt-probe-{os.getpid()}'
    probe = subprocess.run(['ip', 'netns', 'add', name], capture_output=True, text=True)
    if probe.returncode != 0:
        return 'cannot create network namespaces here: ' + probe.stderr.strip()
    subprocess.run(['ip', 'netns', 'del', name], capture_output=True)
    return None


@pytest.fixture(scope='session')
def dataset_root(tmp_path_factory):
    """CHAINER_DATASET_ROOT for scripts that call chainer.datasets.get_mnist(): its cache,
    filled from Debian's Fashion-MNIST (no download on a compute node)."""
    from chainermn_torus.datasets.mnist import write_chainer_cache
    root = tmp_path_factory.mktemp('chainer-datasets')
    write_chainer_cache(str(root))
    return str(root)


@pytest.fixture(scope='session')
def imagenet_lists(tmp_path_factory):
    """A small ImageNet-format subset (JPEG files, lists, mean image) of 40 px images."""
    out = str(tmp_path_factory.mktemp('imagenet') / 'fmnist')
    proc = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts',
                                                        'make_imagenet_subset.py'),
                           '--out', out, '--per-class', '6', '--val-per-class', '2',
                           '--size', '40'], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def line_with(text, *facts):
    """The first line of ``text`` holding every one of ``facts`` (values, names: what a
    message must say, not its wording), or None."""
    for line in text.splitlines():
        if all(str(f) in line for f in facts):
            return line
    return None


def script(name):
    """A module of scripts/ (``structure_figures``, ``private_names``), loaded by its path."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, 'scripts',
                                                                     name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker(name):
    return os.path.join(WORKERS, name)


def assert_ok(proc, nprocs, marker='OK'):
    # Ranks' lines can interleave in mpiexec's merged stdout: count the markers, not lines.
    lines = re.findall(marker + r' rank \d+[^\n]*?(?=OK rank|\n|$)', proc.stdout)
    ranks = set(re.findall(marker + r' rank (\d+)', proc.stdout))
    assert proc.returncode == 0 and len(ranks) == nprocs, (
        f'exit code {proc.returncode}, {len(lines)} of {nprocs} ranks '
        f'reported {marker}\nstdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-6000:]}')
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
        # Intel MPI's and Open MPI's worlds run their fast sets side by side
        # (scripts/test_lanes.sh): there a waiting rank gives its core up.
        worlds.env = job_env(nprocs, yielding=MPI != 'mpich')
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
        raise pytest.UsageError(f'{item.nodeid} uses mpi_world without an nprocs parameter')
    return callspec.params['nprocs']


# World sizes left to `make test-wide` (marker `wide`): `make test` keeps P = 1, 2, 3, 4 and 6,
# whose grids (1 x P, 2 x 2, 2 x 3, 3 x 2) and counts that are not powers of two (3, 6) are
# what the larger sizes repeat at 38 s of the worlds' 115 s on 2 cores (docs/development.md).
WIDE_RANKS = (5, 7, 8)


def refuse_root_in_world(items):
    """`make test` runs the root tests in lane A and the world tests after the lanes
    (scripts/test_lanes.sh): a test that were both would run twice. Checked at every
    collection, before ``-m`` deselects anything: every lane sees the whole suite."""
    both = [item.nodeid for item in items
            if item.get_closest_marker('root') and item.get_closest_marker('world')]
    if both:
        raise pytest.UsageError('marked both root and world (scripts/test_lanes.sh would run '
                                'them twice): {}'.format(', '.join(both)))


def pytest_collection_modifyitems(config, items):
    # The `mpi` marker is given by what a test does, not by hand: every test whose function
    # (or a helper of its module that it calls) starts mpiexec through run_mpi, and every
    # test that runs its check in a world.
    cache = {}
    ranks = {id(item): _world_ranks(item) for item in items}
    for item in items:
        module = getattr(item, 'module', None)
        if module is None:
            continue
        if module not in cache:
            cache[module] = _mpi_functions(module)
        in_world = 'mpi_world' in getattr(item, 'fixturenames', ())
        if getattr(item, 'originalname', None) in cache[module] or in_world:
            item.add_marker(pytest.mark.mpi)
        if in_world:
            item.add_marker(pytest.mark.world)
            if ranks[id(item)] in WIDE_RANKS:
                item.add_marker(pytest.mark.wide)
    refuse_root_in_world(items)
    # The tests that start no MPI rank first, then the jobs of their own, then the world
    # tests, by rank count (stable): each world starts once and only one is alive at a time;
    # and beside the start of `make test`'s lane A (scripts/test_lanes.sh: the fault matrix)
    # run the tests whose processes never spin in MPI.
    items[:] = ([i for i in items if ranks[id(i)] is None and not i.get_closest_marker('mpi')]
                + [i for i in items if ranks[id(i)] is None and i.get_closest_marker('mpi')]
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
            started, ', '.join(f'{p}: {checks[p]}' for p in sorted(checks))))
    if not _SKIPS:
        write('skipped: none')
        return
    write(f'skipped: {sum(len(v) for v in _SKIPS.values())} tests, by reason:')
    for reason, ids in sorted(_SKIPS.items(), key=lambda kv: -len(kv[1])):
        mark = ' [installable here]' if installable(reason) else ''
        write(f'  {len(ids):3d} x {reason}{mark}   e.g. {ids[0]}')


def pytest_sessionfinish(session, exitstatus):
    # This process, where a test started MPI in it, is a job of its own: under Open MPI its
    # segment stayed in /dev/shm at every run's exit (runtime/files/devshm.py, "singleton").
    devshm.unlink_singleton()
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
