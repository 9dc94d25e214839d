"""Running oneDNN's primitives on numpy arrays: memory objects over the arrays' buffers,
the primitives and the reorders between numpy's layout and the ones a primitive chose, the
scratch buffer the blocked copies live in (one per thread), and ``Bound``: a primitive with
its arguments, made once per geometry (``compute.onednn.layer``). The library itself, its
descriptors and its errors are ``dnnl``'s.
"""
import ctypes
import threading

import numpy

from chainermn_torus.compute.onednn import binding

__all__ = ['Memory', 'scratch', 'scratch_bytes', 'Primitive', 'Hint', 'Reorder', 'wait',
           'Bound']


class Memory:
    """A memory object over a buffer given at each call: a numpy array's data (``set``), or
    a region of the thread's scratch buffer (``set_address``; the blocked layouts between
    reorders and primitives)."""

    def __init__(self, md):
        self.md = md  # kept alive with the memory
        self.handle = binding.P()
        binding.check(binding.lib().dnnl_memory_create(
            ctypes.byref(self.handle), binding.handle_of(md), binding.engine(), binding.P(None)),
            'memory creation')

    def set(self, array):
        self.set_address(array.ctypes.data)

    def set_address(self, address):
        binding.check(binding.lib().dnnl_memory_set_data_handle(self.handle, binding.P(address)),
              'setting a memory buffer')

    def __del__(self):
        if binding.loaded() and self.handle:
            binding.lib().dnnl_memory_destroy(self.handle)


# The blocked copies a primitive reads and writes live only inside one call (reorder in, run,
# reorder out), so every geometry's share one buffer per thread, as large as the largest
# call needs, instead of one buffer each: kept per geometry they grew without bound with
# every new input shape (one conv + ReLU + pool layer over 21 image sizes kept 2.4 GiB).
_ALIGN = 64  # oneDNN's and AVX-512's alignment
_SCRATCH = threading.local()


def scratch(nbytes):
    """The address of this thread's scratch buffer, at least ``nbytes`` long (grown, never
    shrunk: the largest call recurs every step)."""
    buf = getattr(_SCRATCH, 'buffer', None)
    if buf is None or buf.size < nbytes + _ALIGN:
        _SCRATCH.buffer = buf = None  # the old one freed before the larger one is taken
        _SCRATCH.buffer = buf = numpy.empty(nbytes + _ALIGN, numpy.uint8)
    address = buf.ctypes.data
    return address + (-address) % _ALIGN


def scratch_bytes():
    """The size of this thread's scratch buffer (0 before the first call that needed one)."""
    buf = getattr(_SCRATCH, 'buffer', None)
    return 0 if buf is None else buf.size


class Primitive:
    """A primitive from its descriptor ``pd`` (which it then owns): ``run({ARG: Memory})``.
    Where it needs a scratchpad, ``scratchpad`` is its size in bytes and the caller gives
    its place in the scratch buffer (``place``) before running it."""

    def __init__(self, pd, what):
        self.pd, self.what = pd, what
        self.handle = binding.P()
        binding.check(binding.lib().dnnl_primitive_create(ctypes.byref(self.handle), pd), what)
        md = binding.query_md(pd, 'scratchpad')
        self.scratchpad = binding.md_size(md) if md else 0
        self._scratch = Memory(md) if self.scratchpad else None

    def place(self, address):
        if self._scratch is not None:
            self._scratch.set_address(address)

    def run(self, args):
        items = [(binding.ARG[k], m.handle) for k, m in args.items()]
        if self._scratch is not None:
            items.append((binding.ARG['scratchpad'], self._scratch.handle))
        array = (binding.ExecArg * len(items))(*[binding.ExecArg(k, h) for k, h in items])
        status = binding.lib().dnnl_primitive_execute(self.handle, binding.stream(), len(items),
                                                   array)
        binding.check(status, self.what)

    def impl(self):
        """The implementation oneDNN chose (for the docs and the benchmark)."""
        out = ctypes.c_char_p()
        binding.lib().dnnl_primitive_desc_query(self.pd, binding.QUERY['impl_info_str'], 0,
                                        ctypes.byref(out))
        return (out.value or b'').decode()

    def __del__(self):
        if binding.loaded():
            if self.handle:
                binding.lib().dnnl_primitive_destroy(self.handle)
            if self.pd:
                binding.lib().dnnl_primitive_desc_destroy(self.pd)


class Hint:
    """A forward primitive descriptor kept as the hint a backward one is made with (a
    Primitive owns, and frees, the descriptor it runs)."""

    def __init__(self, pd):
        self.pd = pd

    def __del__(self):
        if binding.loaded() and self.pd:
            binding.lib().dnnl_primitive_desc_destroy(self.pd)


class Reorder(Primitive):
    """From one layout to another (a numpy array's and a primitive's)."""

    def __init__(self, src_md, dst_md):
        pd = binding.P()
        binding.check(binding.lib().dnnl_reorder_primitive_desc_create(
            ctypes.byref(pd), binding.handle_of(src_md), binding.engine(),
            binding.handle_of(dst_md), binding.engine(), binding.attr()),
            'reorder')
        super().__init__(pd, 'reorder')

    def __call__(self, src, dst):
        self.run({'from': src, 'to': dst})


def wait():
    binding.check(binding.lib().dnnl_stream_wait(binding.stream()), 'stream wait')


class Bound:
    """A primitive with its numpy arguments: each argument's plain layout, and where the
    primitive chose another, a region of the scratch buffer in that layout and the reorder
    to it (an input) or from it (an output); the scratchpads in the scratch buffer too.
    ``__call__(**arrays)`` runs the reorders in, the primitive, the reorders out, and
    waits. Built once per shape and reused (``compute.onednn.conv``)."""

    def __init__(self, pd, what, inputs, outputs, plain, extra=None):
        self.primitive = Primitive(pd, what)
        self.inputs, self.outputs = inputs, outputs
        self.plain = {}      # name -> Memory over the numpy array
        self.inner = {}      # name -> (Memory in the primitive's layout, Reorder, offset)
        self.scratch = 0     # bytes of scratch the blocked layouts take, aligned each
        for name in inputs + outputs:
            chosen = binding.query_md(pd, name)
            outer = Memory(plain[name])
            self.plain[name] = outer
            if not binding.md_equal(plain[name], chosen):
                reorder = Reorder(plain[name], chosen) if name in inputs else \
                    Reorder(chosen, plain[name])
                self.inner[name] = (Memory(chosen), reorder, self.scratch)
                self.scratch += -(-binding.md_size(chosen) // _ALIGN) * _ALIGN
        self.extra = {}      # name -> Memory in the plain layout given (bias, diff_bias)
        for name, md in (extra or {}).items():
            self.extra[name] = Memory(md)
        # The scratchpads after the blocked copies: one region for all, the reorders and the
        # primitive running one after another.
        self._steps = [self.primitive] + [r for _, r, _ in self.inner.values()]
        self._pads = self.scratch
        self.scratch += max(step.scratchpad for step in self._steps)

    def __call__(self, copies=None, **arrays):
        """Run on ``arrays``; ``copies`` (``compute.onednn.copies.Copies``): the converted inputs
        to reuse and to keep."""
        args = {}
        for name, array in arrays.items():
            memory = self.plain.get(name) or self.extra[name]
            memory.set(array)
            args[name] = memory
        if self.scratch:
            base = scratch(self.scratch)
            for inner, _, offset in self.inner.values():
                inner.set_address(base + offset)
            for step in self._steps:
                step.place(base + self._pads)
        for name in self.inputs:
            if name in self.inner:
                inner, reorder, _ = self.inner[name]
                if copies is not None:
                    found = copies.find(arrays[name], inner.md)
                    if found is not None:  # converted by an earlier step: no reorder
                        inner.set_address(found.ctypes.data)
                        args[name] = inner
                        continue
                    kept = copies.make(name, arrays[name], self, inner.md)
                    if kept is not None:
                        inner.set_address(kept.ctypes.data)
                reorder(args[name], inner)
                args[name] = inner
        run = dict(args)
        for name in self.outputs:
            if name in self.inner:
                run[name] = self.inner[name][0]
        self.primitive.run(run)
        for name in self.outputs:
            if name in self.inner:
                inner, reorder, _ = self.inner[name]
                reorder(inner, args[name])
        wait()
