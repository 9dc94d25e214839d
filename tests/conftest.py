"""Helpers for tests that start real MPI jobs with the virtualenv's mpiexec (mpich wheel)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from chainermn_torus import config

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



def run_mpi(nprocs, argv, timeout=240, env=None, python=None):
    """Run `mpiexec -n nprocs python argv...` (``python``: another interpreter for the ranks,
    such as the aarch64 one under QEMU); returns CompletedProcess (text)."""
    exe = mpiexec_path()
    if exe is None:
        pytest.skip('no mpiexec: run `make setup` (installs the mpich wheel into .venv)')
    full_env = dict(os.environ)
    # Oversubscribed ranks on 2 cores: one BLAS thread each, or they fight for the cores.
    full_env.update({'OMP_NUM_THREADS': '1', 'OPENBLAS_NUM_THREADS': '1',
                     'PYTHONPATH': ROOT + os.pathsep + full_env.get('PYTHONPATH', '')})
    full_env.update(env or {})
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


def pytest_collection_modifyitems(config, items):
    # The `mpi` marker is given by what a test does, not by hand: every test whose function
    # (or a helper of its module that it calls) starts mpiexec through run_mpi.
    cache = {}
    for item in items:
        module = getattr(item, 'module', None)
        if module is None:
            continue
        if module not in cache:
            cache[module] = _mpi_functions(module)
        if getattr(item, 'originalname', None) in cache[module]:
            item.add_marker(pytest.mark.mpi)


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


def pytest_sessionfinish(session, exitstatus):
    # Outputs belong in tmp_path: a file or folder that appeared in the checkout during the
    # run fails it, naming the paths.
    before = getattr(session.config, '_checkout_before', None)
    if before is None:
        return
    new = sorted(_checkout_files() - before)
    if new:
        sys.stderr.write('\ntests wrote into the checkout: {}\n'.format(', '.join(new[:20])))
        session.exitstatus = 1
