"""The auto communicator on real ranks: a plan from a network file or a start-up measurement."""
import json

import pytest

from chainermn_torus.planning import planner
from conftest import assert_ok, run_mpi, worker


@pytest.mark.parametrize('nprocs', [2, 3])
def test_auto_picks_the_same_plan_everywhere_and_averages(tmp_path, nprocs):
    net = tmp_path / 'net.json'
    net.write_text(json.dumps(planner.Network('test', 5e-5, 1 / 1e8, 1e-6, 1 / 5e9, 1 / 1e10,
                                              1 / 1e10).to_dict()))
    # HOME points at an empty folder: no default network file, so the second communicator
    # measures at start-up.
    proc = run_mpi(nprocs, [worker('check_auto.py')], timeout=180,
                   env={'AUTO_NETWORK': str(net), 'HOME': str(tmp_path),
                        'CHAINERMN_TORUS_NETWORK': ''})
    assert_ok(proc, nprocs)
    assert 'chainermn_torus auto: ' in proc.stdout and 'predicted' in proc.stdout
    # Where SimGrid is installed, rank 0 ranks the planner's best candidates by simulation
    # (simulate='auto', the default) and every rank takes the same choice.
    from chainermn_torus.simulation import simulate
    assert '({}: '.format('simulated' if simulate.available() else 'planner') in proc.stdout
