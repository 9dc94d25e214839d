"""aarch64 (Fugaku's A64FX and its kin), under QEMU user-mode emulation: flush-to-zero
through FPCR.FZ, and the communicators' exact means, with numba and without.

The aarch64 Python is built by ``make aarch64`` (scripts/aarch64_root.sh: root, apt). The
ranks are aarch64 processes started by the x86 venv's mpiexec (see the script for why).
QEMU emulates the architecture's FPCR semantics, not a particular chip's speed: these tests
check behaviour, and no figure from them is a timing.
"""
import os
import textwrap

import pytest

from conftest import ROOT, assert_ok, run_mpi, worker, MPI
from optimizers.test_fpenv_threads import FTZ_CHECK, FTZ_EXPECTED, _python as run_python

PYTHON = os.path.join(ROOT, '.venv', 'aarch64', 'bin', 'python')
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.access(PYTHON, os.X_OK),
                       reason='no aarch64 Python: `make aarch64` builds one (root, apt: '
                              'arm64 packages and qemu-user-static)'),
    pytest.mark.skipif(MPI != 'mpich', reason="the aarch64 ranks carry the mpich wheel's "
                                              'libmpi; the x86 mpiexec must be MPICH too'),
]


def _python(code):
    return run_python(code, env={'NUMBA_NUM_THREADS': '2'}, python=PYTHON, timeout=600)


def test_aarch64_flush_to_zero_and_chainers_layers_in_one_interpreter():
    # One aarch64 interpreter for the three single-process checks (each start under QEMU
    # costs 20 s and more): the machine and FPCR.FZ's support; the x86 test's flush-to-zero
    # check, unchanged (denormal arithmetic flushed with the switch on, in the calling
    # thread and in numba's worker threads, and not with it off); Chainer's layers on numpy,
    # said once with the reason (no oneDNN 3 for arm64 on the index; Debian's libdnnl 2.6
    # speaks the v2 API, docs/compute.md), and onednn refused.
    out = _python(textwrap.dedent('''
        import platform
        from chainermn_torus.optimizers import fpenv
        print('machine', platform.machine(), fpenv.supported())
    ''') + textwrap.dedent(FTZ_CHECK).replace('print(', "print('ftz', ") + textwrap.dedent('''
        from chainermn_torus import compute
        from chainermn_torus.compute import dnnl
        print('mode', compute.use('auto', rank=0))
        try:
            compute.use('onednn')
        except dnnl.DnnlError as e:
            print('refused', e)
    '''))
    lines = out.splitlines()
    assert 'machine aarch64 True' in lines, out
    assert 'ftz ' + ' '.join(FTZ_EXPECTED) in lines, out
    assert 'mode numpy' in lines, out
    said = [l for l in lines if "compute: Chainer's numpy (auto, and" in l]
    assert len(said) == 1 and 'no oneDNN 3 package exists for aarch64' in said[0], out
    assert 'refused chainermn_torus: oneDNN (libdnnl.so.3) is not installed' in out


@pytest.mark.parametrize('variants, nprocs, hide_numba', [
    # one-sided puts, float16 through numba's aarch64 kernels; shared-memory rows of an odd
    # length: one job of 3 ranks (each job's start under QEMU is a minute)
    (['rsap', 'rsaa:shm=1'], 3, False),
    (['rsaa:shm=1'], 2, True),     # the numpy fallbacks on aarch64
], ids=['rsap+rsaa:shm=1-3', 'rsaa:shm=1-2-without-numba'])
def test_exact_means_on_aarch64(variants, nprocs, hide_numba, no_numba):
    path = no_numba + os.pathsep + ROOT if hide_numba else ROOT
    proc = run_mpi(nprocs, [worker('check_mean.py')] + variants, python=PYTHON, timeout=900,
                   env={'PYTHONPATH': path})
    assert_ok(proc, nprocs)
    assert ('numba is not installed' in proc.stdout) == hide_numba
