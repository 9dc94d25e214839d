"""Marks around every communication call a communicator makes, for the watchdog.

A stalled job is ranks waiting in a call for a rank that has not entered it. Steps and
evaluation batches alone cannot tell the two apart (every rank is "in step 14"), so a
communicator of the job gets its calls marked: entering and leaving each is a few plain
stores into the rank's row of the node's progress board (``runtime.watch.progress_board``), made
by ``marker.enter(name)`` and ``marker.leave()`` (``runtime.watch.watchdog``).

Two places carry the marks, so that every path is seen whatever the script calls:

* the communicator's ChainerMN API (``multi_node_mean_grad``, ``bcast_data``,
  ``allreduce_obj``, ``send_obj``, ...), wrapped on the instance: the name the watcher
  says is the call the script made;
* its ``mpi_comm``, replaced by a handle to the same MPI communicator whose collective and
  point-to-point methods are marked: a script (or ChainerMN's own helpers) calling
  ``comm.mpi_comm.bcast`` directly is seen too. Calls inside a marked call are not counted
  again (the marker keeps a depth per thread).
"""
from chainermn_torus.runtime.chainer_glue import patches
from chainermn_torus.runtime.watch import progress_board as pb
from chainermn_torus.watchers import board_layout

__all__ = ['mark_communicator', 'unmark', 'API', 'MPI_METHODS']

_WHY = 'the watchdog names the communication call a rank waits in'

# The calls marked: the one list (board_layout.CALLS), ChainerMN's API on the communicator,
# mpi4py's waiting methods on its mpi_comm by the call the watcher names.
API = board_layout.API_CALLS
MPI_METHODS = board_layout.MPI_CALLS
for _name in API + tuple(MPI_METHODS.values()):
    assert pb.call_code(_name), _name  # every name has its code on the board

_MARKED_CLASSES = {}


def _marked(method, name, marker):
    def call(*args, **kwargs):
        marker.enter(name)
        try:
            return method(*args, **kwargs)
        finally:
            marker.leave()
    call.__name__ = getattr(method, '__name__', name)
    call.__doc__ = getattr(method, '__doc__', None)
    call.__wrapped__ = method
    return call


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


def mark_communicator(communicator, marker):
    """Mark ``communicator``'s calls with ``marker`` (once; idempotent). Each change is an
    instance patch of the group ``watchdog`` (``runtime.chainer_glue.patches``): listed, and undone
    by ``unmark``."""
    if getattr(communicator, '_call_marker', None) is marker:
        return communicator
    unmark(communicator)  # another marker's: replaced, not wrapped twice
    for name in API:
        method = getattr(communicator, name, None)
        if callable(method):
            patches.apply(communicator, name, _marked(method, name, marker), 'watchdog', _WHY)
    mpi_comm = getattr(communicator, 'mpi_comm', None)
    if mpi_comm is not None:
        base = type(mpi_comm)  # a Dup of a marked handle is of the marked class
        base = base.__mro__[1] if base in _MARKED_CLASSES.values() else base
        marked = _marked_class(base)(mpi_comm)  # the same MPI communicator, a new handle
        marked._marker = marker
        patches.apply(communicator, 'mpi_comm', marked, 'watchdog', _WHY)
    patches.apply(communicator, '_call_marker', marker, 'watchdog', _WHY)
    return communicator


def unmark(communicator):
    """Undo ``mark_communicator``: its methods and ``mpi_comm`` are its own again."""
    return patches.uninstall('watchdog', owner=communicator)
