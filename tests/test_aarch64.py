"""aarch64 (Fugaku's A64FX and its kin), under QEMU user-mode emulation: flush-to-zero
through FPCR.FZ, and the communicators' exact means, with numba and without.

The aarch64 Python is built by ``make aarch64`` (scripts/aarch64_root.sh: root, apt). The
ranks are aarch64 processes started by the x86 venv's mpiexec (see the script for why).
QEMU emulates the architecture's FPCR semantics, not a particular chip's speed: these tests
check behaviour, and no figure from them is a timing.
"""
import os

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


def test_it_is_aarch64_with_flush_to_zero_supported():
    out = _python('''
        import platform
        from chainermn_torus.optimizers import fpenv
        print(platform.machine(), fpenv.supported())
    ''')
    assert out.split() == ['aarch64', 'True']


def test_flush_to_zero_sets_fpcr_fz_in_main_and_kernel_threads():
    # The x86 test's check, unchanged: denormal arithmetic flushed with the switch on, in
    # the calling thread (numpy) and in numba's worker threads (the fused kernel), and not
    # with it off.
    assert _python(FTZ_CHECK).split() == FTZ_EXPECTED


@pytest.mark.parametrize('variant, nprocs, hide_numba', [
    ('rsap', 2, False),          # one-sided puts; float16 through numba's aarch64 kernels
    ('rsaa:shm=1', 3, False),    # shared-memory rows, an odd row length
    ('rsaa:shm=1', 2, True),     # the numpy fallbacks on aarch64
])
def test_exact_means_on_aarch64(variant, nprocs, hide_numba, no_numba):
    path = no_numba + os.pathsep + ROOT if hide_numba else ROOT
    proc = run_mpi(nprocs, [worker('check_mean.py'), variant], python=PYTHON, timeout=900,
                   env={'PYTHONPATH': path})
    assert_ok(proc, nprocs)
    assert ('numba is not installed' in proc.stdout) == hide_numba


def test_chainers_layers_stay_on_numpy_on_aarch64_and_say_why():
    # No oneDNN 3 for arm64 on the index; Debian's libdnnl 2.6 speaks the v2 API
    # (docs/compute.md): auto is numpy, said once with the reason; onednn is refused.
    out = _python('''
        from chainermn_torus import compute
        from chainermn_torus.compute import dnnl
        print('mode', compute.use('auto', rank=0))
        try:
            compute.use('onednn')
        except dnnl.DnnlError as e:
            print('refused', e)
    ''')
    assert 'mode numpy' in out
    said = [l for l in out.splitlines() if "compute: Chainer's numpy (auto, and" in l]
    assert len(said) == 1 and 'no oneDNN 3 package exists for aarch64' in said[0], out
    assert 'refused chainermn_torus: oneDNN (libdnnl.so.3) is not installed' in out
