"""``--gpu-to-cpu``: a script written for GPUs runs on each rank's CPU, unchanged.

Every GPU device the script asks for through Chainer's and ChainerMN's API is the rank's CPU:
the arrays stay numpy, and everything this package does for a CPU script applies (oneDNN
compute, the fused update, the thread budget, the loader: a training MultiprocessIterator
becomes ``--loader ours`` unless ``--loader`` says otherwise). ChainerMN's GPU communicator
names become the launcher's communicator (``--communicator``, else ``auto``). What each call
becomes, and what is refused, is ``calls.MAPPED`` / ``calls.REFUSED``; rank 0 says each
mapping once, with the script's file and line.

Only what the script itself asks for is mapped (``scope``): Chainer's, ChainerMN's and every
library's own code still sees a CPU-only machine, so their ``cuda.available`` checks,
``get_array_module`` and cuDNN switches behave as without the option.

Without the option the launcher still watches for a script written for GPUs: its first GPU
request is refused in one line naming the option, and an error that ends such a script (its
own ``if not chainer.cuda.available: raise``, ``import cupy``) is said in one line that
names the option and the script's first GPU call (``scan``), instead of a traceback.
"""
import sys

from chainermn_torus import _registry
from chainermn_torus.errors import Refusal, Unsupported
from chainermn_torus.launch.gpu_to_cpu import cupy_on_cpu, devices, scan
from chainermn_torus.launch.gpu_to_cpu.calls import GPU_COMMUNICATORS, OPTION, Said
from chainermn_torus.launch.gpu_to_cpu.scope import SCRIPT, Scope
from chainermn_torus.runtime.chainer_glue import patches

__all__ = ['install', 'uninstall', 'explain', 'listing', 'GPU_COMMUNICATORS']

listing = scan.listing


def install(script, mapping, rank):
    """Map (``mapping``) or watch for the GPU requests of ``script``; returns the Said."""
    said = Said(Scope(script), mapping, rank)
    devices.install(said)
    _registry.set_rename(lambda name: _communicator(said, name))
    return said


def uninstall():
    """Undo ``install``: Chainer's functions and module class as they were, the communicator
    names as ChainerMN's, no ``cupy`` module for anyone."""
    patches.uninstall(group=devices.GROUP)
    _registry.set_rename(None)
    for name in ('cupy.cuda', 'cupy'):
        if isinstance(sys.modules.get(name), cupy_on_cpu.Namespace):
            del sys.modules[name]


def _communicator(said, name):
    if name not in GPU_COMMUNICATORS:
        return name
    where = said.scope.where(said.scope.asker(2)[1])  # the script's line that asked
    if not said.mapping:
        raise Unsupported(
            "{}: create_communicator({!r}) asks for ChainerMN's GPU communicator, and this "
            'node has no GPU: run the script with {} (GPU communicators become the '
            "launcher's), or give --communicator NAME".format(where, name, OPTION))
    said.names.append('chainermn.create_communicator')  # the launcher's line says it
    return 'auto'


def explain(said, error):
    """The one line for an error that ended a script written for GPUs run without the
    option; None for any other error (it keeps its traceback)."""
    if said is None or said.mapping or isinstance(error, Refusal):  # a Refusal is one line
        return None
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
    stopped = 'exit code {}'.format(error.code) if isinstance(error, SystemExit) else \
        '{}: {}'.format(type(error).__name__, str(error).rstrip('.'))
    return ('{}{}. The script is written for GPUs (its first GPU call: {} at {}:{}{}) and '
            "this node has none: run it with {} and its GPU calls run on each rank's CPU "
            '(--gpu-calls lists them)'.format(
                where + ': ' if where else '', stopped, found[0].shown, found[0].file,
                found[0].line, ', {} in all'.format(len(found)) if len(found) > 1 else '',
                OPTION))


def _script_line(scope, tb):
    where = None
    while tb is not None:
        if scope.kind(tb.tb_frame.f_code.co_filename) == SCRIPT:
            where = scope.where(tb.tb_frame, tb.tb_lineno)
        tb = tb.tb_next
    return where
