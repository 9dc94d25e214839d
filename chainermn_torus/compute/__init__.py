"""Chainer's heavy layers on oneDNN: where the systems of Hanawa & Tamura and Kuroda et al.
ran Chainer on iDeep (MKL-DNN), which no longer installs.

``use(mode)``: 'onednn' (refused, with the reason, where oneDNN does not load), 'numpy'
(Chainer's own), 'auto' (oneDNN where it loads, else numpy, said once). The setting is
``CHAINERMN_TORUS_COMPUTE`` (default auto) and the launcher's ``--compute``; the package
applies it when the job makes its first communicator, before the thread budget, so that
oneDNN's OpenMP threads are counted in it (``process_setup``; a caller of ``use`` after its
budget calls ``threads.reapply``). It changes nothing else of the process. The rooms:
``onednn/`` (the C binding and the layers computed on it, on numpy arrays), ``kernels/``
(numba's), ``functions/`` (each replaced Chainer function's forwards and rows) and
``replacements`` (the seam into Chainer).
"""
from chainermn_torus import settings_table
from chainermn_torus.compute import modes, replacements, precision as low
from chainermn_torus.compute.onednn import binding, geometries
from chainermn_torus.errors import Unsupported
from chainermn_torus.runtime import report

__all__ = ['use', 'release', 'in_force', 'precision_in_force', 'set_precision']

def in_force():
    """'onednn' or 'numpy': what ``use`` put in force (modes holds it); None before."""
    return modes.applied()


def precision_in_force():
    """'fp32' or 'bf16' (``compute.precision``)."""
    return modes.precision()


def set_precision(precision, source='precision'):
    """Compute in ``precision`` ('fp32' or 'bf16') from the next forward on, the mode in force
    kept (a benchmark's rows, a script's own choice); refused as ``use`` refuses it."""
    precision = settings_table.parse('precision', precision, source)
    low.check(precision, in_force() or 'auto', source)
    modes.set_precision(precision)


def use(mode='auto', source='compute', rank=None, precision=None,
        precision_source='precision', cache_bound=None):
    """Put Chainer's heavy layers on oneDNN or numpy for this process, computing in
    ``precision`` ('fp32' or 'bf16'; None: ``CHAINERMN_TORUS_PRECISION``, else fp32);
    returns the mode in force ('onednn' or 'numpy'). Rank 0 says which, once per change.
    bf16 is refused without oneDNN or on a CPU without bfloat16 instructions. The settings'
    values are handed in (``process_setup``): ``precision`` None is fp32, ``cache_bound``
    the oneDNN geometries kept (None: the table's default)."""
    mode = settings_table.parse('compute', mode, source)
    if precision is None:
        precision, precision_source = 'fp32', 'precision (default)'
    precision = settings_table.parse('precision', precision, precision_source)
    if precision == 'bf16' and mode == 'auto' and not binding.available():
        raise Unsupported(f'chainermn_torus: {precision_source}=bf16 needs oneDNN, '
                          f'and {binding.why_unavailable()}')
    low.check(precision, mode, precision_source)
    if cache_bound is not None:
        geometries.set_bound(cache_bound)
    before = modes.applied(), modes.precision()
    modes.set_precision(precision)
    if mode == 'numpy' or (mode == 'auto' and not binding.available()):
        replacements.disable()
        chosen = 'numpy'
        why = (f'{source}={mode}' if mode == 'numpy' else
               'auto, and ' + binding.why_unavailable())
        text = f'compute: Chainer\'s numpy ({why})'
    else:
        # Raises, naming the fix, where oneDNN does not load. Its OpenMP runtime is then
        # loaded: the thread budget, applied after (process_setup), counts it.
        replacements.enable()
        chosen = 'onednn'
        major, minor, patch, path = binding.version()
        text = (f'compute: oneDNN {major}.{minor}.{patch} ({path}) for '
                f'{replacements.REPLACED}; the other layers on Chainer\'s numpy')
        if precision == 'bf16':
            text += f'; bfloat16 ({low.cpu_bf16()[1]}): {replacements.LOW_PRECISION}'
    modes.set_applied(chosen)
    if before != (chosen, precision):  # said once per change
        report.say(text, rank)
    return chosen


def release():
    """Undo ``use``: Chainer's classes exactly as they were, float32, no mode applied."""
    replacements.uninstall()
    modes.set_precision('fp32')
    modes.set_applied(None)

