"""How a loader process is started: spawned, and without running the training script again
where its arguments do not need the script.

A spawned child imports the parent's ``__main__`` (the training script) before it unpickles
its arguments, so that a dataset class or transform defined in the script can be found.
For a dataset that needs nothing of the script (Chainer's ``TupleDataset``, a class of an
importable module) that import is waste: the script's own imports, and Chainer's start-up
check, which the package otherwise skips (docs/development.md, "Start-up"), since the
script imports Chainer before the package does. It was half of a loader's start: 0.55 ->
0.27 CPU-s on 2 cores (docs/loader.md). ``needs_script(args)`` says whether the arguments
refer to anything of ``__main__``; ``script_left_out(needed)`` hides the script from
``multiprocessing`` while one child is started.
"""
import contextlib
import io
import pickle
import sys
import types

import numpy

__all__ = ['needs_script', 'script_left_out']


class _FoundScript(Exception):
    pass


class _Walker(pickle.Pickler):
    """Pickles into nothing, to visit every object the arguments hold: ``persistent_id`` is
    asked for each one (classes and functions included) before it is written."""

    def persistent_id(self, obj):
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            module = getattr(obj, '__module__', None)
        else:
            module = type(obj).__module__
        if module == '__main__':
            raise _FoundScript()
        if isinstance(obj, numpy.ndarray) and not obj.dtype.hasobject:
            return 0  # its bytes hold nothing of the script: not copied for this walk
        return None


class _Nowhere(io.RawIOBase):
    def writable(self):
        return True

    def write(self, b):
        return len(b)


def needs_script(args):
    """Whether unpickling ``args`` in a fresh interpreter needs the training script: True
    where anything in them is defined in ``__main__``, and where they cannot be pickled
    (multiprocessing then raises its own error, as it would have)."""
    try:
        _Walker(_Nowhere(), pickle.HIGHEST_PROTOCOL).dump(args)
    except Exception:  # _FoundScript, or what pickling raises
        return True
    return False


@contextlib.contextmanager
def script_left_out(needed):
    """While a child is started: ``__main__`` without the ``__file__`` and ``__spec__`` that
    multiprocessing's spawn reads to import the script in the child, unless ``needed``.
    Put back at once; another thread of the training process reading those two names in
    these milliseconds would see them absent."""
    main = sys.modules.get('__main__')
    if needed or main is None:
        yield
        return
    names = ('__file__', '__spec__')
    saved = {k: main.__dict__[k] for k in names if k in main.__dict__}
    main.__dict__.pop('__file__', None)
    main.__spec__ = None
    try:
        yield
    finally:
        for k in names:
            main.__dict__.pop(k, None)
        main.__dict__.update(saved)
