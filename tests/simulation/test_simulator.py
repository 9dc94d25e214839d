"""The SimGrid player: exact on cases with a closed form, lock-step equal to actors where
every rank runs the same pattern, topology and mapping visible, the commands' output and
errors. Skipped, with the reason, where SimGrid's Python module is not importable. The fast
tier keeps the closed form and the refusals; the rest (1-7 s each) is in the full tier."""
import json

import pytest

from chainermn_torus.planning import planner
from chainermn_torus.simulation import platforms, simulate as sim

pytestmark = pytest.mark.skipif(not sim.available(), reason=sim.why_unavailable())

NET = planner.Network('test', 50e-6, 1 / 0.12e9, 5e-6, 1 / 5e9, 1 / 8e9, 1 / 10e9,
                      beta_put=1 / 0.12e9, fence_inter=2e-3, flush_inter=1e-3)


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_two_nodes_match_the_closed_form():
    # Rabenseifner on 2 ranks: send half each way, add it, send the sum back; full-duplex
    # links, a route crosses two links of alpha / 2 each, and on the emulated cluster's TCP
    # each flow's acknowledgements take 5% of the reverse direction (SimGrid's
    # cross-traffic), so two opposite flows each get 1 / 1.05 of a link.
    m = platforms.emulated(2, 1, NET)
    elems = 250000
    n = elems * 4
    res = sim.simulate(m, 'pure_allreduce', elems, segment_bytes=0)
    want = 2 * NET.alpha_inter + 1.05 * n * NET.beta_inter + n / 2 * NET.gamma
    assert res['segment_times'][elems] == pytest.approx(want, rel=1e-3)
    # the whole call adds the packing copies and the layout check (a 16-byte all-reduce)
    assert res['seconds'] == pytest.approx(want + res['copies_s'] + res['once_s'])
    assert res['once_s'] == pytest.approx(NET.alpha_inter, rel=0.01)  # one exchange


@pytest.mark.slow
def test_ranks_of_a_node_share_its_link():
    # rsaa with rows inside nodes on 2 x 2: both ranks of a node send across at once, so
    # the column phase takes twice as long as with one rank per node.
    elems = 1 << 18
    one = sim.simulate(platforms.emulated(2, 1, NET), 'rsaa', elems, M=1, segment_bytes=0)
    two = sim.simulate(platforms.emulated(2, 2, NET), 'rsaa', elems * 2, M=2,
                       segment_bytes=0)
    assert two['segment_times'][elems * 2] > 1.8 * one['segment_times'][elems]


@pytest.mark.slow
def test_fences_between_nodes_cost_what_calibrate_measured():
    # rsap on a row across two nodes: one put round, two fences (one closes the round)
    m = platforms.emulated(2, 1, NET)
    e = 100000
    rsap = sim.simulate(m, 'rsap', e, M=2, segment_bytes=0)['segment_times'][e]
    rsaa = sim.simulate(m, 'rsaa', e, M=2, segment_bytes=0)['segment_times'][e]
    assert rsap - rsaa == pytest.approx(NET.fence_inter + 2 * NET.alpha_inter, rel=0.05)


@pytest.mark.slow
def test_lockstep_equals_actors_on_a_symmetric_fat_tree():
    m = platforms.fattree(32, 1, planner.PRESETS['ofp'])
    for algo, M in (('rsap', 4), ('pure_allreduce', 1)):
        a = sim.simulate(m, algo, 'mlp', M=M, mode='actors')
        b = sim.simulate(m, algo, 'mlp', M=M, mode='lockstep')
        assert b['seconds'] == pytest.approx(a['seconds'], rel=1e-4)


@pytest.mark.slow
def test_mapping_matters_on_a_torus():
    # rows of 2 along one torus axis are neighbours; a random mapping spreads them, so the
    # reduce-scatter and the puts cross several links that other rows use too.
    net = planner.PRESETS['k']
    t = {mp: sim.simulate(platforms.torus(64, 1, net, mapping=mp), 'rsap', 'mlp', M=2,
                          mode='lockstep')['seconds'] for mp in ('row-major', 'random')}
    assert t['random'] > 1.05 * t['row-major']


def test_shm_needs_rows_inside_nodes():
    with pytest.raises(ValueError, match='shm needs every grid row inside one node'):
        sim.simulate(platforms.emulated(2, 2, NET), 'shm', 1000, M=4)


@pytest.mark.slow
def test_simulate_command(tmp_path):
    from chainermn_torus.tools import simulate as cmd
    out = tmp_path / 'r.json'
    assert cmd.main(['--platform', 'torus', '--nodes', '16', '--network', 'k', '--model', 'mlp',
                     '--algorithm', 'pure_allreduce', 'rsap', '--grid', '2x8', '--mapping',
                     'random', '--json', str(out)]) == 0
    rows = json.loads(out.read_text())['rows']
    assert [(r['algorithm'], r['grid']) for r in rows] == [('pure_allreduce', None),
                                                           ('rsap', [2, 8])]
    assert all(r['seconds'] > 0 for r in rows)


def test_simulate_command_refuses_bad_input(capsys):
    from chainermn_torus.tools import simulate as cmd
    assert cmd.main(['--nodes', '16', '--grid', '3x5']) == 2
    assert 'does not fit P = 16' in capsys.readouterr().err
    assert cmd.main(['--platform', 'torus', '--nodes', '16', '--dims', '4,4,2']) == 2
    assert 'has 32 nodes, not 16' in capsys.readouterr().err
    # checked before the simulation: not a FileNotFoundError once it has run
    assert cmd.main(['--nodes', '4', '--json', '/nowhere/sim.json']) == 2
    assert 'cannot write --json /nowhere/sim.json' in capsys.readouterr().err
    for bad in (['--segment-bytes', '-1'], ['--nodes', '0']):  # -1: 0.00 ms for everything
        with pytest.raises(SystemExit) as e:
            cmd.main(['--nodes', '4'] + bad)
        assert e.value.code == 2
        assert 'must be' in capsys.readouterr().err


@pytest.mark.slow
def test_plan_ranks_the_best_candidates_by_simulation(capsys):
    from chainermn_torus.tools import cli
    assert cli.main(['plan', '--nodes', '16', '--ranks-per-node', '1', '--network', 'ofp',
                     '--model', 'mlp', '--simulate', 'on']) == 0
    out = capsys.readouterr().out
    assert 'simulated (SimGrid) the planner\'s best 4' in out
    assert 'simulated ' in out and '-- not simulated' in out


@pytest.mark.slow
def test_a_calibrated_row_of_the_emulated_cluster():
    # One row of the validation (docs/measurements/simulation/validation.md): MLP, 2 nodes x
    # 2 ranks, rsap (2, 2): measured 66.9 ms.
    net = planner.load_network('docs/measurements/emulated/network-2x2.json')
    res = sim.simulate(platforms.emulated(2, 2, net), 'rsap', 'mlp', M=2)
    assert abs(res['seconds'] * 1e3 - 66.87) / 66.87 < 0.15
