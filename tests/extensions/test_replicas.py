"""Replica consistency check on real ranks: quiet when healthy, every rank stops on drift."""
import pytest



@pytest.mark.parametrize('mode, nprocs', [('healthy', 3), ('healthy-db', 2), ('diverge', 2),
                                          ('diverge', 3)])
def test_replica_check(mpi_world, mode, nprocs):
    caught = mpi_world(nprocs, 'check_replicas', 'check_mode', mode, timeout=180)
    # 'diverge': every rank stops with the message; healthy: none does.
    assert all(caught) if mode == 'diverge' else not any(caught), caught


def test_check_replicas_must_be_a_step_count():
    import chainer
    import chainermn_torus
    from chainermn_torus import create_multi_node_optimizer
    del chainermn_torus
    with pytest.raises(ValueError, match='step count >= 1'):
        create_multi_node_optimizer(chainer.optimizers.SGD(), None, check_replicas=0)
