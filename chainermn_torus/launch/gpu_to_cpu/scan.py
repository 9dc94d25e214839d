"""The GPU calls a script makes, read from its source without running it: the script and the
modules it imports from its own directory and from the directories of
``CHAINERMN_TORUS_GPU_TO_CPU_PATHS``. ``python -m chainermn_torus.run --gpu-calls
SCRIPT`` prints them with what each becomes under ``--gpu-to-cpu`` (calls.MAPPED) or why it
is refused (calls.REFUSED); the launcher names the first one when a script written for GPUs
stops without the option. A reading of the text: a device held in a variable is listed
where it is passed (``device=``), whatever its value turns out to be."""
import ast
import collections
import os

import numpy

from chainermn_torus import settings_table
from chainermn_torus.errors import UnsafePath
from chainermn_torus.launch.gpu_to_cpu.calls import (GPU_COMMUNICATORS, MAPPED,
                                                     MULTI_GPU_UPDATERS, REFUSED)
from chainermn_torus.launch.gpu_to_cpu.cupy_on_cpu import GIVEN
from chainermn_torus.launch.gpu_to_cpu.devices import is_gpu_spec
from chainermn_torus.runtime.files import shared_paths

__all__ = ['gpu_calls', 'listing', 'Found']

# certain: a GPU call by itself; else a device held in a variable, a GPU if its value is one
Found = collections.namedtuple('Found', 'file line name shown refused certain')

# The names of Chainer's cuda module the tables speak of (available, to_gpu, raw, ...)
_CUDA = tuple(n[len('chainer.cuda.'):] for n in list(MAPPED) + list(REFUSED)
              if n.startswith('chainer.cuda.'))


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return '.'.join(reversed(parts))
    return None


def _classify_attribute(dotted):
    """(name in calls' tables, refused) for a dotted name, or None."""
    parts = dotted.split('.')
    if 'cupy' in parts:
        rest = parts[parts.index('cupy') + 1:]
        if not rest:
            return 'chainer.cuda.cupy', False
        if rest[0] == 'cuda':
            if rest[1:2] == ['nccl']:
                return 'cupy.cuda.nccl', True
            return (None, False) if rest[1:] in ([], ['Device']) else ('cupy.*', True)
        if 'cupy.' + rest[0] in REFUSED:
            return 'cupy.' + rest[0], True
        if rest[0] in GIVEN or hasattr(numpy, rest[0]):
            return 'chainer.cuda.cupy', False
        return 'cupy.*', True
    if len(parts) >= 2 and parts[-2] == 'cuda' and parts[-1] in _CUDA:
        name = 'chainer.cuda.' + parts[-1]
        return name, name in REFUSED
    if len(parts) >= 2 and parts[-2] == 'nccl':
        return 'chainermn.nccl', True
    if parts[-1] == 'to_gpu':
        return 'Link.to_gpu', False
    return None


def _constant(node):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and \
            isinstance(node.operand, ast.Constant):
        return -node.operand.value
    return ast  # not a constant


class _Reader(ast.NodeVisitor):
    def __init__(self, path, label):
        self.path, self.label, self.found, self.imports = path, label, [], []

    def add(self, node, name, shown, refused=False, certain=True):
        self.found.append(Found(self.label, node.lineno, name, shown, refused, certain))

    def visit_Import(self, node):
        for alias in node.names:
            self._module(node, alias.name)

    def visit_ImportFrom(self, node):
        if node.level == 0 and node.module:
            self._module(node, '.'.join([node.module] + [
                a.name for a in node.names if node.module == 'cupy.cuda' and a.name == 'nccl']))
            if node.module == 'chainermn' and any(a.name == 'nccl' for a in node.names):
                self.add(node, 'chainermn.nccl', 'from chainermn import nccl', True)
        elif node.level == 1:
            self.imports.extend(a.name for a in node.names)

    def _module(self, node, module):
        top = module.split('.')[0]
        if top in ('cupy', 'cupyx'):
            nccl = module.startswith('cupy.cuda.nccl')
            self.add(node, 'cupy.cuda.nccl' if nccl else 'import cupy',
                     'import ' + module, nccl)
        else:
            self.imports.append(top)

    def visit_Attribute(self, node):
        dotted = _dotted(node)
        if dotted is not None:
            kind = _classify_attribute(dotted)
            if kind is not None and kind[0] is not None:
                self.add(node, kind[0], dotted, kind[1])
                return  # its inner attributes are the same use
        self.generic_visit(node)

    def visit_Call(self, node):
        func = _dotted(node.func) or ''
        last = func.rsplit('.', 1)[-1]
        if last in MULTI_GPU_UPDATERS and self._several_gpus(last, node):
            self.add(node, 'chainer.training.updaters.' + last, func + '(...)', True)
        if last in ('get_device', 'using_device', 'to_device') and node.args and \
                not func.endswith('cuda.get_device'):
            self._device(node, f'{func}({ast.unparse(node.args[0])})', node.args[0])
        for keyword in node.keywords:
            if keyword.arg == 'device':
                self._device(node, '{}(device={})'.format(
                    func or 'a call', ast.unparse(keyword.value)), keyword.value)
        self.generic_visit(node)

    @staticmethod
    def _several_gpus(kind, node):
        """MultiprocessParallelUpdater always (NCCL); ParallelUpdater where its ``devices``
        names a GPU as a constant (CPU devices are Chainer's own use, refused by nothing)."""
        if kind != 'ParallelUpdater':
            return True
        devices = next((k.value for k in node.keywords if k.arg == 'devices'),
                       node.args[4] if len(node.args) > 4 else None)
        values = devices.values if isinstance(devices, ast.Dict) else []
        return any(_constant(v) is not ast and is_gpu_spec(_constant(v)) for v in values)

    def _device(self, node, shown, value):
        constant = _constant(value)
        if constant is ast:  # a variable: a GPU only if its value is one
            self.add(node, 'chainer.get_device', shown, certain=False)
        elif not isinstance(constant, str) and is_gpu_spec(constant):
            self.add(node, 'chainer.get_device', shown)  # a number; strings: visit_Constant

    def visit_Constant(self, node):
        if isinstance(node.value, str) and node.value in GPU_COMMUNICATORS:
            self.add(node, 'chainermn.create_communicator',
                     f'{node.value!r} (a GPU communicator name)')
        elif isinstance(node.value, str) and node.value.startswith(('@cupy:', 'cuda:')):
            self.add(node, 'chainer.get_device', repr(node.value))


def _source(path, notes):
    """The text of the module ``path``, or None (said in ``notes``) where it is not a regular
    file of at most ``settings_table.BOUNDS['module']`` bytes: a link, a FIFO or a 2 GiB sparse
    ``json.py`` planted in a shared directory is passed over, never read (its directory was
    judged: ``paths``). A FIFO is opened without waiting."""
    try:
        return shared_paths.read_bytes(path, 'the module', settings_table.BOUNDS['module'],
                                       trusted=True, fix='Its GPU calls are not listed.')
    except UnsafePath as e:
        notes.append('passed over ' + str(e).replace('chainermn_torus: refusing the module ',
                                                     '', 1))
    except OSError as e:
        notes.append(f'passed over {path}: unreadable ({e.strerror or e})')
    return None


def gpu_calls(script, paths=(), notes=None):
    """Every GPU call found in ``script`` and the modules it imports from its directory and
    from ``paths``, in file and line order (the script first). ``notes``: a list for what
    was passed over (a module that is not a regular file of bounded size, or not Python)."""
    notes = [] if notes is None else notes
    root = os.path.dirname(os.path.realpath(script))
    roots = [root] + [os.path.abspath(p) for p in paths]
    todo, seen, found = [os.path.realpath(script)], set(), []
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.add(path)
        text = _source(path, notes)
        if text is None:
            continue
        try:
            tree = ast.parse(text, path)
        except (SyntaxError, ValueError) as e:
            notes.append('passed over {}: not Python this interpreter reads ({})'.format(
                path, getattr(e, 'msg', e)))
            continue
        label = os.path.relpath(path, root) if path.startswith(os.path.join(root, '')) \
            else path
        reader = _Reader(path, label)
        reader.visit(tree)
        found.extend(sorted(set(reader.found), key=lambda f: f.line))
        for module in reader.imports:
            for folder in roots:
                for candidate in (os.path.join(folder, module + '.py'),
                                  os.path.join(folder, module, '__init__.py')):
                    if os.path.islink(candidate) and \
                            os.lstat(candidate).st_uid == os.getuid():
                        candidate = os.path.realpath(candidate)  # the user's own link
                    if os.path.lexists(candidate):
                        todo.append(candidate)
    return found


def listing(script, paths=()):
    """The lines ``--gpu-calls`` prints (what was passed over last)."""
    notes = []
    found = gpu_calls(script, paths, notes)
    certain = sum(f.certain for f in found)
    if not found:
        return [f'{script}: no GPU call found: it runs on CPU without --gpu-to-cpu'] + \
            notes
    lines = ['{}: {} GPU call(s){}; under --gpu-to-cpu:'.format(
        script, certain, '' if certain == len(found) else
        f', and {len(found) - certain} device(s) in variables')]
    for f in found:
        becomes = ('REFUSED: ' + REFUSED[f.name]) if f.refused else '-> ' + MAPPED[f.name]
        if not f.certain:
            becomes = '(where its value names a GPU) ' + becomes
        lines.append(f'  {f.file}:{f.line}  {f.shown}  {becomes}')
    refused = sum(f.refused for f in found)
    if refused:
        lines.append(f'{refused} of them cannot run on CPU: the job stops with that line where it '
                     'reaches one (a branch it does not take costs nothing)')
    return lines + notes
