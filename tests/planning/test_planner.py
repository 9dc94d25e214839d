"""The cost model, the planner CLI and calibration (real ranks for calibrate)."""
import json
import os
import subprocess
import sys

import pytest

from chainermn_torus.planning import planner
from conftest import ROOT, run_cli, run_mpi

MB = planner.MODEL_BYTES


def cli(*args):
    return run_cli(list(args))


GIGABIT = planner.Network('1g', 50e-6, 1 / 0.12e9, 5e-6, 1 / 5e9, 1 / 10e9, 1 / 10e9)


def test_node_aware_torus_moves_half_the_bytes_of_a_flat_allreduce():
    # 2 nodes x 2 ranks: a flat all-reduce sends 2n per node, the node-aligned torus n.
    flat, _ = planner.predict('pure_allreduce', 2, 2, MB['resnet50'], GIGABIT)
    torus, parts = planner.predict('rsap', 2, 2, MB['resnet50'], GIGABIT, (2, 2))
    assert 1.8 < flat / torus < 2.1, (flat, torus, parts)
    # ... and the inter-node part of the torus is its column all-reduce on n / 2.
    assert parts['allreduce'] > 0.9 * torus
    # Rows that span nodes (4x1 on 2 nodes) lose that advantage.
    spanning, _ = planner.predict('rsap', 2, 2, MB['resnet50'], GIGABIT, (4, 1))
    assert spanning > 1.5 * torus


def test_shm_only_where_rows_lie_inside_nodes():
    t, parts = planner.predict('shm', 2, 2, MB['mlp'], GIGABIT, (4, 1))
    assert t == float('inf') and 'span' in parts['note']
    rows = planner.plan(2, 2, MB['mlp'], GIGABIT)
    assert all(not (r['algorithm'] == 'shm' and r['grid'] == (4, 1)) for r in rows)
    assert rows == sorted(rows, key=lambda r: r['seconds'])


def test_oakforest_preset_ranks_seed_003_shapes_as_the_paper():
    net = planner.PRESETS['ofp']
    t = {g: planner.predict('rsap', 256, 1, MB['resnet50'], net, g)[0]
         for g in [(64, 4), (16, 16), (2, 128)]}
    assert t[(2, 128)] < t[(16, 16)] < t[(64, 4)], t
    assert 'Tamura & Hanawa' in net.source and planner.PRESETS['k'].source


def test_grid_that_does_not_fit_is_refused():
    with pytest.raises(ValueError, match=r'does not fit 2 nodes x 2 ranks = 4'):
        planner.predict('rsaa', 2, 2, MB['mlp'], GIGABIT, (3, 2))
    proc = cli('plan', '--nodes', '2', '--ranks-per-node', '2', '--grid', '3x2')
    assert proc.returncode == 2 and 'P = 4' in proc.stderr and 'shapes that fit' in proc.stderr


def test_plan_cli_prints_every_shape_and_a_recommendation(tmp_path):
    out = tmp_path / 'plan.json'
    # The alpha-beta plan alone (tests/simulation checks plan with the simulator).
    proc = cli('plan', '--nodes', '256', '--network', 'ofp', '--json', str(out),
               '--simulate', 'off')
    assert proc.returncode == 0, proc.stderr
    assert 'recommended:' in proc.stdout and '2x128' in proc.stdout and '16x16' in proc.stdout
    data = json.loads(out.read_text())
    assert data['nodes'] == 256 and data['bytes'] == MB['resnet50'] and data['rows']
    proc = cli('plan', '--nodes', '4', '--model', 'mlp', '--alpha', '5e-5', '--beta', '1.2e8',
               '--simulate', 'off')
    assert proc.returncode == 0 and 'alpha-beta' in proc.stdout


@pytest.mark.parametrize('args, fragment', [
    (['--network', 'nowhere'], 'neither a preset'),
    (['--alpha', '1e-6'], 'together'),
    (['--alpha', '1e-6', '--beta', '0'], "argument --beta: must be a finite number > 0, got '0'"),
    (['--network', 'ofp', '--model', 'vgg'], 'resnet50, a byte count or an .npz'),
    # The arguments are checked before anything else (the default network file is
    # missing here: that must not be what is said).
    (['--nodes', '0'], "argument --nodes: must be an integer >= 1, got '0'"),
    (['--nodes', '-4'], "argument --nodes: must be an integer >= 1, got '-4'"),
    (['--ranks-per-node', '0'], "argument --ranks-per-node: must be an integer >= 1"),
    (['--model', 'vgg'], "model must be mlp, resnet50, a byte count or an .npz file; got 'vgg'"),
    (['--nodes', '100000000', '--ranks-per-node', '1000'],
     '100,000,000,000 ranks: the planner answers up to 10,000,000'),
    # a missing file was told it must be an .npz file
    (['--model', '/nowhere/model.npz'], 'model file /nowhere/model.npz does not exist'),
    (['--model', '0'], 'model of 0 bytes: give a byte count >= 1'),
    # checked before the planning and the simulation, not a FileNotFoundError after them
    (['--json', '/nowhere/plan.json'], 'cannot write --json /nowhere/plan.json: directory '
                                       '/nowhere does not exist'),
])
def test_plan_cli_bad_input(args, fragment):
    proc = cli('plan', '--nodes', '2', *args)
    assert proc.returncode == 2, proc.stderr
    assert fragment in proc.stderr.strip().splitlines()[-1], proc.stderr  # the last line


def test_plan_names_a_truncated_model_snapshot(tmp_path):
    import numpy
    good = tmp_path / 'model.npz'
    numpy.savez(str(good), W=numpy.zeros((10, 10), numpy.float32))
    cut = tmp_path / 'cut.npz'
    cut.write_bytes(good.read_bytes()[:len(good.read_bytes()) // 2])  # a copy cut short
    proc = cli('plan', '--nodes', '2', '--model', str(cut), '--simulate', 'off')
    assert proc.returncode == 2 and 'Traceback' not in proc.stderr
    assert f'{cut} is not an .npz snapshot of a model' in proc.stderr  # BadZipFile
    assert cli('plan', '--nodes', '2', '--model', str(good), '--network', 'ofp',
               '--simulate', 'off').returncode == 0


def test_plan_answers_the_largest_machine_in_seconds():
    # Fugaku's 158,976 nodes x 48 ranks: the planner's grid shapes and put rounds are
    # computed, not enumerated (this took over a minute for 10^7 ranks before; here about
    # 0.1 s, so a slip back to enumeration shows as a test that runs for minutes).
    proc = cli('plan', '--nodes', '158976', '--ranks-per-node', '48', '--network', 'k',
               '--simulate', 'off')
    assert proc.returncode == 0 and 'recommended:' in proc.stdout, proc.stderr


def test_network_files(tmp_path):
    bad = tmp_path / 'bad.json'
    bad.write_text('{"alpha_inter": 1e-6}')
    with pytest.raises(ValueError, match='lacks beta_inter'):
        planner.load_network(str(bad))
    bad.write_text('not json')
    with pytest.raises(ValueError, match='not JSON'):
        planner.load_network(str(bad))
    good = tmp_path / 'good.json'
    good.write_text(json.dumps(GIGABIT.to_dict()))
    assert planner.load_network(str(good)).beta_inter == GIGABIT.beta_inter
    with pytest.raises(ValueError, match='finite number >= 0'):
        planner.Network('x', -1, 0, 0, 0, 0, 0)


def test_model_bytes_from_a_snapshot(tmp_path):
    import numpy
    path = tmp_path / 'm.npz'
    numpy.savez(path, w=numpy.zeros((10, 3), numpy.float32), step=numpy.int64(5))
    assert planner.model_bytes(str(path)) == 120
    assert planner.model_bytes('4096') == 4096
    text = tmp_path / 'notes.txt'
    text.write_text('not a snapshot')
    with pytest.raises(ValueError, match=r'notes.txt is not an .npz snapshot of a model'):
        planner.model_bytes(str(text))


@pytest.mark.slow
def test_calibrate_on_real_ranks_writes_a_usable_network(tmp_path):
    out = tmp_path / 'net.json'
    proc = run_mpi(2, ['-m', 'chainermn_torus.tools.calibrate', '--output', str(out), '--bytes',
                       str(1 << 20), '--reps', '3'], timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    net = planner.load_network(str(out))
    # One host here: the inter-node figures are the intra-node ones, and it says so.
    assert 'one host' in net.source and net.alpha_inter > 0 and net.beta_inter > 0
    assert 'saved to' in proc.stdout


@pytest.mark.one_mpi  # a refusal said once: tests/test_refusals.py under each MPI
def test_calibrate_alone_or_unwritable_fails_clearly(tmp_path):
    proc = run_mpi(1, ['-m', 'chainermn_torus.tools.calibrate', '--output',
                       str(tmp_path / 'n.json')], timeout=60)
    assert proc.returncode != 0 and 'needs 2 ranks' in proc.stderr
    if os.geteuid() != 0:
        ro = tmp_path / 'ro'
        ro.mkdir()
        ro.chmod(0o500)
        proc = run_mpi(2, ['-m', 'chainermn_torus.tools.calibrate', '--output',
                           str(ro / 'n.json')], timeout=60)
        assert proc.returncode != 0 and 'cannot write' in proc.stderr


@pytest.mark.slow
def test_calibrate_gives_up_on_a_silent_peer():
    # A receive nobody answers: the deadline turns the would-be hang into an error.
    code = ('from mpi4py import MPI; import time\n'
            'from chainermn_torus.planning.calibrate import _wait\n'
            'req = MPI.COMM_SELF.Irecv(bytearray(8), 0, 7)\n'
            'try:\n    _wait(req, time.monotonic() + 0.3, "rank 3 on node9")\n'
            'except RuntimeError as e:\n    print(e)\n    req.Cancel()\n    req.Wait()\n')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert 'no reply from rank 3 on node9' in proc.stdout, proc.stderr


@pytest.mark.parametrize('M', range(1, 17))
def test_planner_counts_the_put_rounds_rsap_runs(M):
    # The model takes its round count from the schedule itself (it once used a formula
    # that was one round too many for every M that is not a power of two).
    from chainermn_torus.algorithms.collectives import Group, ceil_log2
    from chainermn_torus.algorithms.rsap import Rsap, put_rounds
    row = Group(M, M, 1)
    net = planner.Network('t', 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, beta_put=0.0)
    fence = 2 * ceil_log2(M) * row.alpha(net)
    rounds = len(put_rounds(M))
    assert Rsap().gather_cost(row, 0, net) == pytest.approx(rounds * (row.alpha(net) + fence))
    assert rounds == (0 if M == 1 else (M.bit_length() - 1) + (0 if M & (M - 1) == 0 else 2))
