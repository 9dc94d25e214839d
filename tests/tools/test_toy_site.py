"""A site added to the job scripts from outside the package: one System (an SGE cluster with
its header, settings and launch line), registered; the jobscript command then writes its
script, which passes bash -n and follows the rules every script follows. No line of the
package changes (tools/jobscripts/systems.py)."""
import subprocess

import pytest

from chainermn_torus.tools import jobscript
from chainermn_torus.tools.jobscripts import systems


class ToySge(systems.System):
    """A toy SGE cluster: qsub with a parallel environment, 32-core nodes, Open MPI."""
    name = 'toysge'
    node = systems.Node(cores=32, smt=1, os_cores=0)
    mpis = ('openmpi',)
    header = '''#$$ -N ${name}
#$$ -pe mpi ${slots}
#$$ -l h_rt=${elapse}
#$$ -cwd'''
    settings = '''export OMP_NUM_THREADS=${threads}
'''
    launch = ('mpiexec -n ${procs} --map-by ppr:${ranks_per_node}:node:PE=${cpus} '
              '--bind-to core${forward}')

    def values(self, job, values):
        return {'slots': job.nodes * self.node.cores}


@pytest.fixture
def toy():
    systems.register(ToySge())
    yield
    systems.unregister('toysge')
    assert 'toysge' not in systems.SYSTEMS


def test_a_new_site_is_one_class(toy, tmp_path, capsys):
    out = tmp_path / 'job.sh'
    assert jobscript.main(['--system', 'toysge', '--nodes', '2', '--ranks-per-node', '4',
                           '--output', str(out), '--', 'python', 'train.py']) == 0
    text = out.read_text()
    assert '#$ -pe mpi 64' in text and '#$ -l h_rt=01:00:00' in text
    # 32 cores / 4 ranks = 8 a rank: 7 compute threads and the loader's core (the default
    # where the system describes its node)
    assert 'export OMP_NUM_THREADS=7' in text
    assert 'export CHAINERMN_TORUS_DEDICATED_CORES=1' in text
    assert 'export CHAINERMN_TORUS_EXPECT_RANKS=8' in text
    launch = text.rstrip().splitlines()[-1]
    assert launch.startswith('mpiexec -n 8 --map-by ppr:4:node:PE=8 --bind-to core -x ')
    assert launch.endswith('python -m chainermn_torus.run --communicator rsap train.py')
    assert subprocess.run(['bash', '-n', str(out)]).returncode == 0
    # its own refusals come from the base description: the node's cores, its MPIs
    assert jobscript.main(['--system', 'toysge', '--nodes', '1', '--ranks-per-node', '64',
                           '--', 'python', 'x.py']) == 2
    assert 'toysge nodes have 32 cores for ranks' in capsys.readouterr().err
    assert jobscript.main(['--system', 'toysge', '--nodes', '1', '--mpi', 'impi', '--',
                           'python', 'x.py']) == 2
    assert '--mpi impi on toysge: its scripts know openmpi' in capsys.readouterr().err


def test_register_refuses_a_taken_name_and_a_lone_dollar():
    with pytest.raises(ValueError) as e:
        systems.register(systems.SYSTEMS['slurm'])
    assert "'slurm'" in str(e.value)
    bad = ToySge()
    bad.name, bad.header = 'toybad', '#$$ -N ${name}\n#$ -cwd'
    with pytest.raises(ValueError) as e:
        systems.register(bad)
    assert 'header template has a lone "$" on line 2' in str(e.value)
    assert 'toybad' not in systems.SYSTEMS
