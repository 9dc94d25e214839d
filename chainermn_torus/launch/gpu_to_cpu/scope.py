"""Whose code a frame runs: the script's, a library's, or another's.

The script's code is its file and every file under its directory (the models and helpers
it imports from beside it). A library's is Python's own, the installed packages' (pytest
among them), and Chainer's, ChainerMN's, NumPy's and this package's wherever they are
installed from. Another's is anything else: a test file of a Chainer checkout run under
pytest, code in some other directory.

A GPU device *request* (a device number, ``'@cupy:0'``, ``to_gpu``) belongs to the innermost
frame that is not a library's: the script's line that made the updater which then asked
for the device. A *read* of state (``cuda.available``) belongs to the frame that reads it:
Chainer reading ``cuda.available`` in its own functions is Chainer's read, even while the
script's line is further up the stack.
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


class Scope(object):
    """The classes of code for one script (``script``: its path)."""

    def __init__(self, script):
        self.script = os.path.realpath(script)
        self.root = os.path.join(os.path.dirname(self.script), '')
        self.libraries = _library_roots()
        self.kinds = {}  # a code object's file name -> its kind: read on every request

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
        return SCRIPT if path.startswith(self.root) else OTHER

    def asker(self, depth=1):
        """(kind, frame) of the innermost frame, from ``depth`` callers up, that is not a
        library's; (LIBRARY, None) where every frame is."""
        frame = sys._getframe(depth + 1)
        while frame is not None:
            kind = self.kind(frame.f_code.co_filename)
            if kind != LIBRARY:
                return kind, frame
            frame = frame.f_back
        return LIBRARY, None

    def reader(self, depth=1):
        """The frame ``depth`` callers up, where it is the script's; else None."""
        frame = sys._getframe(depth + 1)
        return frame if self.kind(frame.f_code.co_filename) == SCRIPT else None

    def where(self, frame, line=None):
        """``file:line`` of a frame (``line``: another than its current one, a traceback's),
        the file relative to the script's directory."""
        if frame is None:  # every frame a library's: the script's line is not on the stack
            return 'the script'
        path = os.path.realpath(frame.f_code.co_filename)
        name = path[len(self.root):] if path.startswith(self.root) else path
        return '{}:{}'.format(name, frame.f_lineno if line is None else line)
