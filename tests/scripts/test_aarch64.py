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
from optimizers.test_fpenv_threads import FTZ_CHECK, FTZ_EXPECTED

PYTHON = os.path.join(ROOT, '.venv', 'aarch64', 'bin', 'python')
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.access(PYTHON, os.X_OK),
                       reason='no aarch64 Python: `make aarch64` builds one (root, apt: '
                              'arm64 packages and qemu-user-static)'),
    pytest.mark.skipif(MPI != 'mpich', reason="the aarch64 ranks carry the mpich wheel's "
                                              'libmpi; the x86 mpiexec must be MPICH too'),
]


CHECK_MEAN = worker('check_mean.py')
# Rank 0 of the numba job, after the exact means: the machine and FPCR.FZ's support; the x86
# test's flush-to-zero check, unchanged (denormal arithmetic flushed with the switch on, in
# the calling thread and in numba's worker threads, given back the two threads the rank's
# thread budget took, and not with it off); Chainer's layers on numpy, said once with the
# reason (no oneDNN 3 for arm64 on the index; Debian's libdnnl 2.6 speaks the v2 API,
# docs/compute.md), and onednn refused.
RANK0_CHECKS = textwrap.dedent('''
    import platform
    import numba
    from chainermn_torus.optimizers import fpenv
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    print('machine', platform.machine(), fpenv.supported(), 'numba threads',
          numba.get_num_threads())
''') + textwrap.dedent(FTZ_CHECK).replace('print(', "print('ftz', ") + textwrap.dedent('''
    from chainermn_torus import compute
    from chainermn_torus.compute.onednn import binding
    print('mode', compute.use('auto', rank=0))
    try:
        compute.use('onednn')
    except binding.DnnlError as e:
        print('refused', e)
''')


# The modules of the kernels the numba job calls (rsap's and rsaa's shared-memory rows on
# float32 and float64, float16 messages): compiled by rank 0 alone first.
WARM = ('chainermn_torus.communicators._half_kernels', 'chainermn_torus.communicators._shm')


def _job(nprocs, variants, rank0, no_numba):
    """check_mean.py's exact means for ``variants`` on nprocs aarch64 ranks, then, on rank
    0, the code ``rank0``: one job, so one QEMU start per rank for all of it. The last rank
    runs without numba (``no_numba`` first on its path), the others with it: each path's
    means are checked against the float64 reference, and the ranks' results against each
    other. Rank 0 first compiles the kernels of WARM into numba's cache while the others
    wait asleep: compiled on demand, in the middle of the collectives, the job took 151 s
    against 41 s on a cold cache (every CI run)."""
    code = textwrap.dedent('''
        import runpy, sys, time
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        if world.rank == world.size - 1:  # before anything imports numba
            sys.path.insert(0, {no_numba!r})
        elif world.rank == 0:
            from chainermn_torus.tools import kernel_cache
            kernel_cache.compile_ahead(1, modules={warm!r})
        ready = world.Ibarrier()
        while not ready.Test():  # asleep, not in MPI's wait: it would take a core
            time.sleep(0.05)
        sys.path.insert(0, {workers!r})
        sys.argv = [{check!r}] + {variants!r}
        runpy.run_path({check!r}, run_name='__main__')
        if world.rank == 0:
            exec({rank0!r})
        else:
            from chainermn_torus.runtime.cpu import jit
            # one write: the ranks share the pipe, and print's pieces interleaved with rank
            # 0's line once ('OK rank 0 checks 302rank' then ' 1 numba False ...')
            sys.stdout.write('rank {{}} numba {{}} {{}}\\n'.format(
                world.rank, jit.available(), jit.FALLBACK_NOTE[:23]))
            sys.stdout.flush()
    ''').format(workers=os.path.dirname(CHECK_MEAN), check=CHECK_MEAN, variants=variants,
                 rank0=rank0, warm=WARM, no_numba=no_numba)
    return run_mpi(nprocs, ['-c', code], python=PYTHON, timeout=900,
                   env={'NUMBA_NUM_THREADS': '2'})


def test_exact_means_with_and_without_numba_flush_to_zero_and_chainers_layers_on_aarch64(
        no_numba):
    # One-sided puts and float16, the shared-memory rows, at P = 2 (3 ranks took half as
    # long again): rank 0 through numba's aarch64 kernels, rank 1 through the numpy
    # fallbacks (odd row lengths: on x86, tests/runtime/cpu/test_without_numba.py), in one
    # job (a second job under QEMU cost 15 s of the full tier). On a cold numba cache (every
    # CI run) rank 0 compiles the kernels first (WARM). What grows with P is the same Python
    # on every architecture (every P to 8 on x86, and the fallbacks' odd rows at P = 3 in
    # tests/runtime/cpu/test_without_numba.py). Then rank 0's single-process checks.
    proc = _job(2, ['rsap', 'rsaa:shm=1'], RANK0_CHECKS, no_numba)
    assert_ok(proc, 2)
    out = proc.stdout
    assert 'rank 1 numba False numba is not installed' in out, out[-3000:]
    assert 'machine aarch64 True numba threads 2' in out, out[-3000:]
    assert 'ftz ' + ' '.join(FTZ_EXPECTED) in out, out[-3000:]
    assert 'mode numpy' in out, out[-3000:]
    said = [line for line in out.splitlines() if "compute: Chainer's numpy (auto, and" in line]
    assert len(said) == 1 and 'no oneDNN 3 package exists for aarch64' in said[0], out[-3000:]
    assert 'refused chainermn_torus: oneDNN (libdnnl.so.3) is not installed' in out
