"""CPU topology from fake sysfs trees, and the placement plan of every policy."""
import os

import pytest

from chainermn_torus.loader import (Topology, format_cpulist, parse_cpulist, plan_placement,
                                    describe_plan)


def make_sysfs(root, cpus, nodes=None):
    """cpus: [(cpu id, package, core id)]; nodes: {node: [cpu ids]}."""
    base = os.path.join(str(root), 'devices', 'system')
    os.makedirs(os.path.join(base, 'cpu'))
    with open(os.path.join(base, 'cpu', 'online'), 'w') as f:
        f.write(format_cpulist([c for c, _, _ in cpus]) + '\n')
    for cpu, package, core in cpus:
        topo = os.path.join(base, 'cpu', f'cpu{cpu}', 'topology')
        os.makedirs(topo)
        for name, value in (('physical_package_id', package), ('core_id', core)):
            with open(os.path.join(topo, name), 'w') as f:
                f.write(f'{value}\n')
    for node, members in (nodes or {}).items():
        d = os.path.join(base, 'node', f'node{node}')
        os.makedirs(d)
        with open(os.path.join(d, 'cpulist'), 'w') as f:
            f.write(format_cpulist(members) + '\n')
    return Topology.from_sysfs(str(root))


@pytest.fixture
def single(tmp_path):
    return make_sysfs(tmp_path / "single", [(0, 0, 0)])


@pytest.fixture
def smt2(tmp_path):
    # Intel numbering: CPUs 0-3 are the first threads of cores 0-3, 4-7 their siblings.
    return make_sysfs(tmp_path / "smt2", [(c, 0, c % 4) for c in range(8)], {0: list(range(8))})


@pytest.fixture
def knl(tmp_path):
    # Xeon Phi 7250 (Oakforest-PACS): 68 cores x 4 threads, thread t of core c is CPU c + 68 t.
    return make_sysfs(tmp_path / "knl", [(c, 0, c % 68) for c in range(272)], {0: list(range(272))})


@pytest.fixture
def two_numa(tmp_path):
    # Two sockets of 4 cores, no SMT, CPUs 0-3 on node 0 and 4-7 on node 1.
    return make_sysfs(tmp_path / "numa", [(c, c // 4, c % 4) for c in range(8)],
                      {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]})


def test_cpulist_round_trip():
    assert parse_cpulist('0-3,8,10-11\n') == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([11, 0, 1, 2, 3, 8, 10]) == '0-3,8,10-11'
    with pytest.raises(ValueError):
        parse_cpulist('0-x')


def test_topologies_are_read(single, smt2, knl, two_numa):
    assert single.describe().startswith('1 CPUs = 1 cores x 1 hardware threads')
    assert smt2.cores() == [[0, 4], [1, 5], [2, 6], [3, 7]] and smt2.smt == 2
    assert len(knl.cores()) == 68 and knl.smt == 4 and knl.cores()[5] == [5, 73, 141, 209]
    assert two_numa.numa_nodes == [0, 1] and two_numa.cores()[4] == [4]
    assert '2 NUMA node(s)' in two_numa.describe() and '2 package(s)' in two_numa.describe()


def test_sysfs_without_cpu_entries_falls_back_to_one_thread_per_core(tmp_path):
    (tmp_path / 'bare' / 'devices' / 'system' / 'cpu').mkdir(parents=True)
    topo = Topology.from_sysfs(str(tmp_path / 'bare'))
    assert topo.smt == 1 and len(topo.cpus) == (os.cpu_count() or 1)
    assert 'one thread per core' in topo.source


def test_a_sysfs_tree_that_is_not_there_is_refused_not_replaced_by_this_machine(tmp_path):
    with pytest.raises(ValueError, match="sysfs tree '.*nothing' has no devices/system/cpu"):
        Topology.from_sysfs(str(tmp_path / 'nothing'))
    from conftest import run_cli
    proc = run_cli(['topology', '--sysfs', str(tmp_path / 'nothing')])
    assert proc.returncode == 2 and 'has no devices/system/cpu' in proc.stderr


def test_sibling_puts_loaders_on_the_other_hardware_threads(smt2, knl):
    plan = plan_placement('sibling', topology=smt2, allowed=range(8))
    assert plan.compute_cpus == [0, 1, 2, 3] and plan.loader_cpus == [4, 5, 6, 7]
    plan = plan_placement('sibling', topology=knl, allowed=range(272), loader_processes=8)
    assert len(plan.compute_cpus) == 68 and len(plan.loader_cpus) == 204
    assert not set(plan.compute_cpus) & set(plan.loader_cpus)
    assert 'affinity sibling: compute on CPUs 0-67' in describe_plan(plan)


def test_same_core_shares_the_compute_cpus(smt2):
    plan = plan_placement('same-core', topology=smt2, allowed=range(8))
    assert plan.compute_cpus == plan.loader_cpus == [0, 1, 2, 3]


def test_dedicated_sets_cores_aside_as_seed_000_did(knl):
    plan = plan_placement('dedicated', topology=knl, allowed=range(272), dedicated_cores=4)
    assert len(plan.compute_cpus) == 64 and plan.compute_cpus[-1] == 63  # 64 of 68 cores
    assert plan.loader_cpus == sorted(c + 68 * t for c in range(64, 68) for t in range(4))


def test_ranks_of_a_node_split_its_cores_in_numa_order(two_numa):
    plans = [plan_placement('same-core', intra_rank=r, intra_size=2, topology=two_numa,
                            allowed=range(8)) for r in range(2)]
    assert plans[0].compute_cpus == [0, 1, 2, 3] and plans[1].compute_cpus == [4, 5, 6, 7]
    three = [plan_placement('dedicated', intra_rank=r, intra_size=3, topology=two_numa,
                            allowed=range(8)).compute_cpus for r in range(3)]
    assert three == [[0, 1], [3, 4], [6]]  # shares of 3, 3 and 2 cores, one each for loading


def test_a_launcher_binding_is_the_share(smt2):
    plan = plan_placement('sibling', intra_rank=1, intra_size=2, topology=smt2, allowed=[2, 6])
    assert plan.compute_cpus == [2] and plan.loader_cpus == [6]
    assert 'launcher allowed' in plan.reason


def test_none_pins_nothing(single):
    plan = plan_placement('none', topology=single, allowed=[0])
    assert plan.compute_cpus is None and plan.loader_cpus is None


def test_impossible_plans_say_why(single, smt2, two_numa):
    with pytest.raises(ValueError) as e:
        plan_placement('sibling', topology=single, allowed=[0])
    assert "'sibling' cannot be satisfied" in str(e.value) and 'one hardware thread' in str(e.value)
    with pytest.raises(ValueError) as e:
        plan_placement('dedicated', topology=single, allowed=[0])
    assert "'dedicated' needs more cores" in str(e.value) and 'has 1 core' in str(e.value)
    with pytest.raises(ValueError) as e:
        plan_placement('sibling', topology=smt2, allowed=range(8), loader_processes=5)
    assert '5 loader processes' in str(e.value) and 'use at most 4' in str(e.value)
    with pytest.raises(ValueError) as e:
        plan_placement('1HT', topology=smt2)
    assert "unknown affinity policy '1HT'" in str(e.value) and 'same-core' in str(e.value)
    with pytest.raises(ValueError) as e:
        plan_placement('same-core', topology=two_numa, allowed=[99])
    assert 'none of the allowed CPUs 99' in str(e.value)


def test_auto_takes_siblings_where_there_are_some(single, smt2):
    assert plan_placement('auto', topology=smt2, allowed=range(8)).policy == 'sibling'
    plan = plan_placement('auto', topology=single, allowed=[0])
    assert plan.policy == 'same-core' and 'auto chose same-core' in plan.reason


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_cli_prints_the_plan(tmp_path):
    import subprocess
    import sys
    make_sysfs(tmp_path / 'knl', [(c, 0, c % 68) for c in range(272)])
    out = subprocess.run(
        [sys.executable, '-m', 'chainermn_torus.tools.cli', 'topology', '--sysfs',
         str(tmp_path / 'knl'), '--policy', 'dedicated', '--dedicated-cores', '4',
         '--ranks-per-node', '1'], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '272 CPUs = 68 cores x 4 hardware threads' in out.stdout
    assert 'compute on CPUs 0-63' in out.stdout
    bad = subprocess.run(
        [sys.executable, '-m', 'chainermn_torus.tools.cli', 'topology', '--sysfs',
         str(tmp_path / 'knl'), '--policy', 'dedicated', '--dedicated-cores', '68'],
        capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "'dedicated' needs more cores" in bad.stderr
