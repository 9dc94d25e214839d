"""What starts with the first communicator or multi-node optimizer, not at import.

``import chainermn_torus`` only registers names with ChainerMN. The process-wide pieces
start here, once, when a job first makes one of our communicators, the multi-node optimizer,
or runs a script through ``python -m chainermn_torus.run``:

- the abort hook (``abort``): one rank's uncaught exception ends the whole MPI job, naming
  the rank, chained after any hook installed earlier;
- the timeline (``timeline``), when ``CHAINERMN_TORUS_TIMELINE`` names a prefix;
- Python's fault handler (``faulthandler``): a rank that crashes in native code (a segfault
  in a library) prints its threads' Python stacks before it dies, so the job's output says
  where, beside the rank watcher's line naming the rank and the signal.

A login-node tool (``chainermn-torus jobscript``, ``plan``) therefore never starts MPI.
"""
import faulthandler
import sys

from chainermn_torus.process import STATE
from chainermn_torus.runtime import timeline
from chainermn_torus.runtime.watch import abort

__all__ = ['start']


def start():
    """Start the process-wide pieces (idempotent; MPI is initialised by then)."""
    if STATE.started:
        return
    STATE.started = True
    abort.install()  # first: a bad timeline prefix below is a refusal it says in one line
    timeline.enable_from_env()  # CHAINERMN_TORUS_TIMELINE=PREFIX
    if not faulthandler.is_enabled():
        try:  # the process's stderr: a test harness may have put an object without a file
            faulthandler.enable(file=sys.__stderr__.fileno(), all_threads=True)
        except (AttributeError, OSError, ValueError):
            faulthandler.enable(file=2, all_threads=True)
