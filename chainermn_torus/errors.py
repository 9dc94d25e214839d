"""The project's refusals: errors whose cause is known and whose message says it all.

A bad value (from an environment variable, a launcher option or a keyword), too little room
in /dev/shm or the checkpoint directory, a checkpoint that cannot be resumed, a data file
that cannot be read: each is raised as a ``Refusal`` whose message names what was wrong,
the value, and what is allowed. Its traceback says nothing more, so an MPI job ends with
that one line, said once (``runtime.watch.abort``), not with a traceback per rank around it.
``CHAINERMN_TORUS_DEBUG=1`` shows the tracebacks too. Every other exception is a surprise
and keeps its traceback.

The classes also derive from the built-in error a caller would catch (``ConfigError`` is
a ValueError), so ``except ValueError`` keeps working.
"""

__all__ = ['Refusal', 'ConfigError', 'DataError', 'Unsupported', 'UnsafePath']


class Refusal(Exception):
    """An error of a known cause: the job ends with its message, once, without traceback."""


class ConfigError(Refusal, ValueError):
    """A value that is not allowed, from any source (variable, option, keyword, file)."""



class DataError(Refusal, ValueError):
    """A data file or data set that cannot be read as it must be (the file is named)."""


class Unsupported(Refusal, RuntimeError):
    """Something this machine, Python or MPI cannot do that the job asked for."""


class UnsafePath(Refusal, OSError):
    """A file this process would create or read is not safely its own: a link, or a file or
    directory another user owns or may write (the path and its owner are named)."""
