"""oneDNN's C API (v3) through ctypes: the library, its engine and stream, memory
descriptors, oneDNN's own GEMM (a benchmark's bound); the objects that run primitives on
numpy arrays are ``compute.onednn.primitives``'.

Why ctypes over the C API and not a compiled extension: the wheels ``onednn-cpu-gomp`` (the
library, GNU OpenMP) install with pip alone, and a binding that needs no compiler at
install time builds nowhere and so fails nowhere; a call costs a few microseconds of
ctypes, against the milliseconds a convolution takes. The layer code (``compute.onednn.conv``, ...)
sees only a small vocabulary: memory descriptors made from numpy shapes here, primitives
and reorders between a plain (numpy) layout and the blocked one a primitive prefers in
``compute.onednn.primitives``.

The library is found beside the Python that runs (``sys.prefix/lib``, where the wheel puts
it), else by the loader's search (``ctypes.util.find_library('dnnl')``); ``available()``
says whether it loaded and why not.
"""
import ctypes
import ctypes.util
import os
import platform
import sys

from chainermn_torus.errors import Unsupported

__all__ = ['available', 'why_unavailable', 'version', 'lib', 'engine', 'stream', 'plain_md',
           'sgemm', 'any_md', 'query_md', 'md_equal', 'md_size', 'dims', 'attr', 'DnnlError',
           'F32', 'BF16', 'DTYPES', 'ARG', 'PROP', 'ALG', 'QUERY', 'TAG', 'P', 'declare',
           'ExecArg', 'handle_of',
           'loaded']

P = ctypes.c_void_p
DIMS = ctypes.c_int64 * 12  # dnnl_dims_t (DNNL_MAX_NDIMS)

F32 = 3
BF16 = 2  # dnnl_bf16: float32's exponent, 8 bits of mantissa (compute.precision)
DTYPES = {'fp32': F32, 'bf16': BF16}
TAG = {'any': 1, 'a': 2, 'ab': 3, 'abcd': 5, 'abcde': 6, 'aBcd16b': 78}
PROP = {'forward_training': 64, 'forward_inference': 96, 'backward': 128,
        'backward_data': 160, 'backward_weights': 192}
# The algorithm kinds (dnnl_alg_kind_t) the layer modules use: each declares its own
# (``declare``), beside the C functions it calls.
ALG = {}
QUERY = {'src': 129, 'diff_src': 130, 'weights': 131, 'diff_weights': 132, 'dst': 133,
         'diff_dst': 134, 'workspace': 135, 'scratchpad': 136, 'exec_arg': 255,
         'impl_info_str': 8}
SCRATCHPAD_USER = 1  # dnnl_scratchpad_mode_user
ARG = {'src': 1, 'dst': 17, 'weights': 33, 'bias': 41, 'mean': 49, 'variance': 50,
       'scale': 51, 'shift': 52, 'workspace': 64, 'scratchpad': 80, 'diff_src': 129,
       'diff_dst': 145,
       'diff_weights': 161, 'diff_bias': 169, 'diff_scale': 255, 'diff_shift': 256,
       'from': 1, 'to': 17}


class DnnlError(Unsupported):
    """A oneDNN call that failed: the function and oneDNN's status."""


class ExecArg(ctypes.Structure):
    _fields_ = [('arg', ctypes.c_int), ('memory', P)]


class _Version(ctypes.Structure):
    _fields_ = [('major', ctypes.c_int), ('minor', ctypes.c_int), ('patch', ctypes.c_int),
                ('hash', ctypes.c_char_p), ('cpu_runtime', ctypes.c_uint),
                ('gpu_runtime', ctypes.c_uint)]


_STATUS = {1: 'out of memory', 2: 'invalid arguments', 3: 'unimplemented',
           4: 'last implementation reached', 5: 'runtime error', 6: 'not required',
           7: 'invalid graph', 8: 'invalid graph op', 9: 'invalid shape',
           10: 'invalid data type'}

# function -> (argtypes, restype); every call goes through these declarations (a Python int
# passed where a pointer is expected would be cut to 32 bits otherwise). Here the library's
# own (engine, stream, memory, primitives, reorder, sgemm); each layer module declares its
# primitive's beside the code that calls them (``declare``), so a new one is that module.
_SIGNATURES = {
    'dnnl_version': ([], ctypes.POINTER(_Version)),
    'dnnl_engine_create': ([ctypes.POINTER(P), ctypes.c_int, ctypes.c_size_t], ctypes.c_int),
    'dnnl_stream_create': ([ctypes.POINTER(P), P, ctypes.c_uint], ctypes.c_int),
    'dnnl_stream_wait': ([P], ctypes.c_int),
    'dnnl_memory_desc_create_with_tag': (
        [ctypes.POINTER(P), ctypes.c_int, DIMS, ctypes.c_int, ctypes.c_int], ctypes.c_int),
    'dnnl_memory_desc_create_with_strides': (
        [ctypes.POINTER(P), ctypes.c_int, DIMS, ctypes.c_int, DIMS], ctypes.c_int),
    'dnnl_memory_desc_destroy': ([P], ctypes.c_int),
    'dnnl_memory_desc_equal': ([P, P], ctypes.c_int),
    'dnnl_memory_desc_get_size': ([P], ctypes.c_size_t),
    'dnnl_memory_create': ([ctypes.POINTER(P), P, P, P], ctypes.c_int),
    'dnnl_memory_set_data_handle': ([P, P], ctypes.c_int),
    'dnnl_memory_destroy': ([P], ctypes.c_int),
    'dnnl_primitive_desc_query_md': ([P, ctypes.c_int, ctypes.c_int], P),
    'dnnl_primitive_attr_create': ([ctypes.POINTER(P)], ctypes.c_int),
    'dnnl_primitive_attr_destroy': ([P], ctypes.c_int),
    'dnnl_primitive_attr_set_scratchpad_mode': ([P, ctypes.c_int], ctypes.c_int),
    'dnnl_get_primitive_cache_capacity': ([ctypes.POINTER(ctypes.c_int)], ctypes.c_int),
    'dnnl_set_primitive_cache_capacity': ([ctypes.c_int], ctypes.c_int),
    'dnnl_primitive_desc_query': ([P, ctypes.c_int, ctypes.c_int, P], ctypes.c_int),
    'dnnl_primitive_desc_destroy': ([P], ctypes.c_int),
    'dnnl_primitive_create': ([ctypes.POINTER(P), P], ctypes.c_int),
    'dnnl_primitive_destroy': ([P], ctypes.c_int),
    'dnnl_primitive_execute': ([P, P, ctypes.c_int, ctypes.POINTER(ExecArg)], ctypes.c_int),
    'dnnl_reorder_primitive_desc_create': ([ctypes.POINTER(P), P, P, P, P, P], ctypes.c_int),
    'dnnl_sgemm': ([ctypes.c_char, ctypes.c_char] + [ctypes.c_int64] * 3 +
                   [ctypes.c_float, P, ctypes.c_int64, P, ctypes.c_int64, ctypes.c_float, P,
                    ctypes.c_int64], ctypes.c_int),
}

_STATE = {}  # 'lib', 'engine', 'stream', 'why', 'pid'

# What to do where the library is not found, by machine. The index has oneDNN 3 wheels for
# x86-64 only; Debian's arm64 libdnnl is 2.6, whose v2 API (operation descriptors, memory
# descriptors as structures passed by value) this binding does not speak (docs/compute.md).
_FIX = {'x86_64': 'pip install onednn-cpu-gomp',
        'other': 'no oneDNN 3 package exists for {} (Debian\'s libdnnl 2.x has the v2 API, '
                 'which this binding does not speak): build oneDNN 3.x from source and put '
                 'libdnnl.so.3 on the loader\'s path'}


def _candidates():
    # The loader's search last, and only where the venv's own copies did not load: it
    # starts ldconfig and the C compiler (about 20 ms a call), in every rank.
    here = os.path.join(sys.prefix, 'lib')
    for name in ('libdnnl.so.3', 'libdnnl.so'):
        yield os.path.join(here, name)
    found = ctypes.util.find_library('dnnl')
    if found:
        yield found


# GNU OpenMP's idle threads spin after each parallel region (GOMP_SPINCOUNT, 300000 turns
# by default) on the cores where the rank's OpenBLAS and numba threads run next: measured,
# the MNIST MLP (linear on OpenBLAS, ReLU on oneDNN, 2 threads, this VM) took 45 ms per
# iteration spinning, 15 ms with 0 (numpy alone: 16 ms; docs/compute.md). Not spinning at
# all made every primitive wake its threads from sleep: 10000 turns (tens of microseconds,
# the gap between one primitive and the next) made ResNet-50's whole iteration at 1 rank x 2
# threads 1.08-1.17x faster at batch 1 and 1.04x at batch 8, the MLP unchanged within its
# noise, where 1000 turns changed nothing (docs/compute.md, "Threads"). Read by libgomp
# when it loads, so set before the library is: unless the user chose a policy.
SPIN = ('GOMP_SPINCOUNT', '10000')


def _quiet_openmp():
    if 'GOMP_SPINCOUNT' not in os.environ and 'OMP_WAIT_POLICY' not in os.environ:
        os.environ[SPIN[0]] = SPIN[1]


def _load():
    if 'lib' in _STATE or 'why' in _STATE:
        return
    _quiet_openmp()
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f'{path}: {e}')
            continue
        try:
            _bind(lib, _SIGNATURES)
        except AttributeError as e:  # another major version (v2's API has other names)
            tried.append(f'{path}: {e}')
            continue
        v = lib.dnnl_version().contents
        if v.major < 3:
            tried.append(f'{path}: oneDNN {v.major}.{v.minor}, this binding speaks the v3 API')
            continue
        _STATE['lib'] = lib
        _STATE['version'] = (v.major, v.minor, v.patch)
        _STATE['path'] = path
        return
    _STATE['why'] = 'oneDNN (libdnnl.so.3) is not installed for this Python ({}): {}{}'.format(
        sys.prefix, _FIX.get(platform.machine(), _FIX['other']).format(platform.machine()),
        '; tried ' + '; '.join(tried) if tried else '')


def available():
    _load()
    return 'lib' in _STATE


def why_unavailable():
    _load()
    return _STATE.get('why')


def version():
    """(major, minor, patch, path) of the loaded library."""
    _load()
    return _STATE.get('version', ()) + (_STATE.get('path'),)


def _bind(lib, signatures):
    for name, (argtypes, restype) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype


def declare(signatures, algorithms=None):
    """Declare a layer module's C functions (name -> (argtypes, restype)) and the algorithm
    kinds it uses, at its import: every call of them goes through these types. A library
    loaded already is given them at once; one that lacks a function raises DnnlError."""
    taken = sorted(set(signatures) & set(_SIGNATURES)) + sorted(
        set(algorithms or {}) & set(ALG))
    if taken:
        raise ValueError('chainermn_torus: oneDNN declarations made twice: {}'.format(
            ', '.join(taken)))
    _SIGNATURES.update(signatures)
    ALG.update(algorithms or {})
    if 'lib' in _STATE:
        try:
            _bind(_STATE['lib'], signatures)
        except AttributeError as e:
            raise DnnlError('chainermn_torus: {} lacks {}'.format(_STATE['path'], e)) from None


def lib():
    _load()
    if 'lib' not in _STATE:
        raise DnnlError('chainermn_torus: ' + _STATE['why'])
    return _STATE['lib']


def check(status, what):
    if status != 0:
        raise DnnlError('chainermn_torus: oneDNN {} failed: {} (status {})'.format(
            what, _STATUS.get(status, 'error'), status))


def sgemm(a, b, c):
    """c = a @ b for C-ordered float32 matrices, by oneDNN's own GEMM (a benchmark's bound:
    the matrix product the convolutions' kernels are built like, on oneDNN's threads)."""
    (m, k), n = a.shape, b.shape[1]
    check(lib().dnnl_sgemm(b'N', b'N', m, n, k, 1.0, P(a.ctypes.data), k, P(b.ctypes.data), n,
                           0.0, P(c.ctypes.data), n), 'sgemm')
    return c


def _per_process(key, make):
    """The engine, the stream and the attributes, made once per process (a forked loader
    process makes its own: oneDNN's objects do not survive a fork)."""
    if _STATE.get('pid') != os.getpid():
        _STATE.pop('engine', None)
        _STATE.pop('stream', None)
        _STATE.pop('attr', None)
        _STATE['pid'] = os.getpid()
    if key not in _STATE:
        _STATE[key] = make()
    return _STATE[key]


def engine():
    def make():
        e = P()
        check(lib().dnnl_engine_create(ctypes.byref(e), 1, 0), 'engine creation')
        return e
    return _per_process('engine', make)


def stream():
    def make():
        s = P()
        check(lib().dnnl_stream_create(ctypes.byref(s), engine(), 1), 'stream creation')
        return s
    return _per_process('stream', make)


def attr():
    """The attributes every primitive here is made with: a scratchpad given by the caller
    (``dnnl_scratchpad_mode_user``). oneDNN's default gives each primitive of this build a
    scratchpad of its own (its im2col and reduction buffers), held as long as the primitive:
    3 MiB per geometry on average in the 21-size test, 200 MiB in all. Given from
    ``scratch()`` at each call, every primitive shares this thread's one buffer."""
    def make():
        a = P()
        check(lib().dnnl_primitive_attr_create(ctypes.byref(a)), 'primitive attributes')
        check(lib().dnnl_primitive_attr_set_scratchpad_mode(a, SCRATCHPAD_USER),
              'the user scratchpad mode')
        return a
    return _per_process('attr', make)


def dims(values):
    d = DIMS()
    for i, v in enumerate(values):
        d[i] = int(v)
    return d


class _Desc:
    """A memory descriptor this module made (destroyed with it)."""

    def __init__(self, handle):
        self.handle = handle

    def __del__(self):
        if 'lib' in _STATE and self.handle:
            _STATE['lib'].dnnl_memory_desc_destroy(self.handle)


def plain_md(shape, strides=None, dtype=F32):
    """A memory descriptor of a numpy array (float32 unless ``dtype``): C order, or
    ``strides`` in elements."""
    m = P()
    if strides is None:
        strides, step = [], 1
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
    check(lib().dnnl_memory_desc_create_with_strides(
        ctypes.byref(m), len(shape), dims(shape), dtype, dims(strides)), 'memory descriptor')
    return _Desc(m)


def any_md(shape, dtype=F32, tag='any'):
    """The layout the primitive chooses (``format_tag::any``), of float32 unless ``dtype``;
    or the layout ``tag`` names (``'aBcd16b'``: channels in blocks of 16)."""
    m = P()
    check(lib().dnnl_memory_desc_create_with_tag(
        ctypes.byref(m), len(shape), dims(shape), dtype, TAG[tag]), 'memory descriptor')
    return _Desc(m)


def handle_of(md):
    """The C handle of a memory descriptor: one this module made, or one oneDNN owns."""
    return md.handle if isinstance(md, _Desc) else md



def loaded():
    """Whether the library is loaded (objects freed at exit check it first)."""
    return 'lib' in _STATE


def query_md(pd, what, index=0):
    """A memory descriptor a primitive descriptor chose (owned by it)."""
    return P(lib().dnnl_primitive_desc_query_md(pd, QUERY[what], index))


def md_equal(a, b):
    return bool(lib().dnnl_memory_desc_equal(handle_of(a), handle_of(b)))


def md_size(md):
    return int(lib().dnnl_memory_desc_get_size(handle_of(md)))
