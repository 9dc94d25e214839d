"""A real Slurm (Debian's slurm-wlm 22.05, scripts/slurm_cluster.sh) on the emulated cluster:
the job script `chainermn-torus jobscript --system slurm` writes, submitted with sbatch, runs
MNIST on 2 nodes x 2 ranks to the end, with srun's binding and PMI-2 (MPICH); a PMI
mismatch is named at once instead of training N copies apart.

Needs root, network namespaces and apt-get (or slurm-wlm and munge installed); skipped with
the reason otherwise.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from conftest import ROOT, netns_refused, run_cli

SCRIPT = os.path.join(ROOT, 'scripts', 'slurm_cluster.sh')
CONF = '/run/chainermn-torus-slurm/slurm.conf'
VENV = os.path.dirname(os.path.dirname(sys.executable))


def _reason():
    if os.geteuid() != 0:
        return 'needs root (network namespaces, slurmd, munged)'
    if not shutil.which('ip'):
        return 'needs iproute2 (ip) for the emulated nodes (apt-get install iproute2)'
    if not (shutil.which('slurmctld') or shutil.which('apt-get')):
        return 'needs slurm-wlm and munge, or apt-get to install them'
    refused = netns_refused()
    if refused:
        return refused
    if not os.path.isdir(DEFAULT_MNIST_DIR):
        return 'Debian package dataset-fashion-mnist is not installed (make setup installs it)'
    return None


REASON = _reason()
pytestmark = [pytest.mark.root, pytest.mark.skipif(REASON is not None, reason=str(REASON))]


def sh(*args, timeout=180):
    proc = subprocess.run(['bash', SCRIPT] + list(args), capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def forget_munge_runtime():
    """/run as after a boot (a tmpfs): no /run/munge where no munged runs. A machine where
    munge's package once started munged keeps it, and there the start's own set-up went
    untested (issue 71: every new machine failed, every old one passed)."""
    if subprocess.run(['pgrep', '-x', 'munged'], capture_output=True).returncode != 0:
        shutil.rmtree('/run/munge', ignore_errors=True)


@pytest.fixture(scope='module')
def slurm():
    if not shutil.which('slurmctld'):
        sh('install', timeout=600)
    forget_munge_runtime()
    try:
        sh('up', '2')  # a failed start takes down what it started: the next tests' cluster
        yield dict(os.environ, SLURM_CONF=CONF)
    finally:
        sh('down')


def sbatch(script, out, env, timeout=240):
    """Submit, wait for the end (polling: sbatch --wait sleeps up to 10 s between looks),
    return (exit code, the job's output)."""
    import time
    submit = subprocess.run(['sbatch', '--parsable', '-o', str(out), str(script)], env=env,
                            capture_output=True, text=True, timeout=60, cwd=str(out.parent))
    assert submit.returncode == 0, submit.stderr
    job = submit.stdout.strip().split(';')[0]
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = subprocess.run(['scontrol', '-o', 'show', 'job', job], env=env,
                               capture_output=True, text=True).stdout
        m = re.search(r'JobState=(\S+).* ExitCode=(\d+):', state)
        if m and m.group(1) not in ('PENDING', 'RUNNING', 'CONFIGURING', 'COMPLETING'):
            log = out.read_text() if out.exists() else ''
            return (0 if m.group(1) == 'COMPLETED' else int(m.group(2)) or 1), log
        time.sleep(0.5)
    subprocess.run(['scancel', job], env=env, capture_output=True)
    pytest.fail('the job did not end in {} s:\n{}'.format(
        timeout, out.read_text()[-4000:] if out.exists() else '(no output)'))


def test_generated_job_script_trains_mnist_on_two_nodes_by_sbatch(slurm, tmp_path):
    job = tmp_path / 'job.sh'
    proc = run_cli(['jobscript', '--system', 'slurm', '--nodes', '2', '--ranks-per-node', '2',
                    '--hours', '0.05', '--venv', VENV, '--name', 'mnist-slurm', '--output',
                    str(job), '--', 'python', os.path.join(ROOT, 'examples', 'mnist',
                                                           'train_mnist.py'),
                    '--epoch', '1', '--limit', '2000', '--out', str(tmp_path / 'result')])
    assert proc.returncode == 0, proc.stderr
    # The launcher's loader replaces the example's iterator, so the log shows the placement
    # each rank got from srun's binding (one CPU per rank here: --cpus-per-task=1).
    # UCX over TCP only, as scripts/emulate_cluster.sh runs MPI: the ranks of different
    # nodes talk through the emulated links (UCX's defaults would find shared memory: one
    # kernel).
    env = dict(slurm, CHAINERMN_TORUS_LOADER='ours', CHAINERMN_TORUS_LOADER_PROCESSES='1',
               UCX_TLS='tcp,self')
    code, log = sbatch(job, tmp_path / 'out.log', env)
    assert code == 0, log[-4000:]
    print(log)
    assert re.search(r'chainermn-torus job mnist-slurm: 2 node\(s\) x 2 rank\(s\).* on node0', log)
    assert f'python: {VENV}/bin/python' in log  # the venv's, activated by the script
    assert 'rsap on P = 4, grid (M, N) = (2, 2) [M = ranks per node]' in log  # 2 per node
    placement = re.search(r'LoaderIterator \(1 process, affinity same-core, loader CPUs (\S+), '
                          r'compute CPUs (\S+)\)', log)
    assert placement and placement.group(2).isdigit(), log[-3000:]  # one CPU: srun's -c 1
    accuracy = float(re.search(r'test accuracy: ([0-9.]+)', log).group(1))
    assert accuracy > 0.4, log[-2000:]
    assert (tmp_path / 'result' / 'summary.json').exists()


def test_pmi_mismatch_is_named_at_once(slurm):
    # --mpi=none: MPICH finds no PMI it speaks and each task becomes a world of one.
    proc = subprocess.run(['srun', '-N2', '-n4', '--mpi=none', sys.executable, '-m',
                           'chainermn_torus.run', os.path.join(ROOT, 'tests', 'mpi_workers',
                                                               'naive_script.py')],
                          env=slurm, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode != 0 and 'OK rank' not in proc.stdout
    assert proc.stderr.count('a world of 1 rank) but SLURM_STEP_NUM_TASKS') == 4, \
        proc.stderr[-3000:]
    assert 'PMI/launcher mismatch' in proc.stderr


def test_install_where_installed_runs_no_apt(slurm, tmp_path):
    # An apt-get first on the PATH that fails, naming itself: `install` must not reach it.
    fake = tmp_path / 'bin'
    fake.mkdir()
    (fake / 'apt-get').write_text('#!/bin/sh\necho "apt-get ran: $*" >&2\nexit 9\n')
    (fake / 'apt-get').chmod(0o755)
    env = dict(os.environ, PATH='{}:{}'.format(fake, os.environ['PATH']))
    proc = subprocess.run(['bash', SCRIPT, 'install'], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=env)
    assert proc.returncode == 0 and 'apt-get ran' not in proc.stderr, proc.stderr
    assert re.match(r'slurm_cluster: slurm-wlm 22\.05\S* and munge already installed',
                    proc.stdout), proc.stdout
    # munged was started from nothing by the fixture: its directories as munged needs them.
    assert oct(os.stat('/run/munge').st_mode & 0o777) == '0o755'
    assert os.stat('/etc/munge/munge.key').st_size > 0
