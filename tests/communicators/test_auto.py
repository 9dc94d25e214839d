"""The auto communicator on real ranks: a plan from a network file or a start-up measurement."""
import json

import pytest

from chainermn_torus.planning import planner


# Plans (and simulates) once per P: the fast tier has auto's column of the conformance matrix.
@pytest.mark.slow
@pytest.mark.parametrize('nprocs', [2, 3])
def test_auto_picks_the_same_plan_everywhere_and_averages(mpi_world, tmp_path, nprocs):
    net = tmp_path / 'net.json'
    # Slow enough inside the node (messages and copies at 100 MB/s) that the 1.2 MB call is
    # predicted over 1 ms: the one size auto simulates where SimGrid is installed (the
    # others are latencies).
    net.write_text(json.dumps(planner.Network('test', 5e-5, 1 / 1e8, 1e-6, 1 / 1e8, 1 / 1e10,
                                              1 / 1e8).to_dict()))
    # HOME points at an empty folder: no default network file, so the second communicator
    # measures at start-up.
    # P = 2 plans with the simulator where SimGrid is installed (the default), P = 3 with the
    # alpha-beta planner alone (simulate off), so that both paths run and the test stays short.
    simulate_setting = 'auto' if nprocs == 2 else 'off'
    reports = mpi_world(nprocs, 'check_auto', 'check_all', str(net), timeout=180,
                        env={'HOME': str(tmp_path), 'CHAINERMN_TORUS_NETWORK': '',
                             'CHAINERMN_TORUS_SIMULATE': simulate_setting})
    out = reports[0]
    assert 'chainermn_torus auto: ' in out and 'predicted' in out, out
    # Where SimGrid is installed, rank 0 ranks the planner's best candidates by simulation
    # (simulate='auto', the default) and every rank takes the same choice.
    from chainermn_torus.simulation import simulate
    used = 'simulated' if simulate.available() and simulate_setting == 'auto' else 'planner'
    assert f'({used}: ' in out, out
