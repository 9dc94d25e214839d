"""Wrapper behaviour that needs no second rank (P = 1, or a child process)."""
import os
import subprocess
import sys
import textwrap

from conftest import pythonpath


def test_double_buffering_without_thread_multiple_says_why():
    code = textwrap.dedent('''
        import mpi4py
        mpi4py.rc.thread_level = 'serialized'
        import chainer, chainermn, chainermn_torus
        comm = chainermn.create_communicator('rsap')
        try:
            chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm,
                                                  double_buffering=True)
        except RuntimeError as e:
            print('ERROR', e)
    ''')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=pythonpath()))
    assert proc.returncode == 0, proc.stderr
    assert 'ERROR' in proc.stdout and 'MPI_THREAD_MULTIPLE' in proc.stdout
    assert 'mpi4py.rc.thread_level' in proc.stdout


def test_attribute_delegation_and_bad_fused_value():
    import chainer
    import chainermn
    import pytest
    import chainermn_torus  # NOQA
    comm = chainermn.create_communicator('pure_allreduce')
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.MomentumSGD(lr=0.1), comm)
    opt.lr = 0.5  # written through to the wrapped optimizer, as ChainerMN's wrapper does
    assert opt.actual_optimizer.lr == 0.5 and opt.lr == 0.5
    with pytest.raises(ValueError) as e:
        chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm, fused='yes')
    assert "fused must be True, False or 'auto'" in str(e.value)
