"""numba where it is installed; numpy where it is not, said once at start-up.

The communicators use numba for the float16 conversions and sums and for the shared-memory
copies; the optimizer for its fused update kernels and flush-to-zero. numba is optional
so that the communicators run where no build of it exists for the machine (a new aarch64
cluster, a site Python without it): the kernels that have a numpy equivalent with the same
results fall back to it (``_half_kernels``, ``_shm``), slower; the ones that do not (fused
updates, flush-to-zero, the large-batch RMSprop kernel) stop with a message naming numba.

Nothing is imported here until asked: ``import chainermn_torus`` stays light.
"""
import ast
import contextlib
import functools
import os
import types

from chainermn_torus.errors import Unsupported

__all__ = ['numba', 'available', 'require', 'kernel', 'variant', 'arguments', 'FALLBACK_NOTE',
           'grain', 'GRAIN', 'kernel_modules']

# Shown once per node at start-up. What the fallbacks cost, measured on ResNet-50's 102 MB at
# P = 2 on this project's 2-core x86 VM (docs/portability.md): float16 communication 6x
# slower than with numba (226 against 38 ms), which makes it slower than float32 (29 ms);
# the shared-memory rows the same (21 ms both: one thread per rank there).
FALLBACK_NOTE = ('numba is not installed: float16 conversions and sums and the shared-memory '
                 'copies run in numpy instead (same results; float16 communication about 6x '
                 'slower, slower than float32: leave it off); fused update kernels and '
                 'flush-to-zero are not available (pip install numba)')


@functools.lru_cache(maxsize=None)
def numba():
    """The numba module, or None where it cannot be imported (looked for once)."""
    try:
        import numba as module
    except ImportError:
        return None
    return module


def available():
    return numba() is not None


def require(what):
    """Raise where numba is missing, naming what needed it and what to do."""
    if not available():
        raise Unsupported(
            f'chainermn_torus: numba cannot be imported in this Python and is needed for {what}; '
            'install it (pip install numba) or turn that off.')


def kernel(*arguments, parallel=True, fastmath=False):
    """``numba.njit(parallel=parallel, cache=True)``, keeping on the dispatcher (``ahead``)
    the argument types the package calls the kernel with, in numba's notation
    (``'(float32[::1], float32)'``). ``chainermn-torus kernels`` (tools/kernel_cache.py)
    compiles those into numba's cache before a job, so that its ranks load every kernel
    instead of each compiling it on first use; a call with other types compiles then, as
    without. Only where numba exists: the kernel modules are imported only there.
    ``fastmath``: numba's (a set of LLVM flags; ``{'reassoc'}`` lets a sum be added in any
    order, so that it vectorises)."""
    from numba.core import sigutils

    def decorate(function):
        dispatcher = numba().njit(parallel=parallel, cache=True, fastmath=fastmath)(function)
        # As tuples of types: numba keys its cache by the signature as given to compile(),
        # and a call looks it up by the types of its arguments (a string would never match).
        dispatcher.ahead = tuple(tuple(sigutils.normalize_signature(a)[0]) for a in arguments)
        dispatcher.arguments = arguments  # as given: another variant of it is made with them
        return dispatcher
    return decorate


def _declares_kernels(tree):
    # ``@jit.kernel(...)`` or ``@kernel(...)`` on a function of the module, or a call of
    # ``jit.kernel(...)(function)``: what makes a module a kernel module, read from its text.
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == 'kernel'
                    and isinstance(func.value, ast.Name) and func.value.id == 'jit'):
                return True
    return False


@functools.lru_cache(maxsize=None)
def kernel_modules():
    """The package's modules that declare kernels with ``kernel``, by name, sorted: found in
    the package's source (nothing imported), so that a new kernel module is compiled ahead
    (``chainermn-torus kernels``), timed by ``bench compute-profile`` and allowed its lazy
    import without being listed anywhere."""
    here = os.path.abspath(__file__)
    package = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    found = []
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != '__pycache__')
        for name in sorted(files):
            path = os.path.join(folder, name)
            if not name.endswith('.py') or path == here:  # the decorator itself
                continue
            with open(path) as f:
                text = f.read()
            if 'kernel(' in text and _declares_kernels(ast.parse(text)):
                module = os.path.relpath(path[:-3], os.path.dirname(package))
                found.append(module.replace(os.sep, '.'))
    return tuple(sorted(found))


# Elements of float32 work each thread of a kernel's parallel loop must have before another
# thread is woken for it (docs/compute.md, "Threads": waking a sleeping thread and joining
# it costs microseconds, a pass over 64 KiB about as much).
GRAIN = 16384


@contextlib.contextmanager
def grain(elements):
    """Run the kernels called inside on at most ``elements // GRAIN`` of the rank's numba
    threads (at least one): a few thousand elements on one thread, not on sixteen. A
    ``GRAIN`` of 0 gives every kernel every thread (a benchmark's before)."""
    module = numba()
    budget = module.get_num_threads() if module is not None else 1
    wanted = max(1, min(budget, int(elements) // GRAIN)) if GRAIN > 0 else budget
    if wanted == budget:
        yield
        return
    module.set_num_threads(wanted)
    try:
        yield
    finally:
        module.set_num_threads(budget)


def variant(dispatcher, name, **options):
    """The kernel of ``dispatcher`` compiled again with other ``options`` (``fastmath``) under
    its own ``name``: numba's cache names its files by the function's name and line, not by
    these options, so a variant under the same name would load the other's code."""
    source = dispatcher.py_func
    function = types.FunctionType(source.__code__, source.__globals__, name,
                                  source.__defaults__, source.__closure__)
    function.__qualname__ = name
    return kernel(*dispatcher.arguments, **options)(function)


def arguments(dtype, vectors, scalars=0, *more):
    """A kernel's argument types in numba's notation: ``vectors`` contiguous 1-D arrays of
    ``dtype``, ``scalars`` scalars of it, then the types ``more``
    (``arguments('float32', 2, 1, 'boolean')`` is ``'(float32[::1], float32[::1], float32,
    boolean)'``)."""
    return '({})'.format(', '.join([f'{dtype}[::1]'] * vectors + [dtype] * scalars
                                   + list(more)))
