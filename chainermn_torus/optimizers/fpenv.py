"""Flush-to-zero / denormals-are-zero for the compute process.

Denormal (subnormal) floats take a slow path on most CPUs: an operation on them can cost
tens to hundreds of cycles instead of one. Training produces them: Adam's and momentum's state
for a weight whose gradient is always zero (an image border pixel, a dead ReLU unit) decays
geometrically through the denormal range, and squared small gradients land there. Kuroda et al.
found that trapping on these underflows made the K computer's Adam 3.38x slower and fixed it
by truncating them to zero; on x86 the same switch is two bits of the SSE control register
MXCSR: FTZ (results that would be denormal become 0) and DAZ (denormal inputs read as 0).

MXCSR is per thread. ``set_flush_denormals`` sets it for the calling thread (numpy, BLAS calls
made from it); the fused kernels set it in each of their worker threads (``kernel_set_mode``).
BLAS worker threads (OpenBLAS, MKL) keep their own setting; MKL and OpenBLAS kernels are not
where denormals cost here (the update is).

On aarch64 (Fugaku's A64FX, Graviton, Grace) the switch is FPCR.FZ, bit 24 of the
floating-point control register, also per thread: with it set, denormal inputs and results of
single- and double-precision operations (scalar and Advanced SIMD) are flushed to zero, what
FTZ+DAZ do together on x86. (Half-precision arithmetic has its own bit, FZ16, which this
project leaves alone: it only converts to and from float16.) Both registers are read and
written through LLVM intrinsics in numba-compiled code, so flush-to-zero needs numba; other
machines, or no numba, get an error naming what is missing instead of a silent no-op.
"""
import platform

import numpy

from chainermn_torus.errors import Unsupported
from chainermn_torus.runtime.cpu import jit

__all__ = ['supported', 'set_flush_denormals', 'flush_denormals_enabled', 'kernel_set_mode',
           'FTZ_DAZ_BITS', 'FPCR_FZ']

FTZ_DAZ_BITS = 0x8040  # MXCSR bit 15 (FTZ) and bit 6 (DAZ)
FPCR_FZ = 1 << 24  # aarch64 FPCR.FZ

_MACHINE = platform.machine().lower()
_X86 = _MACHINE in ('x86_64', 'amd64', 'i686', 'i386')
_ARM64 = _MACHINE in ('aarch64', 'arm64')
numba = jit.numba()


def supported():
    return (_X86 or _ARM64) and numba is not None


if supported():
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

# Per architecture: the control register's read and write (numba intrinsics), the
# flush-to-zero bits in it, and its width; one pair of kernels below uses them.
if supported() and _X86:
    def _mxcsr_call(builder, name, slot):
        i8p = ir.IntType(8).as_pointer()
        fn = builder.module.declare_intrinsic(
            name, fnty=ir.FunctionType(ir.VoidType(), [i8p]))
        builder.call(fn, [builder.bitcast(slot, i8p)])

    @intrinsic
    def _read_register(typingctx):
        def codegen(context, builder, sig, args):
            slot = builder.alloca(ir.IntType(32))
            _mxcsr_call(builder, 'llvm.x86.sse.stmxcsr', slot)
            return builder.load(slot)
        return types.int32(), codegen

    @intrinsic
    def _write_register(typingctx, value):
        def codegen(context, builder, sig, args):
            slot = builder.alloca(ir.IntType(32))
            builder.store(args[0], slot)
            _mxcsr_call(builder, 'llvm.x86.sse.ldmxcsr', slot)
            return context.get_dummy_value()
        return types.void(types.int32), codegen

    _BITS, _WIDTH = FTZ_DAZ_BITS, numpy.int32
elif supported():  # aarch64
    @intrinsic
    def _read_register(typingctx):
        def codegen(context, builder, sig, args):
            fn = builder.module.declare_intrinsic(
                'llvm.aarch64.get.fpcr', fnty=ir.FunctionType(ir.IntType(64), []))
            return builder.call(fn, [])
        return types.int64(), codegen

    @intrinsic
    def _write_register(typingctx, value):
        def codegen(context, builder, sig, args):
            fn = builder.module.declare_intrinsic(
                'llvm.aarch64.set.fpcr', fnty=ir.FunctionType(ir.VoidType(), [ir.IntType(64)]))
            builder.call(fn, [args[0]])
            return context.get_dummy_value()
        return types.void(types.int64), codegen

    _BITS, _WIDTH = FPCR_FZ, numpy.int64

if supported():
    @jit.kernel('(boolean,)', parallel=False)
    def kernel_set_mode(ftz):
        old = _read_register()
        new = (old | _BITS) if ftz else (old & ~_BITS)
        if new != old:
            _write_register(_WIDTH(new))

    @jit.kernel('()', parallel=False)
    def _enabled():
        return (_read_register() & _BITS) == _BITS
else:
    def _no_mode(ftz):
        pass

    # Called from numba's kernels where numba exists (so compiled there too); nothing to set.
    kernel_set_mode = jit.kernel('(boolean,)', parallel=False)(_no_mode) \
        if numba is not None else _no_mode

    def _enabled():
        return False


def set_flush_denormals(enabled=True):
    """Turn flush-to-zero (x86: FTZ+DAZ, aarch64: FZ) on or off for the calling thread.
    Returns the previous state."""
    enabled = bool(enabled)
    if enabled and not supported():
        if numba is None:
            jit.require('flush-to-zero (--flush-denormals, flush_denormals=True)')
        raise Unsupported(
            'chainermn_torus: flush-to-zero is implemented for x86-64 (MXCSR) and aarch64 '
            f'(FPCR.FZ); this machine is {platform.machine()!r}. Run without --flush-denormals (or '
            'flush_denormals=False).')
    previous = flush_denormals_enabled()
    kernel_set_mode(enabled)
    return previous


def flush_denormals_enabled():
    """Whether flush-to-zero (x86: FTZ and DAZ both, aarch64: FZ) is set for the calling
    thread."""
    return bool(_enabled())
