"""The launcher's options: every row of ``config.SETTINGS`` with a ``launcher`` target is
``--KEY-WITH-DASHES`` here, with the same parser and meaning, and resolves as every setting
does (the flag, else the environment variable, else the default). Adding an option is that
row plus the code that applies it.
"""
import argparse

from chainermn_torus import config

__all__ = ['add_arguments', 'resolve', 'option_of', 'keys']

def keys(target=None):
    """The settings the launcher takes (those that apply to ``target``), in table order."""
    return [k for k, s in config.SETTINGS.items()
            if s.launcher is not None and (target is None or s.launcher == target)]


def option_of(key):
    return '--' + key.replace('_', '-')


def add_arguments(parser):
    group = parser.add_argument_group(
        "applied to the script's communicator, optimizer and training iterator")
    for key in keys():
        s = config.SETTINGS[key]
        if s.kind == 'flag':
            kwargs = dict(action=argparse.BooleanOptionalAction)
        else:
            kwargs = dict(type=config.arg_type(s.kind), metavar=config.KINDS[s.kind].metavar)
        group.add_argument(option_of(key), dest=key, default=None, help='{} (or {})'.format(
            s.meaning.replace('launcher: ', '').replace('launcher, ', ''), s.env), **kwargs)
    group.add_argument('--no-fused', dest='fused', action='store_const', const=False,
                       help="Chainer's own update rules (same as --fused off)")
    return group


def resolve(opts):
    """(values, sources): every launcher setting's value, and for the keys a flag or an
    environment variable set (not the default) which: the option or the variable's name."""
    values, sources = {}, {}
    for key in keys():
        value, source = config.value(key, getattr(opts, key, None), option_of(key))
        values[key] = value
        if source is not None:
            sources[key] = source
    return values, sources
