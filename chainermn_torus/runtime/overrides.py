"""The one seam through which a launcher changes what a script's factory calls return:
``create_communicator`` (``_registry``) and ``create_multi_node_optimizer``
(``optimizers.factory``) both read the ``Overrides`` in force, and ``install`` puts a
launcher's in place (``launch.optimizer.LauncherOverrides``, a subclass). This default
changes nothing. It sits low so that both factories read it and nothing here knows them.

Communicators: ``force_communicator``, ``set_defaults``, ``add_default``,
``add_forced_option``, ``set_rename`` and ``on_create`` (``_registry``'s, a script's
public calls too) change the fields of the one in force. Optimizers: a subclass answers
``optimizer_options``, ``optimizer_made`` and ``first_update``."""

__all__ = ['Overrides', 'install', 'current']


class Overrides(object):
    """What a launcher wants of every communicator and multi-node optimizer a script makes."""

    def __init__(self):
        self.forced = None         # (name, kwargs) or None
        self.defaults = {}         # options for ours where the caller gives none
        self.forced_options = {}   # options every communicator of ours gets
        self.callbacks = []        # (comm, name asked, name made), the launcher's report
        self.rename = None         # name -> the name to make, where none is forced

    # The communicator factory's questions
    def choose(self, name, kwargs, ours):
        """(the name to make, its options) for a call asking for ``name``; ``ours``: the
        names of this package's communicators (forced options reach those only)."""
        if self.forced is not None:
            name, forced_kwargs = self.forced
            kwargs = dict(kwargs, **forced_kwargs)
        elif self.rename is not None:
            name = self.rename(name)
        if self.forced_options and name in ours:
            kwargs = dict(kwargs, **self.forced_options)
        return name, kwargs

    def with_defaults(self, takes, kwargs):
        """``kwargs`` with the defaults the class takes (``takes``: its option names)."""
        if not self.defaults:
            return kwargs
        return dict({k: v for k, v in self.defaults.items() if k in takes}, **kwargs)

    def made(self, comm, asked, made):
        for callback in self.callbacks:
            callback(comm, asked, made)

    # The multi-node optimizer factory's questions
    def optimizer_options(self, actual_optimizer, options):
        """The options to make it with, from the script's ``options`` (a dict that holds
        ``double_buffering`` and ``fused`` too)."""
        return options

    def optimizer_made(self, name, communicator, options, fused_applied):
        """Called after each is made: ``name`` is the class the script passed."""

    def first_update(self):
        """Called at each one's first update."""


_IN_FORCE = [Overrides()]  # the one in force: a launcher runs its script in this process


def current():
    return _IN_FORCE[0]


def install(overrides=None):
    """Put ``overrides`` in force (None: the default), keeping the communicator changes made
    before it (``force_communicator`` from the command line); returns it."""
    overrides = overrides if overrides is not None else Overrides()
    before = _IN_FORCE[0]
    for field in ('forced', 'defaults', 'forced_options', 'callbacks', 'rename'):
        setattr(overrides, field, getattr(before, field))
    _IN_FORCE[0] = overrides
    return overrides
