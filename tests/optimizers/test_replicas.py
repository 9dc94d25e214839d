"""Replica consistency check on real ranks: quiet when healthy, every rank stops on drift."""
import pytest

from conftest import assert_ok, run_mpi, worker


@pytest.mark.parametrize('mode, nprocs', [('healthy', 3), ('healthy-db', 2), ('diverge', 2),
                                          ('diverge', 3)])
def test_replica_check(mode, nprocs):
    proc = run_mpi(nprocs, [worker('check_replicas.py'), mode], timeout=180)
    assert_ok(proc, nprocs)
    if mode == 'diverge':
        assert proc.stdout.count('caught:') == nprocs


def test_check_replicas_must_be_a_step_count():
    import chainer
    import chainermn_torus
    from chainermn_torus.optimizers.multi_node import create_multi_node_optimizer
    del chainermn_torus
    with pytest.raises(ValueError, match='step count >= 1'):
        create_multi_node_optimizer(chainer.optimizers.SGD(), None, check_replicas=0)
