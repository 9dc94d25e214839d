"""``chainermn-torus elastic`` (tools.elastic, issue 73) on this machine as one node: the
launcher's command lines, the nodes' answers, a job that ends well, and the failures that
are the script's own (every node answers: the job ends with the script's exit code, no
second step). The losses themselves need the emulated cluster: test_elastic_cluster.py."""
import os
import secrets
import socket
import subprocess
import sys

import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from chainermn_torus.extensions.checkpoint import snapshot_place
from chainermn_torus.runtime.files import devshm
from chainermn_torus.runtime.watch import abort
from chainermn_torus.tools import elastic, elastic_node, job_nodes
from conftest import MPI, ROOT, job_env, mpiexec_path

EXAMPLE = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')
needs_data = pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                                reason='Debian package dataset-fashion-mnist is not installed '
                                       '(make setup installs it)')


def test_each_launcher_starts_the_step_on_the_nodes_left():
    nodes = job_nodes.parse_hosts('n0:2,n2:2')
    hydra = elastic.Launcher('hydra', 'mpiexec', ['-genv', 'A', 'b'])
    assert hydra.command(nodes, ['python', 's.py']) == [
        'mpiexec', '-genv', 'A', 'b', '-hosts', 'n0:2,n2:2', '-n', '4', 'python', 's.py']
    ompi = elastic.Launcher('openmpi', 'mpirun').command(nodes, ['x'])
    assert ompi == ['mpirun', '--host', 'n0:2,n2:2', '-np', '4', '--map-by', 'slot',
                    '-x', 'CHAINERMN_TORUS_ELASTIC_STEP', '-x', 'CHAINERMN_TORUS_EXPECT_RANKS',
                    'x']
    srun = elastic.Launcher('srun', 'srun').command(nodes, ['x'])
    assert '--nodelist=n0,n2' in srun and '--ntasks=4' in srun and '--nodes=2' in srun


def test_a_node_slurm_holds_down_is_lost_without_being_asked(tmp_path, monkeypatch):
    """Nodes from Slurm: sinfo says n1 is down, so only n0 is asked (srun would wait for
    n1 until the probe's time is out)."""
    asked = tmp_path / 'asked'
    (tmp_path / 'sinfo').write_text('#!/bin/sh\necho "n0 idle"\necho "n1 down*"\n')
    ready = elastic_node.READY.format(host='$host', ended=0, removed=0)
    (tmp_path / 'launch').write_text(
        f'#!/bin/sh\nhost=${{2%:*}}; echo "$host" >> {asked}\necho "{ready}"\n')
    for f in ('sinfo', 'launch'):
        os.chmod(str(tmp_path / f), 0o755)
    monkeypatch.setenv('PATH', '{}:{}'.format(tmp_path, os.environ['PATH']))
    nodes = job_nodes.parse_hosts('n0:2,n1:2')
    launcher = elastic.Launcher('hydra', str(tmp_path / 'launch'))
    sup = elastic.Supervisor(nodes, ['x'], launcher, probe_timeout=30, slurm=True)
    assert sup.probe(nodes) == {'n0': (0, 0)}
    assert sup.unanswered == {'n1': 'Slurm holds it down* (sinfo)'}
    assert asked.read_text().split() == ['n0']
    # Nodes named by --hosts: Slurm is not asked, and both nodes are.
    asked.unlink()
    plain = elastic.Supervisor(nodes, ['x'], launcher, probe_timeout=30)
    assert sorted(plain.probe(nodes)) == ['n0', 'n1']


def test_a_launcher_that_fails_at_once_is_asked_again_a_silent_node_is_not(tmp_path):
    """Open MPI's PRRTE now and then failed to start its PMIx listener (exit code 213): the
    node was counted lost from the start. A launcher that ends without an answer is asked
    once more; one still failing is named with its words, and a node silent to the end is
    not asked again."""
    asked = tmp_path / 'asked'
    ready = elastic_node.READY.format(host='$host', ended=0, removed=0)
    # n0 fails on its first ask only, n1 on every ask, n2 never answers (sleeps past the end)
    (tmp_path / 'launch').write_text(
        '#!/bin/sh\nhost=${2%:*}\n'
        f'echo "$host" >> {asked}\n'
        'case $host in\n'
        f'  n0) [ "$(grep -c n0 {asked})" -gt 1 ] && echo "{ready}" && exit 0\n'
        '      echo "The PMIx server\'s listener thread failed to start."; exit 213;;\n'
        '  n1) echo "ssh: connect to host n1: No route to host"; exit 255;;\n'
        '  n2) exec sleep 30;;\n'
        'esac\n')
    os.chmod(str(tmp_path / 'launch'), 0o755)
    nodes = job_nodes.parse_hosts('n0:2,n1:2,n2:2')
    launcher = elastic.Launcher('hydra', str(tmp_path / 'launch'))
    sup = elastic.Supervisor(nodes, ['x'], launcher, probe_timeout=2)
    assert sup.probe(nodes) == {'n0': (0, 0)}
    assert sorted(asked.read_text().split()) == ['n0', 'n0', 'n1', 'n1', 'n2']
    assert sup.unanswered == {
        'n1': 'the launcher could not reach it (exit code 255: ssh: connect to host n1: No '
              'route to host)',
        'n2': 'no answer within 2 s'}


def test_a_node_answers_with_its_host_name():
    text = 'noise ' + elastic_node.READY.format(host='node7', ended=2, removed=5) + '\n'
    assert elastic_node.parse_ready(text) == {'node7': (2, 5)}
    assert elastic_node.parse_ready('ssh: connect to host n1: No route to host') == {}


def _elastic(tmp_path, command, extra=(), timeout=240, env=None):
    env = job_env(2, env)
    env['CHAINERMN_TORUS_MPIEXEC'] = env.get('CHAINERMN_TORUS_MPIEXEC') or mpiexec_path()
    if MPI == 'impi':
        pytest.skip("Intel MPI's hydra starts even this host's proxy through its bootstrap "
                    'once -hosts is given (ssh, and fork too, refused here: no ssh on this '
                    'machine); under Slurm its steps start by srun (jobscript --elastic)')
    return subprocess.run([sys.executable, '-m', 'chainermn_torus.tools.cli', 'elastic',
                           '--hosts', socket.gethostname() + ':2', '--probe-timeout', '60'] +
                          list(extra) +
                          ['--report', str(tmp_path / 'report.json'), '--'] + command,
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.example
@needs_data
def test_a_job_that_ends_well_ends_with_its_code_and_leaves_no_snapshot(tmp_path):
    env = own_job()
    before = shm_now(env)
    proc = _elastic(tmp_path, [sys.executable, EXAMPLE, '--epoch', '1', '--limit', '1200',
                               '--unit', '20', '--out', str(tmp_path / 'out'),
                               '--memory-snapshots', '3'], env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'chainermn_torus elastic: training is complete at iteration 6' in proc.stdout
    assert 'step 1 on' not in proc.stdout and 'asks for no snapshots' not in proc.stdout
    assert shm_left(before) == [], shm_left(before)


@pytest.mark.example
@needs_data
def test_a_command_that_asks_for_no_snapshots_gets_them(tmp_path):
    """Issue 82, item 6: the supervisor gives its steps snapshots (the setting the
    examples and the launcher read) where the command keeps none: before, the first lost
    node ended the job."""
    proc = _elastic(tmp_path, [sys.executable, EXAMPLE, '--epoch', '1', '--limit', '1200',
                               '--unit', '20', '--out', str(tmp_path / 'out')])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'the command asks for no snapshots in node memory: its steps keep one every 100 ' \
        'iterations (CHAINERMN_TORUS_MEMORY_SNAPSHOTS=100' in proc.stdout, proc.stdout
    assert 'chainermn_torus elastic: snapshots in node memory are kept in' in proc.stdout
    assert 'chainermn_torus elastic: training is complete at iteration 6' in proc.stdout


@pytest.mark.mpi
def test_a_step_that_ends_well_without_snapshots_ends_the_job_well(tmp_path):
    """Issue 82, item 6: a command that keeps no snapshot (it runs neither the launcher nor
    an example) and ends with 0 is a completion; it was rc 1, "nothing to go on from"."""
    script = tmp_path / 'trains.py'
    script.write_text('print("trained")\n')
    proc = _elastic(tmp_path, [sys.executable, str(script)])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert 'step ended (exit code 0) without keeping snapshots' in proc.stdout, proc.stdout
    assert 'step 1 on' not in proc.stdout


@pytest.mark.mpi
def test_a_failure_with_every_node_answering_is_the_scripts_own(tmp_path):
    script = tmp_path / 'fails.py'
    script.write_text('import sys\nsys.exit(3)\n')
    proc = _elastic(tmp_path, [sys.executable, str(script)])
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    # No snapshot was ever kept: nothing to go on from, said in one line.
    assert 'without keeping snapshots in node memory (the command neither runs ' \
        'chainermn_torus.run nor reads --memory-snapshots): there is nothing to go on from, ' \
        'and the job ends with its exit code' in proc.stdout, proc.stdout
    assert 'step 1 on' not in proc.stdout


def test_bad_requests_are_refused_in_one_line(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, '-m', 'chainermn_torus.tools.cli', 'elastic']
                              + list(args), capture_output=True, text=True, timeout=60,
                              cwd=ROOT)
    proc = run('--hosts', 'a:2')
    assert proc.returncode == 2 and 'no command: give -- python script.py' in proc.stderr
    proc = run('--hosts', 'a:0', '--', 'true')
    assert proc.returncode == 2 and "'a:0' is not host[:ranks]" in proc.stderr
    proc = run('--hosts', 'a:2', '--min-nodes', '0', '--', 'true')
    assert proc.returncode == 2 and '--min-nodes' in proc.stderr
    # P10: a rank count no node holds once forked ranks for minutes.
    proc = run('--hosts', 'localhost:99999999', '--', 'true')
    assert proc.returncode == 2 and 'asks for 99999999 ranks on one host; at most 1024 ' \
        '(MAX_RANKS_PER_HOST' in proc.stderr, proc.stderr
    # P7: launcher arguments that do not split were a ValueError traceback.
    proc = run('--hosts', 'a:2', '--launcher-args', '"x', '--', 'true')
    assert proc.returncode == 2 and "--launcher-args '\"x' does not parse" in proc.stderr \
        and 'Traceback' not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()[-1:]) == 1
    # Issue 85: virtual ranks fewer than the first step's ranks, not a count, or with a
    # global batch (virtual ranks keep the batch on any number of ranks)
    proc = run('--hosts', 'a:2,b:2', '--virtual-ranks', '3', '--', 'true')
    assert proc.returncode == 2 and "--virtual-ranks 3 is fewer than the first step's 4 " \
        'ranks (2 nodes)' in proc.stderr, proc.stderr
    proc = run('--hosts', 'a:2', '--virtual-ranks', 'six', '--', 'true')
    assert proc.returncode == 2 and "--virtual-ranks must be an integer >= 1, got 'six'" \
        in proc.stderr and 'Traceback' not in proc.stderr, proc.stderr
    proc = run('--hosts', 'a:2', '--virtual-ranks', '--global-batch', '4', '--', 'true')
    assert proc.returncode == 2 and 'leave --global-batch out' in proc.stderr, proc.stderr


def test_the_probe_takes_its_run_from_the_environment_only():
    """The run id names the run's snapshots: never on a command line (ps shows it to every
    user). A bad or missing one is refused in one line."""
    for value in ('run', None):
        env = {k: v for k, v in os.environ.items() if k != elastic_node.RUN_VARIABLE}
        if value is not None:
            env[elastic_node.RUN_VARIABLE] = value
        proc = subprocess.run([sys.executable, '-m', 'chainermn_torus.tools.elastic_node'],
                              capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
        assert proc.returncode == 2 and 'Traceback' not in proc.stderr, proc.stderr
        assert 'CHAINERMN_TORUS_ELASTIC_PROBE' in proc.stderr.strip().splitlines()[-1]
    sup = elastic.Supervisor([job_nodes.Node('h', 1)], ['true'],
                             elastic.Launcher('openmpi', 'mpirun'))
    line = sup.launcher.command([job_nodes.Node('h', 1)], ['probe'],
                                passed=(elastic_node.RUN_VARIABLE,))
    assert sup.run_id not in ' '.join(line) and elastic_node.RUN_VARIABLE in line


@pytest.mark.mpi
def test_a_signal_to_a_nodes_ranks_is_a_lost_node_not_an_end(tmp_path):
    """P2: a step whose ranks on a node a SIGTERM ended (runtime.watch.abort's line) ends as
    a failure; the supervisor counts the node lost, as it does a silent one, and goes on
    where nodes are left (here none: the job ends below --min-nodes, said)."""
    script = tmp_path / 'signalled.py'
    script.write_text(
        'import socket, sys\n'
        'print("chainermn_torus: rank 0 ({{}}): {}".format(socket.gethostname()), '
        'flush=True)\n'.format(abort.signal_text('SIGTERM', 'nothing on disk')) +
        'print("chainermn_torus elastic: snapshots in node memory are kept in /dev/shm/x",'
        ' flush=True)\n'
        'sys.exit(143)\n')
    # abort's own line for either signal is what the supervisor reads (it once looked for
    # other words, and a real SIGTERM read as the script's own failure).
    for name in ('SIGTERM', 'SIGINT'):
        line = 'chainermn_torus: rank 3 (h7): ' + abort.signal_text(name, 'x')
        assert elastic._SIGNALLED.findall(line) == [('3', 'h7', name)], line
    proc = _elastic(tmp_path, [sys.executable, str(script)])
    out = proc.stdout
    assert f'node {socket.gethostname()} lost (SIGTERM reached its rank 0)' in out, \
        out + proc.stderr[-2000:]
    assert 'training is complete' not in out and 'every node answers' not in out
    assert proc.returncode == 1, out


@pytest.mark.mpi
def test_a_killed_supervisor_takes_its_step_with_it(tmp_path):
    """P10: the step's launcher dies with the supervisor (PR_SET_PDEATHSIG), SIGKILL
    included, and its ranks with the launcher: nothing of the step runs on. Under Open MPI
    mpirun's ranks outlived it (make test-fresh on af384fa): the supervisor's guard, which
    outlives it, ends the step's session, and says so."""
    import psutil
    script = tmp_path / 'long.py'
    script.write_text('import time\nprint("started", flush=True)\ntime.sleep(120)\n')
    env = job_env(2)
    env['CHAINERMN_TORUS_MPIEXEC'] = env.get('CHAINERMN_TORUS_MPIEXEC') or mpiexec_path()
    if MPI == 'impi':
        pytest.skip("Intel MPI's hydra needs ssh for -hosts here (see _elastic)")
    sup = subprocess.Popen([sys.executable, '-m', 'chainermn_torus.tools.cli', 'elastic',
                            '--hosts', socket.gethostname() + ':2', '--probe-timeout', '60',
                            '--', sys.executable, str(script)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env, cwd=ROOT)
    for line in sup.stdout:
        if 'started' in line:
            break
    step = [p for p in psutil.process_iter(['cmdline'])
            if str(script) in ' '.join(p.info['cmdline'] or [])]
    assert step, 'the step did not start'
    sup.kill()
    sup.wait()
    gone, alive = psutil.wait_procs(step, timeout=20)
    assert not alive, [p.info['cmdline'] for p in alive]
    err = sup.stderr.read()
    assert 'ended without a word (killed): its step ended' in err, err[-2000:]


UNCHANGED = os.path.join(ROOT, 'tests', 'unchanged')


def shm_left(before):
    """What this test's run left in /dev/shm: new names of its job (``own_job``: the other
    lane's jobs run beside it, their segments come and go), and run directories of this
    host's snapshots that no running job holds (the per-user parent, empty, stays: other
    runs share it; the emulated cluster's nodes, in the other lane, have names of their
    own)."""
    tag, names = before
    ours = devshm.PREFIX + tag + '_'
    new = [n for n in set(os.listdir('/dev/shm')) - names if n.startswith(ours)]
    host = socket.gethostname()
    return new + [p for p, _, busy in snapshot_place.kept() if not busy and p not in names
                  and snapshot_place.RUN_DIR.match(os.path.basename(p)).group('host') == host]


def shm_now(env):
    """The job tag ``env`` gives segment names (``own_job``), and the names in /dev/shm and
    the run directories there: what ``shm_left`` compares."""
    with pytest.MonkeyPatch.context() as mp:
        for var, value in env.items():
            mp.setenv(var, value)
        tag = devshm.job_tag()
    return tag, set(os.listdir('/dev/shm')) | {p for p, _, _ in snapshot_place.kept()}


def own_job():
    """An environment that tags the run's segment names with a job id of its own (SGE's
    variable, read where no batch system's is set), so that the check counts its names only."""
    return {'JOB_ID': 'elastictest' + secrets.token_hex(4)}


@pytest.mark.example
@needs_data
def test_an_unchanged_chainermn_script_keeps_snapshots_under_the_launcher(tmp_path,
                                                                        dataset_root):
    """ChainerMN's own MNIST example under ``chainermn-torus run --memory-snapshots``: the
    launcher adds the snapshot to its Trainer; the run ends well, its snapshots removed."""
    env = own_job()
    before = shm_now(env)
    proc = _elastic(tmp_path, [sys.executable, '-m', 'chainermn_torus.run',
                               '--memory-snapshots', '3',
                               os.path.join(UNCHANGED, 'chainermn_mnist.py'), '--epoch', '1',
                               '--limit', '1200', '--unit', '20', '--out',
                               str(tmp_path / 'out')],
                    env={'CHAINER_DATASET_ROOT': dataset_root, **env})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'snapshots in node memory are kept in' in proc.stdout
    assert 'no snapshot in node memory' in proc.stdout  # the first step: none yet
    assert 'training is complete at iteration' in proc.stdout
    assert shm_left(before) == [], shm_left(before)


@pytest.mark.slow
def test_memory_snapshots_refuse_a_custom_loop_said_once(dataset_root):
    from conftest import run_mpi
    proc = run_mpi(2, ['-m', 'chainermn_torus.run', '--memory-snapshots', '5',
                       os.path.join(UNCHANGED, 'custom_loop.py')], timeout=240,
                   env={'CHAINER_DATASET_ROOT': dataset_root})
    assert proc.returncode != 0 and 'OK rank' not in proc.stdout
    assert proc.stderr.count('--memory-snapshots 5: this script trains without a '
                             'chainer.training Trainer') == 1, proc.stderr[-2000:]
