"""Helpers for tests that start real MPI jobs with the virtualenv's mpiexec (mpich wheel)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKERS = os.path.join(ROOT, 'tests', 'mpi_workers')


def mpiexec_path():
    here = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    return here if os.path.exists(here) else shutil.which('mpiexec')


def run_mpi(nprocs, argv, timeout=240, env=None):
    """Run `mpiexec -n nprocs python argv...`; returns CompletedProcess (text)."""
    exe = mpiexec_path()
    if exe is None:
        pytest.skip('no mpiexec: run `make setup` (installs the mpich wheel into .venv)')
    full_env = dict(os.environ)
    # Oversubscribed ranks on 2 cores: one BLAS thread each, or they fight for the cores.
    full_env.update({'OMP_NUM_THREADS': '1', 'OPENBLAS_NUM_THREADS': '1',
                     'PYTHONPATH': ROOT + os.pathsep + full_env.get('PYTHONPATH', '')})
    full_env.update(env or {})
    cmd = [exe, '-n', str(nprocs), sys.executable] + list(argv)
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=full_env, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        pytest.fail('mpiexec -n {} {} did not finish in {} s (hang?)\nstdout:\n{}\nstderr:\n{}'
                    .format(nprocs, ' '.join(argv), timeout, e.stdout, e.stderr))


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
