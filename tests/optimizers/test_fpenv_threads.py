"""Flush-to-zero and the thread budget; both change process state, so they run in children."""
import os
import subprocess
import sys
import textwrap

import pytest

from chainermn_torus.optimizers import fpenv
from chainermn_torus.runtime.cpu import threads
from conftest import pythonpath


def _python(code, env=None, python=None, timeout=120):
    """Run ``code`` in a child (``python``: another interpreter, such as the aarch64 one)."""
    full = dict(os.environ, PYTHONPATH=pythonpath())
    full.update(env or {})
    proc = subprocess.run([python or sys.executable, '-c', textwrap.dedent(code)],
                          capture_output=True, text=True, env=full, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


# Also run by the aarch64 Python under QEMU (tests/scripts/test_aarch64.py): the same check of
# FPCR.FZ.
FTZ_CHECK = '''
        import numpy
        from chainermn_torus.optimizers import fpenv, kernels
        tiny = numpy.full(8, 1e-39, numpy.float32)       # subnormal in float32
        assert tiny[0] != 0
        def kernel_result(ftz):
            p = numpy.zeros(300000, numpy.float32); g = numpy.zeros_like(p)
            v = numpy.full_like(p, 1e-39)                  # subnormal momentum state
            kernels.momentum_sgd(p, g, v, numpy.float32(0.1), numpy.float32(0.5), ftz)
            return int((v != 0).sum())
        before = (tiny * numpy.float32(0.5))[0]
        assert fpenv.flush_denormals_enabled() is False
        k_off = kernel_result(False)
        kernel_result(True)  # a kernel's mode stays in the kernel
        assert fpenv.flush_denormals_enabled() is False
        assert fpenv.set_flush_denormals(True) is False
        assert fpenv.flush_denormals_enabled() is True
        after = (tiny * numpy.float32(0.5))[0]
        kernel_result(False)
        assert fpenv.flush_denormals_enabled() is True
        k_on = kernel_result(True)
        fpenv.set_flush_denormals(False)
        restored = (tiny * numpy.float32(0.5))[0]
        print(before != 0, after == 0, restored != 0, k_off, k_on)
'''
FTZ_EXPECTED = ['True', 'True', 'True', '300000', '0']


@pytest.mark.skipif(not fpenv.supported(),
                    reason='flush-to-zero is implemented for x86-64 and aarch64, with numba')
def test_flush_to_zero_flushes_denormal_arithmetic_in_main_and_kernel_threads():
    assert _python(FTZ_CHECK).split() == FTZ_EXPECTED


def test_default_threads_divides_physical_cores_among_ranks_on_the_node():
    import psutil
    n1, why1 = threads.default_threads(1)
    if len(os.sched_getaffinity(0)) < psutil.cpu_count():
        pytest.skip('this process is bound to a CPU subset; the mask decides')
    physical = psutil.cpu_count(logical=False) or psutil.cpu_count()
    assert n1 == physical and 'physical cores / 1 ranks' in why1
    assert threads.default_threads(physical * 4)[0] == 1  # never below one thread
    assert threads.default_threads(2)[0] == max(1, physical // 2)


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_budget_is_applied_to_blas_and_numba_and_can_be_overridden():
    out = _python('''
        from threadpoolctl import threadpool_info
        import numba
        from chainermn_torus.runtime.cpu import threads
        b = threads.apply_thread_budget(1)
        blas = {i['num_threads'] for i in threadpool_info()}
        print(b['threads'], sorted(blas), numba.get_num_threads(), b['reason'])
        b = threads.apply_thread_budget(intra_size=1)
        print(b['threads'], b['reason'].split()[0])
    ''', env={'CHAINERMN_TORUS_THREADS': '1'})
    first, second = out.splitlines()
    assert first.split()[:3] == ['1', '[1]', '1'] and first.endswith('requested')
    assert second.split() == ['1', 'CHAINERMN_TORUS_THREADS']


@pytest.mark.parametrize('bad', [0, -2, 'many'])
def test_bad_thread_counts_are_refused(bad):
    with pytest.raises(ValueError) as e:
        threads.apply_thread_budget(bad)
    assert 'thread count >= 1' in str(e.value) and repr(bad) in str(e.value)


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_ensure_applies_once_per_process_and_again_only_when_asked():
    # Communicators, examples and the loader placement all go through ensure(): the first
    # sets the default, a later call without a count keeps it, an explicit count replaces it.
    out = _python('''
        import numba
        from chainermn_torus.runtime.cpu import threads
        a = threads.ensure()
        b = threads.ensure()
        c = threads.ensure(threads=1)
        d = threads.ensure()
        print(a is b, a['reason'] != 'requested', c['reason'], c['threads'], d is c,
              numba.get_num_threads())
    ''')
    assert out.split() == ['True', 'True', 'requested', '1', 'True', '1'], out


def test_a_budget_beyond_the_cpus_is_capped_and_says_so(monkeypatch):
    # CHAINERMN_TORUS_THREADS=64 on a rank that may use fewer CPUs: the pools get those
    # CPUs, and the line says what was asked and what was applied (it said 64 beside pools
    # of 2).
    from chainermn_torus.runtime.cpu import threads
    cpus = len(threads._affinity())
    monkeypatch.setenv('CHAINERMN_TORUS_THREADS', str(cpus + 62))
    budget = threads.apply_thread_budget()
    assert budget['threads'] == cpus
    assert f'CHAINERMN_TORUS_THREADS {cpus + 62}, capped at the {cpus} CPUs' in \
        threads.describe_budget(budget)
