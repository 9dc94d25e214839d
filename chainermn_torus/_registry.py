"""Registration with ChainerMN: one factory that knows our names and all of ChainerMN's.

``register()`` replaces ``chainermn.create_communicator`` (and the same name in
``chainermn.communicators``) by ``create_communicator`` below, so a script that calls
``chainermn.create_communicator('rsap')`` gets ours and every ChainerMN name still works.
What a launcher wants of every communicator and multi-node optimizer a script makes is one
``Policy``, made once from the launcher's options and frozen; both factories here read the one
installed (``install``). ``force_communicator`` makes every call return one communicator
whatever name the script asked for (a new policy with that name forced): that is how
``python -m chainermn_torus.run --communicator rsap`` runs a script that hard-codes ``naive``.

For our names the factory ends as ChainerMN's does: the communicator gets
``set_config('batched_copy', batched_copy)`` (default True), and the options ChainerMN's
factory takes (``allreduce_grad_dtype``, ``batched_copy``) are accepted. ``batched_copy``
only selects a GPU packing path in ChainerMN; ours have one CPU path, so an explicit value is
recorded in the configuration, said once on rank 0, and otherwise ignored.
"""
import inspect
import os
import types
from typing import Any, Callable, Iterable, Mapping, Optional, Tuple

import chainermn
import chainermn.communicators

from chainermn_torus import command_line, communicators, process_setup
from chainermn_torus.algorithms import variants
from chainermn_torus.errors import ConfigError
from chainermn_torus.process import STATE
from chainermn_torus.runtime import report
from chainermn_torus.runtime.chainer_glue import patches
from chainermn_torus.runtime.watch import watchdog

__all__ = ['create_communicator', 'create_multi_node_optimizer', 'register',
           'force_communicator', 'valid_names', 'names', 'communicator_class',
           'CHAINERMN_NAMES', 'OptionError', 'takes_option', 'Policy', 'install', 'policy']

# auto chooses among the communicators with the planner and the simulator, so it sits above
# them; it is registered through the call a plugin uses (``algorithms.variants.register``),
# with no variant of its own: it runs theirs.
if 'auto' not in variants.COMMUNICATORS:  # once, also where this module is loaded again
    variants.register(
        'auto', 'chainermn_torus.auto', 'AutoCommunicator',
        'the algorithm and grid the planner predicts fastest for the model\'s size; with '
        'tune=\'on\' measured on the job\'s first gradient calls and remembered; when you do '
        'not want to choose', grid=False)

# The names chainermn.create_communicator understands in Chainer 7.8.1.
CHAINERMN_NAMES = ('naive', 'flat', 'non_cuda_aware', 'pure_nccl', 'dummy')

_chainermn_factory = chainermn.communicators.create_communicator


class OptionError(ConfigError, TypeError):
    """An option the communicator does not take.

    A TypeError as ChainerMN's factory raises for an unknown keyword, and a ValueError as
    every other bad option of ours is, so either ``except`` catches it.
    """


def names() -> tuple:
    """Our communicators' names (their registrations, ``algorithms.variants``)."""
    return communicators.names()


def valid_names() -> tuple:
    return names() + CHAINERMN_NAMES


command_line.set_communicator_names(valid_names)  # for --communicator on every command line


def communicator_class(name: str) -> type:
    """The class of our communicator ``name`` (its module, and MPI, load on first use)."""
    return communicators.communicator_class(name)


class Policy:
    """What a launcher wants of every communicator and multi-node optimizer a script makes,
    made once and frozen (``replace`` gives another). The default changes nothing.

    * ``forced``: (name, options) every ``create_communicator`` call makes, or None;
    * ``defaults``: options for ours where the call gives none (those its class takes);
    * ``forced_options``: options every communicator of ours gets;
    * ``rename(name)``: the name to make where none is forced (``--gpu-to-cpu``), or None;
    * ``on_made(comm, asked, made)``: told after each communicator;
    * ``optimizer_options(actual_optimizer, options)``: the options a multi-node optimizer is
      made with, from the script's (a dict holding ``double_buffering`` and ``fused`` too);
    * ``optimizer_made(name, communicator, options, fused_applied)``: told after each, with
      the class name the script passed;
    * ``first_update()``: called at each one's first update.
    """

    FIELDS = ('forced', 'defaults', 'forced_options', 'rename', 'on_made', 'optimizer_options',
              'optimizer_made', 'first_update')
    forced: Optional[Tuple[str, Mapping[str, Any]]]
    defaults: Mapping[str, Any]
    forced_options: Mapping[str, Any]
    rename: Optional[Callable[[str], str]]
    on_made: Optional[Callable[..., None]]
    optimizer_options: Optional[Callable[..., dict]]
    optimizer_made: Optional[Callable[..., None]]
    first_update: Optional[Callable[[], None]]

    def __init__(self, forced: Optional[Tuple[str, Mapping[str, Any]]] = None,
                 defaults: Optional[Mapping[str, Any]] = None,
                 forced_options: Optional[Mapping[str, Any]] = None,
                 rename: Optional[Callable[[str], str]] = None,
                 on_made: Optional[Callable[..., None]] = None,
                 optimizer_options: Optional[Callable[..., dict]] = None,
                 optimizer_made: Optional[Callable[..., None]] = None,
                 first_update: Optional[Callable[[], None]] = None) -> None:
        values = dict(forced=forced, rename=rename, on_made=on_made,
                      optimizer_options=optimizer_options, optimizer_made=optimizer_made,
                      first_update=first_update,
                      defaults=types.MappingProxyType(
                          {k: v for k, v in (defaults or {}).items() if v is not None}),
                      forced_options=types.MappingProxyType(dict(forced_options or {})))
        for name in self.FIELDS:
            object.__setattr__(self, name, values[name])

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f'a Policy is frozen: make another with replace({name}=...)')

    def replace(self, **changes: Any) -> 'Policy':
        return Policy(**dict({name: getattr(self, name) for name in self.FIELDS}, **changes))

    # The communicator factory's questions
    def choose(self, name: str, kwargs: dict,
               ours: Iterable[str]) -> Tuple[str, dict]:
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

    def with_defaults(self, takes: Iterable[str], kwargs: dict) -> dict:
        """``kwargs`` with the defaults the class takes (``takes``: its option names)."""
        return dict({k: v for k, v in self.defaults.items() if k in takes}, **kwargs)


_DEFAULT = Policy()


def policy() -> Policy:
    """The policy in force (the process's: a launcher runs its script in this process)."""
    return STATE.policy if STATE.policy is not None else _DEFAULT


def install(new: Optional[Policy] = None) -> Policy:
    """Put ``new`` in force (None: the default, which changes nothing); returns it."""
    STATE.policy = new
    return policy()


def force_communicator(name: Optional[str], **kwargs: Any) -> None:
    """From now on every create_communicator call returns ``name`` with ``kwargs`` (the
    policy in force, with that name forced). ``force_communicator(None)`` undoes it.
    """
    if name is not None:
        _check_name(name)
    install(policy().replace(forced=None if name is None else (name, kwargs)))


def _check_name(name: str) -> None:
    if name not in valid_names():
        raise ConfigError('chainermn_torus: unknown communicator {!r}; valid names: {}'.format(
            name, ', '.join(valid_names())))


def create_communicator(communicator_name: str = 'pure_nccl', mpi_comm: Any = None,
                        **kwargs: Any) -> Any:
    """Create a communicator by name: ours or any of ChainerMN's.

    Ours: the registered names (``algorithms.variants``), a plugin's included; ``names()`` lists
    them and ``communicators.table()`` says when to use each (docs/communicators.md).
    ChainerMN's: ``CHAINERMN_NAMES`` (``naive``: one MPI_Allreduce per array, CPU and GPU;
    ``pure_nccl``: GPU; ``dummy``: no communication).

    Ours carry float32 (float64 if the model has float64 arrays); float16 gradients are
    summed in float32. Keyword options for ours: ``grid=(M, N)`` or "MxN" (rsaa, rsap),
    ``shm`` (rsaa, rsap), ``sync`` and ``reduce_scatter`` (rsap), ``network`` (auto),
    ``segment_size`` (bytes per message segment), ``allreduce_grad_dtype=numpy.float16``
    (half the bytes on the wire), and ChainerMN's ``batched_copy`` (accepted, recorded in
    the configuration, no effect on CPU). Other keywords go to ChainerMN's factory.
    """
    asked = communicator_name
    ours = names()
    communicator_name, kwargs = policy().choose(communicator_name, kwargs, ours)
    _check_name(communicator_name)
    cls = communicator_class(communicator_name) if communicator_name in ours else None
    if cls is None and kwargs.get('allreduce_grad_dtype') is not None \
            and communicator_name != 'pure_nccl':
        raise ConfigError(
            'chainermn_torus: communicator {!r} cannot send gradients as {} '
            '(allreduce_grad_dtype); on CPU use one of {}, which can.'.format(
                communicator_name, kwargs['allreduce_grad_dtype'], ', '.join(sorted(ours))))
    # The process configured, once, before the first communicator (process_setup): a bad
    # setting is refused in one line from here on; ChainerMN's own get only what a setting
    # asks for.
    settings = process_setup.init(mpi_comm, ours=cls is not None).settings
    if cls is None:
        exact, source = (False, None) if settings is None else settings.pick(
            'exact_sum', kwargs.get('exact_sum'), 'exact_sum')
        virtual, by = (None, None) if settings is None else settings.pick(
            'virtual_ranks', kwargs.get('virtual_ranks'), 'virtual_ranks')
        if virtual is not None:
            exact, source = True, f'{by} {virtual}'
        if exact:  # refused before it is made: every rank here, none in a collective
            raise ConfigError(
                f'chainermn_torus: {source} asks for the exact sum, and communicator '
                f'{communicator_name!r} is ChainerMN\'s, which sums in float32 in an order of '
                f'its own; use one of {", ".join(sorted(ours))} (--communicator under the '
                'launcher)')
        return _made(_chainermn_factory(communicator_name, mpi_comm=mpi_comm, **kwargs),
                     asked, communicator_name)
    kwargs = policy().with_defaults(_option_names(cls), kwargs)
    explicit = 'batched_copy' in kwargs
    batched_copy = kwargs.pop('batched_copy', True)
    try:
        # The settings handed down where the class takes them (a plugin's may not).
        handed = {'settings': settings} if 'settings' in inspect.signature(
            getattr(cls, '__init__')).parameters else {}
        comm = cls(mpi_comm=mpi_comm, **handed, **kwargs)
    except TypeError as e:
        if 'unexpected keyword' not in str(e):
            raise
        raise OptionError('chainermn_torus: communicator {!r} does not take option(s) {}; it '
                          'takes: {}'.format(communicator_name, ', '.join(sorted(kwargs)),
                                             _options_of(cls))) from None
    comm.set_config('batched_copy', batched_copy)
    if explicit:
        report.say(f'batched_copy={batched_copy!r} accepted and ignored: it selects ChainerMN\'s '
                   'GPU '
                   f'packing path, and {communicator_name} has one CPU path',
                   comm.rank, key='batched_copy')
    return _made(comm, asked, communicator_name)


def _made(comm: Any, asked: str, made: str) -> Any:
    comm = watchdog.marked(comm)  # where a watchdog runs: its calls marked (a wrapper)
    told = policy().on_made
    if told is not None:
        told(comm, asked, made)
    return comm


def takes_option(name: str, option: str) -> bool:
    """Whether communicator ``name`` (ours; ChainerMN's take none of ours) takes
    ``option``."""
    return name in names() and option in _option_names(communicator_class(name))


def _option_names(cls: type) -> list:
    # What the constructor takes from a script; not the settings, nor how the package
    # itself makes one (``interface.Communicator``'s progress and background, **made_by).
    params = inspect.signature(getattr(cls, '__init__')).parameters.values()
    return [p.name for p in params if p.name not in ('self', 'mpi_comm', 'settings')
            and not p.name.startswith('_') and p.kind is not p.VAR_KEYWORD] + ['batched_copy']


def _options_of(cls: type) -> str:
    return ', '.join(_option_names(cls))


def create_multi_node_optimizer(actual_optimizer: Any, communicator: Any,
                                double_buffering: bool = False, zero_fill: bool = True,
                                **options: Any) -> Any:
    """ChainerMN's factory, ours, the one public way to make the wrapper: its options are
    ``chainermn_torus.optimizers.multi_node.make``'s, with the policy's applied.

    The process is configured here (``process_setup.init``: this package's steps, where no
    communicator of ours did it, with flush-to-zero and the watchdog's limit where the
    options ask). The optimizers (numba, MPI) load at the first call, not at
    ``import chainermn_torus``.
    """
    from chainermn_torus.optimizers import fused, multi_node  # with MPI, at the first call
    name = type(actual_optimizer).__name__  # fusing changes the class: name it first
    rules = policy()
    options = dict(options, double_buffering=double_buffering)
    if rules.optimizer_options is not None:
        options = rules.optimizer_options(actual_optimizer, options)
    # This package's object: the abort hook, and what its options ask (flush-to-zero, the
    # watchdog); malloc, compute and threads are its communicator's (a communicator of
    # ChainerMN's: where a setting asks), as a script's numba and oneDNN stay unloaded.
    settings = process_setup.init(getattr(communicator, 'mpi_comm', None), ours=False,
                                  abort_hook=True,
                                  flush_denormals=options.get('flush_denormals', False),
                                  watchdog=options.get('watchdog')).settings
    # The watchdog is the process's (init's watch step); the wrapper marks its calls.
    opt = multi_node.make(actual_optimizer, communicator, zero_fill=zero_fill,
                          settings=settings, chainer_type_check=os.environ.get(
                              'CHAINER_TYPE_CHECK'),
                          on_first_update=rules.first_update,
                          **{k: v for k, v in options.items() if k != 'watchdog'})
    if rules.optimizer_made is not None:
        rules.optimizer_made(name, communicator, options, fused.is_fused(opt.actual_optimizer))
    return opt


def register() -> None:
    """Make chainermn.create_communicator (both import paths) and
    chainermn.create_multi_node_optimizer this package's (idempotent). The launcher also
    replaces ``chainermn.optimizers.create_multi_node_optimizer``."""
    if patches.applied('registry'):
        return
    why = 'ChainerMN scripts make this package\'s communicators and optimizer'
    for owner, name, ours in ((chainermn, 'create_communicator', create_communicator),
                              (chainermn.communicators, 'create_communicator',
                               create_communicator),
                              (chainermn, 'create_multi_node_optimizer',
                               create_multi_node_optimizer)):
        patches.apply(owner, name, ours, 'registry', why)
