"""Flush-to-zero / denormals-are-zero for the compute process.

Denormal (subnormal) floats take a slow path on most CPUs: an operation on them can cost
tens to hundreds of cycles instead of one. Training produces them: Adam's and momentum's state
for a weight whose gradient is always zero (an image border pixel, a dead ReLU unit) decays
geometrically through the denormal range, and squared small gradients land there. Seed 002
found that trapping on these underflows made the K computer's Adam 3.38x slower and fixed it
by truncating them to zero; on x86 the same switch is two bits of the SSE control register
MXCSR: FTZ (results that would be denormal become 0) and DAZ (denormal inputs read as 0).

MXCSR is per thread. ``set_flush_denormals`` sets it for the calling thread (numpy, BLAS calls
made from it); the fused kernels set it in each of their worker threads (``kernel_set_mode``).
BLAS worker threads (OpenBLAS, MKL) keep their own setting; MKL and OpenBLAS kernels are not
where denormals cost here (the update is).

Supported on x86-64. Elsewhere (aarch64: FPCR.FZ) ``set_flush_denormals(True)`` raises
instead of doing nothing silently.
"""
import platform

import numba
import numpy
from numba import types
from numba.extending import intrinsic

__all__ = ['supported', 'set_flush_denormals', 'flush_denormals_enabled', 'kernel_set_mode',
           'FTZ_DAZ_BITS']

FTZ_DAZ_BITS = 0x8040  # MXCSR bit 15 (FTZ) and bit 6 (DAZ)

_X86 = platform.machine().lower() in ('x86_64', 'amd64', 'i686', 'i386')


def supported():
    return _X86


if _X86:
    from llvmlite import ir

    def _mxcsr_call(builder, name, slot):
        i8p = ir.IntType(8).as_pointer()
        fn = builder.module.declare_intrinsic(
            name, fnty=ir.FunctionType(ir.VoidType(), [i8p]))
        builder.call(fn, [builder.bitcast(slot, i8p)])

    @intrinsic
    def _read_mxcsr(typingctx):
        def codegen(context, builder, sig, args):
            slot = builder.alloca(ir.IntType(32))
            _mxcsr_call(builder, 'llvm.x86.sse.stmxcsr', slot)
            return builder.load(slot)
        return types.int32(), codegen

    @intrinsic
    def _write_mxcsr(typingctx, value):
        def codegen(context, builder, sig, args):
            slot = builder.alloca(ir.IntType(32))
            builder.store(args[0], slot)
            _mxcsr_call(builder, 'llvm.x86.sse.ldmxcsr', slot)
            return context.get_dummy_value()
        return types.void(types.int32), codegen

    @numba.njit(cache=True)
    def kernel_set_mode(ftz):
        old = _read_mxcsr()
        new = (old | FTZ_DAZ_BITS) if ftz else (old & ~FTZ_DAZ_BITS)
        if new != old:
            _write_mxcsr(numpy.int32(new))

    @numba.njit(cache=True)
    def _enabled():
        return (_read_mxcsr() & FTZ_DAZ_BITS) == FTZ_DAZ_BITS
else:
    @numba.njit(cache=True)
    def kernel_set_mode(ftz):
        pass

    def _enabled():
        return False


def set_flush_denormals(enabled=True):
    """Turn FTZ+DAZ on or off for the calling thread. Returns the previous state."""
    enabled = bool(enabled)
    if enabled and not _X86:
        raise RuntimeError(
            'chainermn_torus: flush-to-zero is implemented for x86-64 (MXCSR) only; this '
            'machine is {!r}. Run without --flush-denormals (or flush_denormals=False).'.format(
                platform.machine()))
    previous = flush_denormals_enabled()
    kernel_set_mode(enabled)
    return previous


def flush_denormals_enabled():
    """Whether FTZ and DAZ are both set for the calling thread."""
    return bool(_enabled())
