"""Whether a Chainer function runs on oneDNN: the mode and precision in force, the mode and
precision each node's forward ran in (its backward runs in those), and the hand-back to Chainer's
own code (where the arrays are not float32 in the standard layout, or oneDNN refuses the call),
said once per case. ``onednn``'s replacements call these first.
"""
import threading

import numpy

from chainermn_torus.process import STATE
from chainermn_torus.runtime import report
from chainermn_torus.runtime.cpu import finite as _finite_counts

__all__ = ['enabled', 'set_on', 'on', 'precision', 'set_precision', 'applied', 'set_applied',
           'start',
           'in_mode_of_forward', 'standard', 'not_taken', 'finite', 'refused']

# Whether a forward started now takes oneDNN (``enable``/``disable``) and in which precision,
# and, while a node's backward runs, the mode and precision its forward ran in: the
# functions that backward applies (the gradient's nodes, which read what the forward left:
# oneDNN's workspaces, its bfloat16 copies) run in those, whatever was switched since. Per
# thread: a backward in progress is its thread's. What is in force is the process's
# (``STATE.compute``: the mode applied, on/off, the precision).
_BACKWARD = threading.local()
_STARTED = '_chainermn_torus_onednn'  # on each node: (oneDNN or not, precision) of its forward


def enabled():
    return STATE.compute['on']


def set_on(flag):
    STATE.compute['on'] = bool(flag)


def precision():
    """'fp32' or 'bf16': what the convolutions and linear layers compute in now (in a
    backward: what its forward computed in)."""
    recorded = getattr(_BACKWARD, 'precision', None)
    return STATE.compute['precision'] if recorded is None else recorded


def set_precision(name):
    STATE.compute['precision'] = name


def applied():
    return STATE.compute['applied']


def set_applied(name):
    STATE.compute['applied'] = name


def on():
    mode = getattr(_BACKWARD, 'on', None)
    return STATE.compute['on'] if mode is None else mode


def start(node):
    """Record the mode and precision ``node``'s forward runs in; True where the mode is
    oneDNN's."""
    mode = on()
    node.__dict__[_STARTED] = (mode, precision())
    return mode


def in_mode_of_forward(original):
    def backward(self, *args, **kwargs):
        recorded = self.__dict__.get(_STARTED)
        if recorded is None:
            return original(self, *args, **kwargs)
        outer = getattr(_BACKWARD, 'on', None), getattr(_BACKWARD, 'precision', None)
        _BACKWARD.on, _BACKWARD.precision = recorded
        try:
            return original(self, *args, **kwargs)
        finally:
            _BACKWARD.on, _BACKWARD.precision = outer
    return backward


def standard(fn, inputs):
    """float32 arrays of the standard layout: what the oneDNN path takes."""
    layouts = getattr(fn, 'input_layouts', None)
    if layouts is not None and any(layout is not None for layout in layouts):
        return not_taken('a memory layout other than the standard one')
    if any(a is not None and a.dtype != numpy.float32 for a in inputs):
        return not_taken('{} arrays (oneDNN is used for float32)'.format(
            '/'.join(sorted({a.dtype.name for a in inputs if a is not None}))))
    return True


def not_taken(why):
    report.say(f'compute: oneDNN not used for {why}: Chainer\'s numpy instead',
               key='onednn-not-taken ' + why)
    return False


def finite(array):
    return _finite_counts.count_nonfinite(array) == 0


def refused(what, error):
    """oneDNN refused a call the checks let through: Chainer's code computes it (and
    raises Chainer's error where Chainer refuses it too)."""
    not_taken('a {} oneDNN refused ({})'.format(what, str(error).replace(
        'chainermn_torus: ', '')))


def numpy_reports():
    """Whether numpy says a floating-point error here (``numpy.errstate`` / ``seterr`` other
    than 'ignore' for invalid operations, overflow or division by zero: by default it warns).
    numba's kernels and oneDNN set no numpy flag, so where one of them gives a result that is
    not finite, the replacement has Chainer's numpy compute it again: numpy then warns or
    raises as the user asked (a warning filter that makes it an error included), with the
    same values."""
    err = numpy.geterr()
    return err['invalid'] != 'ignore' or err['over'] != 'ignore' or err['divide'] != 'ignore'
