"""The nodes a job has and the step the nodes left can run (tools.job_nodes, issue 73)."""
import shutil

import pytest

from chainermn_torus.errors import ConfigError
from chainermn_torus.tools import job_nodes
from chainermn_torus.tools.job_nodes import Node


def test_a_host_list_is_read_and_checked():
    assert job_nodes.parse_hosts('n1:2,n2:2 n3') == [Node('n1', 2), Node('n2', 2),
                                                      Node('n3', 1)]
    for bad, said in (('n1:0', "'n1:0' is not host"), ('n1:x', "'n1:x'"),
                      ('n1,n1', 'host n1 is given twice'), (' ', 'no host')):
        with pytest.raises(ConfigError, match=said):
            job_nodes.parse_hosts(bad)


def test_pbs_node_file_counts_slots_per_host_in_order(tmp_path):
    nodefile = tmp_path / 'nodes'
    nodefile.write_text('b\nb\na\na\nc\nc\n')
    assert job_nodes.from_pbs({'PBS_NODEFILE': str(nodefile)}) == [
        Node('b', 2), Node('a', 2), Node('c', 2)]
    assert job_nodes.from_pbs({}) is None
    nodes, source = job_nodes.discover(env={'PBS_NODEFILE': str(nodefile)})
    assert source == 'PBS (PBS_NODEFILE)' and len(nodes) == 3
    with pytest.raises(ConfigError, match='no nodes to run on'):
        job_nodes.discover(env={})


@pytest.mark.skipif(shutil.which('scontrol') is None,
                    reason="Slurm's scontrol is not installed (scripts/slurm_cluster.sh "
                           'installs slurm-wlm)')
def test_slurm_nodelist_is_expanded_by_scontrol(tmp_path):
    conf = tmp_path / 'slurm.conf'  # scontrol reads one; its expansion needs no daemon
    conf.write_text('ClusterName=t\nSlurmctldHost=localhost\n')
    env = {'SLURM_JOB_NODELIST': 'node[1-3]', 'SLURM_TASKS_PER_NODE': '2(x3)',
           'SLURM_CONF': str(conf)}
    assert job_nodes.from_slurm(env) == [Node('node1', 2), Node('node2', 2),
                                          Node('node3', 2)]


def test_slurm_without_scontrol_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match='cannot run .*missing to expand SLURM_JOB_NODELIST'):
        job_nodes.from_slurm({'SLURM_JOB_NODELIST': 'n[1-2]'},
                              scontrol=str(tmp_path / 'missing'))
    assert job_nodes.from_slurm({}) is None


def test_the_step_on_the_nodes_left_and_its_refusals():
    nodes = job_nodes.parse_hosts('n0:2,n1:2,n2:2')
    step = job_nodes.plan(nodes, ['n1'], global_batch=300)
    assert step.nodes == [Node('n0', 2), Node('n2', 2)] and step.ranks == 4 and \
        step.batch_per_rank == 75
    assert job_nodes.plan(nodes, [], global_batch=None).batch_per_rank is None
    with pytest.raises(job_nodes.NoStep) as e:
        job_nodes.plan(nodes, ['n0', 'n1'], global_batch=300, min_nodes=2)
    assert str(e.value) == ('chainermn_torus: 1 of 3 node(s) left (n2), fewer than '
                            '--min-nodes 2: the job ends; lost: n0, n1')
    with pytest.raises(job_nodes.NoStep) as e:
        job_nodes.plan(nodes, ['n2'], global_batch=6)
    assert "global batch of 6 does not split over the 4 ranks left on n0, n1" in str(e.value)
    assert 'rank counts that divide it: 1, 2, 3' in str(e.value)
    with pytest.raises(ConfigError, match='lost host.s. n9 are not in the allocation'):
        job_nodes.plan(nodes, ['n9'])


def test_slurm_states_that_count_a_node_out():
    text = ('node0 alloc\nnode1 down*\nnode2 mix*\nnode3 drain\nnode4 fail\nnode5 idle~\n'
            'node6 failg\nnode7 drng\nnode1 down*\n')
    assert job_nodes.parse_sinfo(text) == {'node1': 'down*', 'node2': 'mix*',
                                            'node4': 'fail', 'node5': 'idle~'}
    assert job_nodes.parse_sinfo('') == {}


def test_without_sinfo_no_node_is_counted_out(tmp_path):
    assert job_nodes.slurm_unavailable(['n1'], sinfo=str(tmp_path / 'missing')) == {}
    failing = tmp_path / 'sinfo'
    failing.write_text('#!/bin/sh\necho "slurm_load_node: Unable to contact" >&2\nexit 1\n')
    failing.chmod(0o755)
    assert job_nodes.slurm_unavailable(['n1'], sinfo=str(failing)) == {}
    lying = tmp_path / 'sinfo-ok'
    lying.write_text('#!/bin/sh\necho "$4 down"\n')  # -h -N -n HOSTS: the hosts are $4
    lying.chmod(0o755)
    assert job_nodes.slurm_unavailable(['n1'], sinfo=str(lying)) == {'n1': 'down'}
