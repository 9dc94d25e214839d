"""Packing of a model's gradients (or parameters) into one persistent contiguous buffer.

All three communicators move one flat buffer instead of one message per array. The buffer is
allocated once for a given *layout* (parameter names, shapes and dtypes, in ChainerMN's sorted
``namedparams`` order) and reused while the model keeps that layout.

The layout is also what ranks must agree on: if one rank packs a different set of arrays, a
collective on the flat buffer would silently mix unrelated gradients or wait forever for bytes
that never come. ``check_same_layout`` compares a 64-bit digest of the layout across ranks with
one tiny all-reduce and, when they differ, every rank raises the same ValueError naming the first
difference.
"""
import functools
import hashlib
import weakref

import numpy
from mpi4py import MPI

from chainermn_torus.algorithms.segments import plan_segments
from chainermn_torus.communicators import _dtypes
from chainermn_torus.errors import ConfigError
from chainermn_torus.runtime.cpu import jit

__all__ = ['Layout', 'grad_params', 'data_params', 'param_signature', 'PackedBuffer',
           'check_same_layout', 'transfer_dtype', 'MPI_TYPES', 'mpi_type_of', 'address']

# Explicit MPI datatypes, so a reader can count the bytes every call moves.
MPI_TYPES = {
    numpy.dtype(numpy.float32): MPI.FLOAT,
    numpy.dtype(numpy.float64): MPI.DOUBLE,
    numpy.dtype(numpy.int64): MPI.INT64_T,   # the exact sum's integers (``_exact``)
    numpy.dtype(numpy.uint8): MPI.BYTE,
}

def mpi_type_of(dtype):
    """The MPI datatype a transfer dtype travels as.

    float16 and bfloat16 travel as a 2-byte contiguous datatype; they have no MPI sum, so
    the buffer's reducer sums them with numba (see ``engine.reducer_for``).
    """
    dtype = numpy.dtype(dtype)
    if not _dtypes.is_half(dtype):
        return MPI_TYPES[dtype]
    return _float16_type()


@functools.lru_cache(maxsize=None)
def _float16_type():
    """Made on first use (MPI must be initialised), once per process."""
    return MPI.BYTE.Create_contiguous(2).Commit()


def grad_params(model, zero_fill):
    """(name, param) pairs whose gradients take part, exactly as ChainerMN chooses them.

    ChainerMN skips uninitialised parameters (data None) always, and parameters whose grad is
    None unless ``zero_fill`` is set, in which case their grad becomes zeros before averaging.
    """
    return [(name, p) for name, p in sorted(model.namedparams())
            if p.data is not None and (zero_fill or p.grad is not None)]


def data_params(model):
    """(name, param) pairs with data, in the order ChainerMN broadcasts them."""
    return [(name, p) for name, p in sorted(model.namedparams()) if p.data is not None]


def param_signature(model):
    """(name, initialised) of every parameter: ChainerMN's test for a changed model."""
    return [(name, p.data is not None) for name, p in sorted(model.namedparams())]


def transfer_dtype(dtypes):
    """The dtype the sum is carried in: float64 if any array is float64, else float32.

    float16 is widened to float32 because MPI has no float16 sum (as ChainerMN's ``naive``);
    float64 models keep their precision instead of being rounded to float32.
    """
    if any(numpy.dtype(d) == numpy.float64 for d in dtypes):
        return numpy.dtype(numpy.float64)
    return numpy.dtype(numpy.float32)


class Layout:
    """Names, shapes, dtypes and offsets of the arrays in a packed buffer."""

    def __init__(self, entries, dtype=None):
        # entries: sequence of (name, shape, dtype)
        self.entries = tuple((n, tuple(int(x) for x in s), numpy.dtype(d).str)
                             for n, s, d in entries)
        self.dtype = numpy.dtype(dtype) if dtype is not None else transfer_dtype(
            [e[2] for e in self.entries])
        sizes = [int(numpy.prod(s, dtype=numpy.int64)) for _, s, _ in self.entries]
        self.offsets = numpy.concatenate([[0], numpy.cumsum(sizes, dtype=numpy.int64)])
        self.size = int(self.offsets[-1])
        self.digest = int.from_bytes(
            hashlib.blake2b(repr((self.entries, self.dtype.str)).encode(), digest_size=8).digest(),
            'little', signed=True)

    def pieces(self, lo, hi):
        """(i, a, b) for each array i that elements [lo, hi) of the buffer cover, with the
        part [a, b) it covers (a < b), in order."""
        offs = self.offsets
        first = int(numpy.searchsorted(offs, lo, side='right')) - 1
        last = int(numpy.searchsorted(offs, hi, side='left'))
        for i in range(max(first, 0), last):
            a, b = max(lo, int(offs[i])), min(hi, int(offs[i + 1]))
            if a < b:
                yield i, a, b

    @classmethod
    def of_data_bytes(cls, named_params):
        """Layout for broadcasting parameters as raw bytes (exact for every dtype)."""
        return cls([(n, (p.data.nbytes,), p.data.dtype) for n, p in named_params],
                   dtype=numpy.uint8)

    def __eq__(self, other):
        return isinstance(other, Layout) and self.entries == other.entries \
            and self.dtype == other.dtype

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return self.digest

    def describe_difference(self, other):
        """A sentence naming the first entry where two layouts differ."""
        for i, (a, b) in enumerate(zip(self.entries, other.entries)):
            if a != b:
                return f'array #{i}: {_entry_str(a)} vs {_entry_str(b)}'
        if len(self.entries) != len(other.entries):
            longer = self.entries if len(self.entries) > len(other.entries) else other.entries
            extra = longer[min(len(self.entries), len(other.entries)):]
            return '{} arrays vs {} arrays; only one side has {}{}'.format(
                len(self.entries), len(other.entries), _entry_str(extra[0]),
                f' and {len(extra) - 1} more' if len(extra) > 1 else '')
        return f'transfer dtype {self.dtype} vs {other.dtype}'


def _entry_str(entry):
    name, shape, dtype = entry
    return f'{name} shape={shape} dtype={numpy.dtype(dtype).name}'


def check_same_layout(mpi_comm, layout, what='gradients', allreduce=None):
    """Raise ValueError on every rank if the ranks' layouts differ.

    Cost when they agree: one MPI_Allreduce of two int64 values (``allreduce``, bound to
    ``mpi_comm`` by a wait of ``_progress``, when given).
    """
    if mpi_comm.size == 1:
        return
    mine = numpy.array([layout.digest, -layout.digest], dtype=numpy.int64)
    both = numpy.empty_like(mine)
    (allreduce or mpi_comm.Allreduce)([mine, MPI.INT64_T], [both, MPI.INT64_T], op=MPI.MAX)
    if both[0] == -both[1]:
        return
    # Slow path, only on error: everyone learns everyone's layout and raises the same message.
    layouts = mpi_comm.allgather(layout)
    for rank, other in enumerate(layouts):
        if other != layouts[0]:
            raise ConfigError(
                'chainermn_torus: the model\'s {} differ between ranks, so they cannot be '
                'averaged: rank 0 has {} arrays ({} elements), rank {} has {} arrays ({} '
                'elements); first difference: {}. Every rank must build the same model{}.'
                .format(what, len(layouts[0].entries), layouts[0].size, rank,
                        len(other.entries), other.size, layouts[0].describe_difference(other),
                        ' (use zero_fill=True if some ranks leave gradients None)'
                        if what == 'gradients' else ''))


class PackedBuffer:
    """One persistent flat buffer for a layout, and the plan of segments sent from it.

    Gradients are not always copied in first. A segment that lies inside one large gradient
    array is sent straight from that array (the MPI call reads it as its send buffer and
    writes the result into this buffer), so only the small arrays are packed. After the
    call, each gradient becomes a view of its place in this buffer, so unpacking copies
    nothing either (a float16 gradient, carried in float32, is copied back and cast).
    """

    def __init__(self, layout, segment_elems=0, direct_min_elems=None, array=None,
                 memory=None, rows=None, reducer=None, prescaled=False):
        # ``memory``: the object that owns ``array``'s memory and frees it (an RMA or a
        # node-shared window), or None for numpy's. The strategies it is made with, never
        # changed: ``rows``, the torus's row phases (engine.MessageRows, _rsap_modes.PutRows,
        # _shm.ShmRows; None without a grid), which own MPI state freed with the buffer;
        # ``reducer``, how a part is summed (engine.reducer_for); ``prescaled``, whether packing
        # multiplies by 1/P.
        self.layout = layout
        self.memory = memory
        self.array = numpy.empty(layout.size, dtype=layout.dtype) if array is None else array
        self._viewers = []  # params whose grads were last set to views of self.array
        # Memory freed by someone else first (the windows left at exit are freed before
        # MPI_Finalize, maybe before their communicator's finalize): the gradients that view
        # it get their copies while it is still mapped. A view of unmapped memory crashed
        # the process at exit (SIGSEGV) once it was read.
        hooks = getattr(memory, 'before_free', None)
        if hooks is not None:
            hooks.append(self.detach_views)
        self.mpi_type = mpi_type_of(layout.dtype)
        self.half = _dtypes.is_half(layout.dtype)  # float16/bfloat16: numba's casts below
        self.rows, self.reducer, self.prescaled = rows, reducer, bool(prescaled)
        self.plan = plan_segments(layout.offsets, segment_elems, direct_min_elems)
        self.bucket_plan = (None, None)  # (bucket bounds, the plan cut at them): overlap

    # --- what the engine asks of a buffer (``_exact.ExactBuffer`` answers otherwise) ----------
    @property
    def means(self):
        """Where the means are after a call (and the gradients view): the buffer itself."""
        return self.array

    @property
    def gathered(self):
        """(array, MPI type) that phase 3 moves: the buffer itself."""
        return self.array, self.mpi_type

    def sum_divisor(self, size):
        """What the engine divides a chunk's sum over ``size`` ranks by: 1 if packing
        already multiplied by 1/size."""
        return 1 if self.prescaled else size

    def finish(self):
        """After a call's last segment: nothing to do here (the sums are the means)."""

    # --- gradients --------------------------------------------------------------------------
    def send_source(self, named_params, segment, scale=None):
        """The send buffer for one segment: a slice of a gradient array, or None.

        None means "in place": the segment's part of ``self.array`` has been filled (packed)
        and the collective reads and writes it there. With ``scale`` the segment is always
        packed, multiplied by ``scale`` on the way (the copy and the scaling in one pass).
        """
        lo, hi, index = segment
        offs = self.layout.offsets
        if index is not None and scale is None:
            grad = named_params[index][1].grad
            if grad is not None and grad.dtype == self.array.dtype and grad.flags.c_contiguous:
                flat = grad.reshape(-1)
                if address(flat) == address(self.array) + int(offs[index]) * flat.itemsize:
                    return None  # the grad is already our view: it is in place
                return flat[lo - offs[index]:hi - offs[index]]
            self._pack_range(named_params, lo, hi, index, index + 1)
            return None
        first = int(numpy.searchsorted(offs, lo, side='right')) - 1
        last = int(numpy.searchsorted(offs, hi, side='left'))
        self._pack_range(named_params, lo, hi, first, last, scale)
        return None

    def _pack_range(self, named_params, lo, hi, first, last, scale=None):
        buf, offs = self.array, self.layout.offsets
        for i in range(first, last):
            a, b = max(lo, offs[i]), min(hi, offs[i + 1])
            if a >= b:
                continue
            dst = buf[a:b]
            grad = named_params[i][1].grad
            if grad is None:
                dst[...] = 0  # zero_fill: an unused parameter contributes zeros
            else:
                src = grad.reshape(-1)[a - offs[i]:b - offs[i]]
                # Without numba, the branches below give the same bits (float32 product,
                # one rounding to float16 or bfloat16), slower.
                if self.half and src.dtype == numpy.float32 \
                        and src.flags.c_contiguous and jit.available():
                    from chainermn_torus.communicators import _half_kernels
                    _half_kernels.KERNELS[dst.dtype.name][0](
                        dst.view(numpy.uint16), src,
                        numpy.float32(1.0 if scale is None else scale))
                elif dst.dtype.name == 'bfloat16':
                    # numpy's float32 product, rounded once by ml_dtypes' cast
                    dst[...] = (src if scale is None else numpy.multiply(
                        src, scale, dtype=numpy.float32)).astype(dst.dtype)
                elif scale is not None:
                    # In the wider of the two precisions, rounded once into the buffer (a
                    # float16 buffer must not round, or underflow, before the scaling; a
                    # float16 gradient is scaled in the float32 it is carried in). Overflow
                    # to infinity is what float16 gives, as in the kernel: not warned here
                    # (check_finite is where it is reported).
                    with numpy.errstate(over='ignore'):
                        numpy.multiply(src, scale, out=dst, casting='unsafe',
                                       dtype=numpy.promote_types(src.dtype, dst.dtype))
                elif not numpy.shares_memory(src, dst):
                    with numpy.errstate(over='ignore'):
                        numpy.copyto(dst, src, casting='same_kind')

    def unpack_grads(self, named_params):
        buf, offs = self.means, self.layout.offsets
        self._viewers = []
        for i, (_, p) in enumerate(named_params):
            src = buf[offs[i]:offs[i + 1]].reshape(p.data.shape)
            if p.data.dtype == buf.dtype:
                p.grad = src  # a view: no copy (valid until the next call)
                self._viewers.append(weakref.ref(p))
            elif self.half and p.data.dtype == numpy.float32 \
                    and jit.available():
                from chainermn_torus.communicators import _half_kernels
                grad = p.grad
                if grad is None or grad.dtype != numpy.float32 or not grad.flags.c_contiguous:
                    grad = p.grad = numpy.empty(p.data.shape, numpy.float32)
                _half_kernels.KERNELS[buf.dtype.name][1](grad.reshape(-1),
                                                         src.reshape(-1).view(numpy.uint16))
            elif buf.dtype.name == 'bfloat16':
                if p.grad is None:
                    p.grad = src.astype(p.data.dtype)
                else:
                    p.grad[...] = src.astype(p.grad.dtype)  # widening: exact
            elif p.grad is None:
                p.grad = src.astype(p.data.dtype)
            else:
                numpy.copyto(p.grad, src, casting='same_kind')

    def detach_views(self):
        """Give gradients that still view this buffer their own copy (before it is freed)."""
        for ref in self._viewers:
            p = ref()
            if p is not None and p.grad is not None and numpy.shares_memory(p.grad, self.means):
                p.grad = p.grad.copy()
        self._viewers = []

    def release(self):
        """Detach the gradients, then free the memory's owner (collective for a window)."""
        self.detach_views()
        if self.memory is not None:
            self.array = None
            self.memory.free()
            self.memory = None

    # --- parameters, as raw bytes -----------------------------------------------------------
    def pack_data_bytes(self, named_params):
        buf, offs = self.array, self.layout.offsets
        for i, (_, p) in enumerate(named_params):
            buf[offs[i]:offs[i + 1]] = numpy.ascontiguousarray(p.data).reshape(-1).view(numpy.uint8)

    def unpack_data_bytes(self, named_params):
        buf, offs = self.array, self.layout.offsets
        for i, (_, p) in enumerate(named_params):
            src = buf[offs[i]:offs[i + 1]].view(p.data.dtype).reshape(p.data.shape)
            # Write into the existing array: optimizers and links hold references to it.
            p.array[...] = src


def address(array):
    """The address of ``array``'s first element (a view's place in its buffer)."""
    return array.__array_interface__['data'][0]
