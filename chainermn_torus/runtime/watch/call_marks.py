"""Marks around every communication call a communicator makes, for the watchdog.

A stalled job is ranks waiting in a call for a rank that has not entered it. Steps and
evaluation batches alone cannot tell the two apart (every rank is "in step 14"), so a
communicator of the job gets its calls marked: entering and leaving each is a few plain
stores into the rank's row of the node's progress board (``runtime.watch.progress_board``), made
by ``marker.enter(name)`` and ``marker.leave()`` (``runtime.watch.watchdog``).

The marks are a wrapper, ``MarkedCommunicator``, that the factories return where a watchdog
runs (``watchdog.marked``); the communicator itself is not changed. Two places of the
wrapper carry the marks, so that every path is seen whatever the script calls:

* the communicator's ChainerMN API (``multi_node_mean_grad``, ``bcast_data``,
  ``allreduce_obj``, ``send_obj``, ...): the name the watcher says is the call the script
  made;
* its ``mpi_comm``: a handle to the same MPI communicator whose collective and
  point-to-point methods are marked, so a script (or ChainerMN's own helpers) calling
  ``comm.mpi_comm.bcast`` directly is seen too. Calls inside a marked call are not counted
  again (the marker keeps a depth per thread).

Every other attribute is the communicator's, read and written through. The wrapper has no
engine (``interface.Communicator.engine``): the multi-node optimizer then calls the marked
API rather than the engine.
"""
from chainermn_torus.runtime.watch import progress_board as pb
from chainermn_torus.watchers import board_layout

__all__ = ['MarkedCommunicator', 'mark_communicator', 'unmarked', 'API', 'MPI_METHODS']

# The calls marked: the one list (board_layout.CALLS), ChainerMN's API on the communicator,
# mpi4py's waiting methods on its mpi_comm by the call the watcher names.
API = board_layout.API_CALLS
MPI_METHODS = board_layout.MPI_CALLS
for _name in API + tuple(MPI_METHODS.values()):
    assert pb.call_code(_name), _name  # every name has its code on the board

_MARKED_CLASSES = {}


def _marked_class(base):
    """A subclass of the mpi4py communicator class ``base`` whose waiting methods mark."""
    cls = _MARKED_CLASSES.get(base)
    if cls is not None:
        return cls

    def method(attr, name):
        original = getattr(base, attr)

        def call(self, *args, **kwargs):
            marker = self._marker
            if marker is None:  # a Dup or Split of a marked handle: the caller marks
                return original(self, *args, **kwargs)
            marker.enter(name)
            try:
                return original(self, *args, **kwargs)
            finally:
                marker.leave()
        call.__name__ = attr
        call.__doc__ = original.__doc__
        return call
    body = {attr: method(attr, name) for attr, name in MPI_METHODS.items()
            if hasattr(base, attr)}
    body['_marker'] = None
    cls = type('Marked' + base.__name__, (base,), body)
    _MARKED_CLASSES[base] = cls
    return cls


class MarkedCommunicator:
    """``inner``, a communicator (ours or ChainerMN's), with its communication calls marked
    by ``marker`` (the watchdog). A class per communicator class (``_wrapper_class``): the
    API methods the inner class has, and its declared capabilities."""

    engine = None  # calls go through the marked API, never straight to an engine

    def __init__(self, inner, marker):
        base = type(inner.mpi_comm)  # a Dup of a marked handle is of the marked class
        base = base.__mro__[1] if base in _MARKED_CLASSES.values() else base
        handle = _marked_class(base)(inner.mpi_comm)  # the same MPI communicator
        handle._marker = marker
        for name, value in (('_inner', inner), ('_marker', marker), ('mpi_comm', handle)):
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __setattr__(self, name, value):
        # What the wrapper has (its marked API, mpi_comm) is set on it: a script timing
        # comm.multi_node_mean_grad times the marked call. The rest is the communicator's.
        if hasattr(type(self), name):
            object.__setattr__(self, name, value)
        else:
            setattr(self._inner, name, value)

    def __repr__(self):
        return f'<{self._inner} marked for the watchdog>'


_WRAPPERS = {}


def _api_method(name):
    def call(self, *args, **kwargs):
        marker = self._marker
        marker.enter(name)
        try:
            return getattr(self._inner, name)(*args, **kwargs)
        finally:
            marker.leave()
    call.__name__ = name
    return call


def _wrapper_class(cls):
    """The MarkedCommunicator of communicator class ``cls`` (made once per class)."""
    wrapper = _WRAPPERS.get(cls)
    if wrapper is None:
        body = {name: _api_method(name) for name in API if callable(getattr(cls, name, None))}
        body['capabilities'] = getattr(cls, 'capabilities', None)  # as declared, or none
        body['__doc__'] = f'A {cls.__name__} with its calls marked (call_marks).'
        wrapper = _WRAPPERS[cls] = type('Marked' + cls.__name__, (MarkedCommunicator,), body)
    return wrapper


def mark_communicator(communicator, marker):
    """``communicator`` with its calls marked by ``marker``: a MarkedCommunicator (the same
    one where ``marker`` marks it already; another marker's wrapper is replaced)."""
    if isinstance(communicator, MarkedCommunicator):
        if communicator._marker is marker:
            return communicator
        communicator = communicator._inner
    return _wrapper_class(type(communicator))(communicator, marker)


def unmarked(communicator):
    """The communicator a MarkedCommunicator wraps (``communicator`` where it is none)."""
    while isinstance(communicator, MarkedCommunicator):
        communicator = communicator._inner
    return communicator
