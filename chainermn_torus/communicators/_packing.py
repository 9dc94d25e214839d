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
import hashlib

import numpy
from mpi4py import MPI

__all__ = ['Layout', 'grad_params', 'data_params', 'PackedBuffer', 'check_same_layout',
           'transfer_dtype', 'MPI_TYPES']

# Explicit MPI datatypes, so a reader can count the bytes every call moves.
MPI_TYPES = {
    numpy.dtype(numpy.float32): MPI.FLOAT,
    numpy.dtype(numpy.float64): MPI.DOUBLE,
    numpy.dtype(numpy.uint8): MPI.BYTE,
}


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


def transfer_dtype(dtypes):
    """The dtype the sum is carried in: float64 if any array is float64, else float32.

    float16 is widened to float32 because MPI has no float16 sum (as ChainerMN's ``naive``);
    float64 models keep their precision instead of being rounded to float32.
    """
    if any(numpy.dtype(d) == numpy.float64 for d in dtypes):
        return numpy.dtype(numpy.float64)
    return numpy.dtype(numpy.float32)


class Layout(object):
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

    @classmethod
    def of_grads(cls, named_params):
        return cls([(n, p.data.shape, p.data.dtype) for n, p in named_params])

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
                return 'array #{}: {} vs {}'.format(i, _entry_str(a), _entry_str(b))
        if len(self.entries) != len(other.entries):
            return '{} arrays vs {} arrays'.format(len(self.entries), len(other.entries))
        return 'transfer dtype {} vs {}'.format(self.dtype, other.dtype)


def _entry_str(entry):
    name, shape, dtype = entry
    return '{} shape={} dtype={}'.format(name, shape, numpy.dtype(dtype).name)


def check_same_layout(mpi_comm, layout, what='gradients'):
    """Raise ValueError on every rank if the ranks' layouts differ.

    Cost when they agree: one MPI_Allreduce of two int64 values.
    """
    if mpi_comm.size == 1:
        return
    mine = numpy.array([layout.digest, -layout.digest], dtype=numpy.int64)
    both = numpy.empty_like(mine)
    mpi_comm.Allreduce([mine, MPI.INT64_T], [both, MPI.INT64_T], op=MPI.MAX)
    if both[0] == -both[1]:
        return
    # Slow path, only on error: everyone learns everyone's layout and raises the same message.
    layouts = mpi_comm.allgather(layout)
    for rank, other in enumerate(layouts):
        if other != layouts[0]:
            raise ValueError(
                'chainermn_torus: the model\'s {} differ between ranks, so they cannot be '
                'averaged: rank 0 has {} arrays ({} elements), rank {} has {} arrays ({} '
                'elements); first difference: {}. Every rank must build the same model '
                '(use zero_fill=True if some ranks leave gradients None).'.format(
                    what, len(layouts[0].entries), layouts[0].size, rank, len(other.entries),
                    other.size, layouts[0].describe_difference(other)))


class PackedBuffer(object):
    """One persistent flat buffer for a layout, with pack/unpack to the model's arrays."""

    def __init__(self, layout):
        self.layout = layout
        self.array = numpy.empty(layout.size, dtype=layout.dtype)
        self.mpi_type = MPI_TYPES[layout.dtype]

    def pack_grads(self, named_params):
        buf, offs = self.array, self.layout.offsets
        for i, (_, p) in enumerate(named_params):
            dst = buf[offs[i]:offs[i + 1]]
            if p.grad is None:
                dst[...] = 0  # zero_fill: an unused parameter contributes zeros
            else:
                numpy.copyto(dst, p.grad.ravel(), casting='same_kind')

    def unpack_grads(self, named_params):
        buf, offs = self.array, self.layout.offsets
        for i, (_, p) in enumerate(named_params):
            src = buf[offs[i]:offs[i + 1]].reshape(p.data.shape)
            if p.grad is None:
                # The buffer is reused next call, so the parameter gets its own copy.
                p.grad = src.astype(p.data.dtype, copy=True)
            else:
                numpy.copyto(p.grad, src, casting='same_kind')

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


def segments(total, segment_elems):
    """Half-open [lo, hi) ranges covering ``total`` elements, at most ``segment_elems`` each."""
    if total == 0:
        return []
    if not segment_elems or segment_elems >= total:
        return [(0, total)]
    return [(lo, min(lo + segment_elems, total)) for lo in range(0, total, segment_elems)]


def split_counts(n, parts):
    """Counts and displacements of ``n`` elements split into ``parts`` near-equal chunks.

    The first ``n % parts`` chunks get one element more, so any n and any parts work.
    """
    base, extra = divmod(n, parts)
    counts = [base + (1 if j < extra else 0) for j in range(parts)]
    displs = [0] * (parts + 1)
    for j in range(parts):
        displs[j + 1] = displs[j] + counts[j]
    return counts, displs
