"""The settings' rows as command-line options, for every entry point: ``add_option``
declares a row's option on a parser (its kind's parser, metavar and meaning), ``options``
fills in what the command line left (the variable, else the entry point's default, else the
row's), ``flags`` gives what the command line gave, for ``resolve`` and ``init(flags=)``;
``add_arguments`` the options every entry point shares.
"""
import argparse
import os

from chainermn_torus import config
from chainermn_torus.config import from_environment
from chainermn_torus.errors import ConfigError
from chainermn_torus.process import STATE
from chainermn_torus.settings_table import KINDS, SETTINGS, must_be, option_of, shown

__all__ = ['add_option', 'add_arguments', 'add_communicator', 'arg_type', 'flags', 'options',
           'parse_args', 'parse_command_line', 'set_communicator_names']

# --- the same options on command lines ---------------------------------------------------
# The factory's names, told by the factory (``_registry``, which sits above this table and
# is imported with the package, before any command line is parsed): a function, since
# plugins may add names.
_COMMUNICATOR_NAMES = [lambda: ()]


def set_communicator_names(names):
    """``names()`` gives the names ``--communicator`` accepts."""
    _COMMUNICATOR_NAMES[0] = names


def _communicator_name(text):
    known = _COMMUNICATOR_NAMES[0]()
    if text not in known:
        raise argparse.ArgumentTypeError('invalid choice: {!r} (unknown communicator {!r}; '
                                         'valid names: {})'.format(text, text, ', '.join(known)))
    return text


def _arg(kind):
    def convert(text):
        try:
            return KINDS[kind].parse(text)
        except (TypeError, ValueError):  # argparse puts "argument --NAME:" before this
            raise argparse.ArgumentTypeError(must_be(kind, text))
    convert.__name__ = kind
    return convert


def _counts(kind):
    convert = _arg(kind)

    def count(text):
        value = convert(text)
        if not isinstance(value, int):
            raise argparse.ArgumentTypeError('must be a count here (this measures counts), '
                                             f'got {text!r}')
        return value
    count.__name__ = kind
    return count


def arg_type(kind):
    """An argparse ``type=`` for the examples' numbers: 'count' (integer >= 1), 'positive'
    (number > 0), 'non-negative' (number >= 0), 'seed' (numpy's: 0 to 2**32 - 1); the error
    says what is allowed."""
    return _arg(kind)


def add_option(parser, key, option=None, dest=None, help=None, default=None, nargs=None,
               counts=False, aliases=(), metavar=None, const=None):
    """Declare setting ``key`` on ``parser`` (or an argument group) from its row: its option
    (default ``--key-with-dashes``, and ``aliases`` such as ``-j``), its parser and metavar,
    its meaning as the help (or ``help``); ``nargs='?'`` with ``const``: the value of the bare
    option. ``default``: this entry point's own default, which takes the row default's place
    and nothing else's (the variable still wins over it: ``options``). ``nargs`` for several
    values. ``counts``: numbers only (a benchmark's thread counts: no 'off'). A flag is
    --X / --no-X; a switch (auto/on/off) is --X [VALUE] (bare: on) / --no-X. Returns the
    argparse action; after parsing, ``options(parser, opts)`` fills in what the command line
    did not give.
    """
    s = SETTINGS[key]
    option = option or option_of(key)
    if s.kind == 'flag':
        kwargs = dict(action=argparse.BooleanOptionalAction)
    else:
        kwargs = dict(type=_counts(s.kind) if counts else _arg(s.kind),
                      metavar=metavar or ('N' if counts else KINDS[s.kind].metavar))
        if nargs is not None:
            kwargs['nargs'] = nargs
            if const is not None:
                kwargs['const'] = const
        elif s.kind == 'switch':
            kwargs.update(nargs='?', const='on')
    here = '' if default is None else f'; here {shown(default)}'
    action = parser.add_argument(option, *aliases, dest=dest or key, default=None,
                                 help=f'{help or s.meaning} (or {s.env}{here})',
                                 **kwargs)
    if s.kind == 'switch':
        parser.add_argument('--no-' + option[2:], dest=action.dest, action='store_const',
                            const=False, help=f'the same as {option} off')
    action.setting = key  # what flags() and options() gather
    action.entry_default = default
    # The declared actions travel in the parser's defaults (public, and shared by its
    # argument groups), so the parsed namespace carries them to flags() and options().
    declared = parser.get_default(_DECLARED) or ()
    parser.set_defaults(**{_DECLARED: tuple(declared) + (action,)})
    return action


_DECLARED = '_chainermn_torus_settings'  # the namespace's entry of the declared actions


def _declared(opts):
    return getattr(opts, _DECLARED, ())


def flags(parser, opts):
    """{key: (value, option)} of the settings ``parser`` declares (``add_option``) that
    ``opts`` gives: what ``resolve(flags=...)`` takes. An option of several values (a
    benchmark's thread counts to sweep) is the command's own, not one value of its row."""
    out = {}
    for action in _declared(opts):
        value = getattr(opts, action.dest, None)
        if value is not None and not isinstance(value, list):
            out[action.setting] = (value, action.option_strings[0])
    return out


def options(parser, opts):
    """Fill in, on ``opts``, every setting ``parser`` declares that its command line did not
    give, by the one precedence: its variable (or the launcher's option, where the launcher
    installed its settings), else this entry point's default (``add_option(default=)``),
    else the row's. A variable's value passes the option's own checks (a benchmark's counts).
    Returns {key: (value, source)}, source None for a default. A bad value of a declared
    setting exits as argparse's errors do, naming the variable (others are left to where
    they are read)."""
    held, out = STATE.settings, {}
    for action in _declared(opts):
        key, given = action.setting, getattr(opts, action.dest, None)
        if given is not None:
            out[key] = (given, action.option_strings[0])
            continue
        # Each declared row by itself: a bad value of another is said where it is read.
        try:
            value, source = held.pick(key) if held is not None else \
                from_environment(key, os.environ)
        except ConfigError as e:
            parser.error(str(e).replace('chainermn_torus: ', '', 1))
        if source is not None:
            value = _as_option(parser, action, value, source)
        elif action.entry_default is not None:
            value = action.entry_default
        if action.nargs in ('*', '+') and value is not None and not isinstance(value, list):
            value = [value]
        setattr(opts, action.dest, value)
        out[key] = (value, source)
    return out


def parse_args(parser, argv=None):
    """A command's entry: ``parser.parse_args(argv)``, the settings resolved from what it
    gave over the variables and installed as the process's (where a launcher has not
    installed its own), then ``options`` fills in the rest from them: one channel, what the
    command line gave is what the modules it calls read. A bad value of any setting exits
    as argparse's errors do, naming its option or variable."""
    opts = parser.parse_args(argv)
    if STATE.settings is None:
        try:
            config.install(config.resolve(flags(parser, opts)))
        except ConfigError as e:
            parser.error(str(e).replace('chainermn_torus: ', '', 1))
    options(parser, opts)
    return opts


def parse_command_line(parser, argv=None):
    """(opts, flags): ``parse_args``'s options, and the settings its command line gave
    (``flags``, before ``options`` filled in the rest), for ``chainermn_torus.init(flags=)``."""
    opts = parser.parse_args(argv)
    given = flags(parser, opts)
    options(parser, opts)
    return opts, given


def _as_option(parser, action, value, source):
    """A variable's (or launcher's) ``value`` through ``action``'s own type check."""
    if action.type is None or value is None:
        return value
    try:
        return action.type(str(value)) if not isinstance(value, bool) else value
    except argparse.ArgumentTypeError as e:
        parser.error(f'{source} {e}')


def add_communicator(parser, default='rsap'):
    """``--communicator NAME``, checked against the factory's names (default ``default``;
    None: the script's own choice)."""
    return parser.add_argument('--communicator', type=_communicator_name, default=default,
                               metavar='NAME', help='one of {} (default: {})'.format(
                                   ', '.join(_COMMUNICATOR_NAMES[0]()),
                                   default or "the script's own"))


def add_arguments(parser, communicator='rsap', grid=True, threads=True, segment_size=False,
                  exact_sum=False):
    """The options every entry point shares, defined once: ``--communicator`` (default
    ``communicator``; None: the script's own choice), and from the rows ``--grid``,
    ``--threads``, ``--segment-size`` and ``--exact-sum``. Returns the argument group."""
    group = parser.add_argument_group('communicator (chainermn_torus)')
    add_communicator(group, communicator)
    if grid:
        add_option(group, 'grid', help='rsaa/rsap grid: rows of M ranks, N rows (default: '
                   'ranks per node x nodes)')
    if threads:
        add_option(group, 'threads')
    if segment_size:
        add_option(group, 'segment_bytes', '--segment-size', dest='segment_size')
    if exact_sum:
        add_option(group, 'exact_sum')
    return group
