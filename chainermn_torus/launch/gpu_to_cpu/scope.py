"""Whose code a file holds: the script's, a library's, or another's; decided once per file.

The script's code is its file, every file under its directory (the models and helpers it
imports from beside it) and every file under the directories of
``CHAINERMN_TORUS_GPU_TO_CPU_PATHS`` (``--gpu-to-cpu-paths``: helpers kept elsewhere). A
library's is Python's own, the installed packages' (pytest among them), and Chainer's,
ChainerMN's, NumPy's and this package's wherever they are installed from, also where they
sit under the script's directory. Another's is anything else.

The kind decides, at import, which modules see CUDA and CuPy as the script does
(``script_view``); nothing asks it per call. The frames are read only to name a line: the
first time a mapping is said, and in a refusal.
"""
import os
import sys
import sysconfig

import chainer
import chainermn
import numpy

import chainermn_torus

__all__ = ['Scope', 'SCRIPT', 'LIBRARY', 'OTHER']

SCRIPT, LIBRARY, OTHER = 'script', 'library', 'other'


def _library_roots():
    paths = sysconfig.get_paths()
    roots = [paths[k] for k in ('stdlib', 'platstdlib', 'purelib', 'platlib') if k in paths]
    roots += [os.path.dirname(m.__file__) for m in (chainer, chainermn, numpy, chainermn_torus)]
    return tuple(sorted({os.path.join(os.path.realpath(r), '') for r in roots}))


class Scope:
    """The classes of code for one script (``script``: its path; ``paths``: more directories
    whose files are the script's)."""

    def __init__(self, script, paths=()):
        self.script = os.path.realpath(script)
        self.root = os.path.join(os.path.dirname(self.script), '')
        self.roots = (self.root,) + tuple(os.path.join(os.path.realpath(p), '')
                                          for p in paths)
        self.libraries = _library_roots()
        self.kinds = {}  # a file name -> its kind

    def kind(self, filename):
        kind = self.kinds.get(filename)
        if kind is None:
            kind = self.kinds[filename] = self._classify(filename)
        return kind

    def _classify(self, filename):
        if filename.startswith('<'):  # <frozen importlib._bootstrap>, <string>
            return LIBRARY
        path = os.path.realpath(filename)
        if path.startswith(self.libraries):
            return LIBRARY
        return SCRIPT if path.startswith(self.roots) else OTHER

    def asker(self, depth=1):
        """(kind, frame) of the innermost frame, from ``depth`` callers up, that is not a
        library's; (LIBRARY, None) where every frame is. For naming a line only."""
        frame = sys._getframe(depth + 1)
        while frame is not None:
            kind = self.kind(frame.f_code.co_filename)
            if kind != LIBRARY:
                return kind, frame
            frame = frame.f_back
        return LIBRARY, None

    def where(self, frame, line=None):
        """``file:line`` of a frame (``line``: another than its current one, a traceback's),
        the file relative to the script's directory."""
        if frame is None:  # every frame a library's: the script's line is not on the stack
            return 'the script'
        path = os.path.realpath(frame.f_code.co_filename)
        name = path[len(self.root):] if path.startswith(self.root) else path
        return f'{name}:{frame.f_lineno if line is None else line}'
