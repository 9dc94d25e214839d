"""What starts with the first communicator or multi-node optimizer, not at import.

``import chainermn_torus`` only registers names with ChainerMN. The process-wide pieces
start here, once, when a job first makes one of our communicators, the multi-node optimizer,
or runs a script through ``python -m chainermn_torus.run``:

- the abort hook (``abort``): one rank's uncaught exception ends the whole MPI job, naming
  the rank, chained after any hook installed earlier;
- the timeline (``timeline``), when ``CHAINERMN_TORUS_TIMELINE`` names a prefix.

A login-node tool (``chainermn-torus jobscript``, ``plan``) therefore never starts MPI.
"""
from chainermn_torus.runtime import abort, timeline

__all__ = ['start']

_started = []


def start():
    """Start the process-wide pieces (idempotent; MPI is initialised by then)."""
    if _started:
        return
    _started.append(True)
    abort.install()  # first: a bad timeline prefix below is a refusal it says in one line
    timeline.enable_from_env()  # CHAINERMN_TORUS_TIMELINE=PREFIX
