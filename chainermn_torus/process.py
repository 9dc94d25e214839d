"""What the package holds for the whole process, in one object made at import (``STATE``).

Each field has one owner, the module named beside it, which alone changes it and through
which everything else reads it; the object gathers them so that the process's state is read
in one place (and a test's or a second job's reset is one assignment per field):

* ``patches``: the changes to Chainer's and ChainerMN's objects in force, oldest first
  (``runtime.chainer_glue.patches``);
* ``said``: the keys of the lines said once (``runtime.report``);
* ``started``: the abort hook and timeline started (``runtime.startup``);
* ``compute``: the mode ``compute.use`` applied, whether new forwards take oneDNN, the
  precision they compute in (``compute.modes``; each node records its own for its
  backward);
* ``policy``: the launch policy both factories read, frozen (``_registry``);
* ``watchdogs``, ``watch_limits``: the watchdogs attached, the launcher's limits for the next
  (``runtime.watch.watchdog``).

The other process-wide holders keep a library's or a table's state beside the code that
alone reads it (docs/development.md, "Process-wide state"). Settings are not held: each is
read from the environment where the option is needed, so a script that sets a variable
before making its communicator is heard.
"""

__all__ = ['Process', 'STATE']


class Process(object):
    __slots__ = ('patches', 'said', 'started', 'compute', 'policy', 'watchdogs',
                 'watch_limits')

    def __init__(self):
        self.patches = []
        self.said = set()
        self.started = False
        self.compute = {'applied': None, 'on': False, 'precision': 'fp32'}
        self.policy = None  # None: the default policy (which changes nothing)
        self.watchdogs = []
        self.watch_limits = {}


STATE = Process()
