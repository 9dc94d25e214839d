"""docs/cluster.md's cluster install, run line for line as the doc writes it
(scripts/cluster_recipe.py), against Debian's Open MPI 4.1 standing for a site's MPI: mpi4py
built from source against it, the package installed from a wheel of the checkout into a new
venv; `chainermn-torus check` there names Open MPI and oneDNN, and a 2-rank MNIST job with
rsap under Open MPI's own mpiexec trains to the end, to the same bits as the project's venv
under MPICH.

Needs root and apt-get (Debian's Open MPI, unless installed), the package index (pip) and
the data; the recipe takes about 1 minute here with CFLAGS=-O0 (3 minutes at the
defaults, most of it compiling mpi4py).
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from conftest import ROOT, job_env, mpiexec_path

SCRIPT = os.path.join(ROOT, 'scripts', 'cluster_recipe.py')


def _reason():
    have_openmpi = os.path.exists('/usr/bin/mpicc.openmpi')
    if not have_openmpi and (os.geteuid() != 0 or not shutil.which('apt-get')):
        return ('needs Debian\'s Open MPI, or root with apt-get to install it '
                '(apt-get install libopenmpi-dev openmpi-bin)')
    if not os.path.isdir(DEFAULT_MNIST_DIR):
        return 'Debian package dataset-fashion-mnist is not installed (make setup installs it)'
    return None


REASON = _reason()
pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(REASON is not None, reason=str(REASON))]


def _recipe_module():
    spec = importlib.util.spec_from_file_location('cluster_recipe', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def recipe(tmp_path_factory):
    top = tmp_path_factory.mktemp('recipe')
    report = top / 'report.json'
    # CFLAGS=-O0: mpi4py's 10 MB of generated C took 157 s to compile at Python's -g -O3
    # on one core, 23 s at -O0. The flags set how fast mpi4py's own glue runs, not which MPI
    # it is built against or what that MPI computes (the job's bits below); the figures in
    # docs/cluster.md are of a run at the defaults.
    proc = subprocess.run([sys.executable, SCRIPT, str(top / 'run'), '--job', '--json',
                           str(report)], capture_output=True, text=True, timeout=1500,
                          env=dict(os.environ, CFLAGS='-O0'))
    found = json.loads(report.read_text()) if report.exists() else {}
    try:
        yield proc, found
    finally:
        shutil.rmtree(top / 'run', ignore_errors=True)   # a venv of about 1 GB


def test_the_recipe_runs_as_the_doc_writes_it(recipe):
    proc, found = recipe
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc_lines = _recipe_module().recipe_lines()
    assert [row['line'] for row in found['recipe']['lines']] == doc_lines
    assert doc_lines[0].startswith('module load ')          # the line a site's module stands in
    assert any('--no-binary=mpi4py' in ln for ln in doc_lines)
    assert any(ln.startswith('pip install ".[cpu]"') for ln in doc_lines)
    # the recipe's own look at the library mpi4py loads
    assert 'Open MPI v4.1' in found['recipe']['stdout'], found['recipe']['stdout']


def test_check_names_open_mpi_built_and_loaded_its_launcher_and_onednn(recipe):
    proc, found = recipe
    check = found['check']
    assert check['returncode'] == 0, check
    rows = {r['name']: r for r in check['rows']}
    assert 'built against' in rows['mpi4py']['value'], rows['mpi4py']  # from source
    assert 'libmpi.so.40' in rows['mpi4py']['value'], rows['mpi4py']
    assert rows['MPI library']['value'].startswith('Open MPI v4.1'), rows['MPI library']
    assert rows['launcher']['status'] == 'ok', rows['launcher']
    assert 'OpenRTE) 4.1' in rows['launcher']['value'], rows['launcher']
    assert rows['oneDNN']['status'] == 'ok', rows['oneDNN']
    assert rows['oneDNN']['value'].startswith('3.2'), rows['oneDNN']
    assert rows['numba']['status'] == 'ok' and rows['Chainer']['value'] == '7.8.1', rows


def test_the_package_is_a_wheel_in_the_venv_not_the_checkout(recipe):
    proc, found = recipe
    python = os.path.join(found['recipe']['venv'], 'bin', 'python')
    code = 'import chainermn_torus; print(chainermn_torus.__file__)'
    where = subprocess.run([python, '-c', code], capture_output=True, text=True, cwd='/',
                           timeout=120)
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(os.path.join(found['recipe']['venv'], 'lib')), where.stdout
    site = os.path.dirname(os.path.dirname(where.stdout.strip()))
    assert not [f for f in os.listdir(site) if f.startswith('__editable__') or
                f.endswith('.egg-link')], os.listdir(site)


def test_a_2_rank_rsap_job_under_open_mpi_trains_to_the_same_bits_as_under_mpich(recipe,
                                                                                 tmp_path):
    proc, found = recipe
    job = found['job']
    assert job['returncode'] == 0, job['stdout'] + job['stderr']
    assert 'rsap on P = 2' in job['stdout'] and 'test accuracy:' in job['stdout'], job['stdout']
    # The same job in the project's venv, under MPICH: the same oneDNN and numba, and a sum
    # of two values has one order, so the same bits.
    ours = subprocess.run([mpiexec_path(), '-n', '2', sys.executable,
                           'examples/mnist/train_mnist.py', '--communicator', 'rsap',
                           '--epoch', '1', '--limit', '1000', '--out', str(tmp_path)],
                          cwd=ROOT, env=job_env(2), capture_output=True, text=True, timeout=300)
    assert ours.returncode == 0, ours.stdout[-2000:] + ours.stderr[-2000:]
    with np.load(os.path.join(job['out'], 'model_final.npz')) as a, \
            np.load(tmp_path / 'model_final.npz') as b:
        assert sorted(a.files) == sorted(b.files)
        for name in a.files:
            assert np.array_equal(a[name], b[name]), name
