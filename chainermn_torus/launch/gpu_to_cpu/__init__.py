"""``--gpu-to-cpu``: a script written for GPUs runs on each rank's CPU, unchanged.

Every GPU device the script asks for through Chainer's and ChainerMN's API is the rank's CPU:
the arrays stay numpy, and everything this package does for a CPU script applies (oneDNN
compute, the fused update, the thread budget, the loader: a training MultiprocessIterator
becomes ``--loader ours`` unless ``--loader`` says otherwise). ChainerMN's GPU communicator
names become the launcher's communicator (``--communicator``, else ``auto``). What each call
becomes, and what is refused, is ``calls.MAPPED`` / ``calls.REFUSED``; rank 0 says each
mapping once, with the script's file and line.

A GPU device request is the CPU wherever it is made (``devices``): the node has none, so
there is nothing to tell apart. What the script reads of CUDA and CuPy (``cuda.available``,
``import cupy``) is bound into the script's own modules when they are imported
(``script_view``): Chainer's, ChainerMN's and every library's code still sees a CPU-only
machine, so their ``cuda.available`` checks, ``get_array_module``, cuDNN switches and
``import cupy`` behave as without the option. Helpers kept outside the script's directory
are the script's where ``CHAINERMN_TORUS_GPU_TO_CPU_PATHS`` names their directory.

Without the option the launcher still watches for a script written for GPUs: its first GPU
request is refused in one line naming the option, and an error that ends such a script (its
own ``if not chainer.cuda.available: raise``, ``import cupy``) is said in one line that
names the option and the script's first GPU call (``scan``), instead of a traceback.
"""
import os

from chainermn_torus.errors import ConfigError, Refusal, Unsupported, UnsafePath
from chainermn_torus.launch.gpu_to_cpu import devices, scan, script_view
from chainermn_torus.launch.gpu_to_cpu.calls import GPU_COMMUNICATORS, OPTION, Said
from chainermn_torus.launch.gpu_to_cpu.scope import LIBRARY, OTHER, SCRIPT, Scope
from chainermn_torus.runtime.chainer_glue import patches
from chainermn_torus.runtime.files import held

__all__ = ['install', 'uninstall', 'explain', 'listing', 'globals_for_script',
           'GPU_COMMUNICATORS', 'paths']

listing = scan.listing
globals_for_script = script_view.globals_for_script


def paths(text, source='CHAINERMN_TORUS_GPU_TO_CPU_PATHS', trusted=False):
    """The directories of ``CHAINERMN_TORUS_GPU_TO_CPU_PATHS`` (``--gpu-to-cpu-paths``),
    each walked and judged as every shared directory is (``runtime.files.held``): one
    another user owns or may write, on the way or itself, is refused in one line unless
    ``trusted`` (``--trust-gpu-to-cpu-paths``); a ConfigError naming ``source`` for one
    that is not a directory."""
    found = tuple(p for p in (text or '').split(':') if p)
    for path in found:
        if not os.path.isdir(path):
            raise ConfigError(f'chainermn_torus: {source} must be directories separated by ":", '
                              'and '
                              f'{path!r} is not one')
        try:
            held.walk(path, f'the directory of {source}', trusted=trusted,
                      fix='Keep the helpers in a directory only you can write, or say '
                          'you trust it with --trust-gpu-to-cpu-paths '
                          '(CHAINERMN_TORUS_TRUST_GPU_TO_CPU_PATHS=1).').close()
        except UnsafePath:
            raise
        except OSError as e:
            raise ConfigError(f'chainermn_torus: {source} names {path!r}, which cannot be entered '
                              f'({e.strerror or e})') from None
    return found


def install(script, mapping, rank, extra=None, source=None, trusted=False):
    """Map (``mapping``) or watch for the GPU requests of ``script``; ``extra``: the
    setting's text of more directories of the script's modules (``source``: the option or
    variable that gave it; ``trusted``: they may be another user's). Returns the Said; under
    the option its ``builtins`` are what the script's modules run with
    (``globals_for_script``)."""
    scope = Scope(script, paths(extra, source or 'CHAINERMN_TORUS_GPU_TO_CPU_PATHS', trusted))
    said = Said(scope, mapping, rank)
    devices.install(said)
    said.builtins = script_view.install(said) if mapping else None
    said.rename = lambda name: _communicator(said, name)  # the launch policy's rename
    return said


def uninstall():
    """Undo ``install``: Chainer's functions and the import path as they were."""
    patches.uninstall(group=devices.GROUP)


def _communicator(said, name):
    if name not in GPU_COMMUNICATORS:
        return name
    where = said.scope.where(said.scope.asker(1)[1])  # the line that asked
    if not said.mapping:
        raise Unsupported(
            f"{where}: create_communicator({name!r}) asks for ChainerMN's GPU communicator, and "
            "this "
            f'node has no GPU: run the script with {OPTION} (GPU communicators become the '
            "launcher's), or give --communicator NAME")
    said.names.append('chainermn.create_communicator')  # the launcher's line says it
    return 'auto'


def explain(said, error):
    """The one line for an error that ended a script written for GPUs run without the
    option, or a helper outside the script's directories importing cupy under it; None for
    any other error (it keeps its traceback)."""
    if said is None or isinstance(error, Refusal):  # a Refusal is one line
        return None
    if said.mapping:
        return _outside(said, error)
    if isinstance(error, SystemExit) and error.code in (0, None):
        return None
    missing = getattr(error, 'name', None) or ''
    if not (isinstance(error, ModuleNotFoundError) and missing.split('.')[0] in (
            'cupy', 'cupyx')) and not isinstance(error, (RuntimeError, SystemExit)):
        return None
    found = [f for f in scan.gpu_calls(said.scope.script) if f.certain]
    if not found:
        return None
    where = _script_line(said.scope, error.__traceback__)
    stopped = f'exit code {error.code}' if isinstance(error, SystemExit) else \
        '{}: {}'.format(type(error).__name__, str(error).rstrip('.'))
    return ('{}{}. The script is written for GPUs (its first GPU call: {} at {}:{}{}) and '
            "this node has none: run it with {} and its GPU calls run on each rank's CPU "
            '(--gpu-calls lists them)'.format(
                where + ': ' if where else '', stopped, found[0].shown, found[0].file,
                found[0].line, f', {len(found)} in all' if len(found) > 1 else '',
                OPTION))


def _outside(said, error):
    missing = getattr(error, 'name', None) or ''
    if not isinstance(error, ModuleNotFoundError) or missing.split('.')[0] != 'cupy':
        return None
    tb, frame, kind = error.__traceback__, None, None
    while tb is not None:  # the innermost frame that is not a library's made the import
        here = said.scope.kind(tb.tb_frame.f_code.co_filename)
        if here != LIBRARY:
            kind, frame = here, (tb.tb_frame, tb.tb_lineno)
        tb = tb.tb_next
    if kind != OTHER:  # a library's import: its own error, as on any CPU node
        return None
    return (f"{said.scope.where(*frame)}: import cupy in a module outside the script's "
            f"directory: {OPTION} gives CuPy's "
            "name (numpy) to the script's own modules only; add that module's directory to "
            'CHAINERMN_TORUS_GPU_TO_CPU_PATHS (--gpu-to-cpu-paths DIR[:DIR])')


def _script_line(scope, tb):
    where = None
    while tb is not None:
        if scope.kind(tb.tb_frame.f_code.co_filename) == SCRIPT:
            where = scope.where(tb.tb_frame, tb.tb_lineno)
        tb = tb.tb_next
    return where
