"""The process's settings, resolved once from the table (``settings_table``).

The one precedence, for every row: a value given for it (the launcher's flag, an entry
point's option, a keyword in code) wins; otherwise its environment variable; otherwise its
default. ``resolve`` applies it to the whole table at once and returns a frozen ``Settings``:
each value with where it came from (the option, the variable, or the default). The process
holds one (``current``), installed by its entry point: the launcher the one it resolved from
its flags, ``chainermn_torus.init(flags=)`` the one from a command line or, without flags,
from the environment (so a variable the script sets before then is heard), a command's
``parse_args`` its own. The entry points hand it down; the modules below them take it as
an argument.

Every bad value gets the same kind of message: which option or variable, what it must be,
what it was.
"""
import os
import types
from typing import Any, Iterable, Mapping, Optional, Tuple

from chainermn_torus.errors import ConfigError
from chainermn_torus.process import STATE
from chainermn_torus.settings_table import SETTINGS, option_of, parse, shown

__all__ = ['Settings', 'resolve', 'current', 'installed', 'defaults', 'alone', 'install',
           'quiet', 'from_environment', 'Sourced', 'Flags']

# A value and where it came from: the option or variable that gave it, None for a default.
Sourced = Tuple[Any, Optional[str]]
# An entry point's command line: {key: (value, option)}, a value None where not given.
Flags = Mapping[str, Tuple[Any, Optional[str]]]


def from_environment(key: str, environ: Mapping[str, str]) -> Sourced:
    """(value, variable) from the variable of ``key`` in ``environ``, or (default, None)."""
    s = SETTINGS[key]
    raw = environ.get(s.env)
    # Set to nothing (``VAR=``, or a job script's ``export VAR=$UNSET``) is unset, for every
    # kind alike: an empty flag once meant on, and ``CHAINERMN_TORUS_DOUBLE_BUFFERING=``
    # trained with stale gradients where an empty number meant the default.
    if raw is None or not raw.strip():
        return s.default, None
    return parse(s.kind, raw, s.env), s.env


class Settings:
    """Every setting's value and where it came from (``resolve``); frozen.

    ``settings[key]`` is the value; ``source(key)`` the option or variable that gave it, or
    None for the default; ``pick(key, given, option)`` is a value given in code for one call
    (a communicator's ``segment_size=``), which wins as a flag does, else this object's.
    """

    __slots__ = ('_values',)
    _values: Mapping[str, Sourced]

    def __init__(self, values: Mapping[str, Sourced]) -> None:
        object.__setattr__(self, '_values', types.MappingProxyType(dict(values)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError('settings are frozen: resolve() makes another')

    def __getitem__(self, key: str) -> Any:
        return self._values[key][0]

    def source(self, key: str) -> Optional[str]:
        return self._values[key][1]

    def pick(self, key: str, given: Any = None, option: Optional[str] = None) -> Sourced:
        """(value, source): ``given`` (checked, its errors naming ``option``) when not None,
        else this object's value of ``key`` and its source."""
        if given is not None:
            option = option or key
            return parse(SETTINGS[key].kind, given, option), option
        return self._values[key]

    def chosen(self) -> dict[str, Sourced]:
        """{key: (value, source)} of the settings not at their default's source."""
        return {k: v for k, v in self._values.items() if v[1] is not None}

    def describe(self, keys: Optional[Iterable[str]] = None) -> str:
        """``key=value (source)`` for the settings an option or variable gave."""
        return ', '.join(f'{k}={shown(v)} ({source})'
                         for k, (v, source) in self.chosen().items()
                         if keys is None or k in keys) or 'all defaults'


def resolve(flags: Optional[Flags] = None,
            environ: Optional[Mapping[str, str]] = None) -> Settings:
    """The table resolved at once: ``flags`` ({key: (value, option)}: a launcher's or entry
    point's options; None values are not given) over ``environ`` (default os.environ) over
    the defaults. The first bad value raises its ConfigError."""
    environ = os.environ if environ is None else environ
    flags = flags or {}
    unknown = sorted(set(flags) - set(SETTINGS))
    if unknown:
        raise KeyError('not settings: {}'.format(', '.join(unknown)))
    values: dict[str, Sourced] = {}
    for key, s in SETTINGS.items():
        given, option = flags.get(key, (None, None))
        if given is not None:
            values[key] = parse(s.kind, given, option or option_of(key)), option or \
                option_of(key)
        else:
            values[key] = from_environment(key, environ)
    return Settings(values)


def defaults() -> Settings:
    """The table's defaults alone, no variable heard: what an object made without the
    settings handed to it (a class made directly, not by a factory) takes."""
    return resolve(environ={})


def current() -> Settings:
    """The process's settings: those an entry point installed (``init``, the launcher, a
    command's ``parse_args``); before any did, the variables resolved for this read alone,
    not kept: no first reader decides the process's settings for the entry point after it."""
    return STATE.settings if STATE.settings is not None else resolve()


def installed() -> Optional[Settings]:
    """The settings an entry point installed, or None before one did."""
    return STATE.settings


def alone(key: str) -> Any:
    """Setting ``key`` from the environment by itself, its default where its value is bad:
    for the code that says a refusal, which runs where the table does not resolve."""
    try:
        return (STATE.settings or resolve())[key]
    except ConfigError:
        try:
            return from_environment(key, os.environ)[0]
        except ConfigError:
            return SETTINGS[key].default


def install(settings: Settings) -> Settings:
    """Make ``settings`` the process's (an entry point: ``init``, the launcher, a command's
    ``parse_args``); returns them."""
    if not isinstance(settings, Settings):
        raise TypeError('install() takes a Settings from resolve(), '
                        f'got {type(settings).__name__!r}')
    STATE.settings = settings
    return settings


def quiet() -> bool:
    """Whether informational lines are off (a bad value: not quiet, refused where the
    settings are resolved)."""
    try:
        return current()['quiet']
    except ConfigError:
        return False
