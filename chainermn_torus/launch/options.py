"""The launcher's options: every row of ``settings_table.SETTINGS`` with a ``launcher`` target is
``--KEY-WITH-DASHES`` here (``command_line.add_option``: the same parser and meaning), and the
launcher's settings are the whole table resolved once from them (the flag, else the
environment variable, else the default). Adding an option is that row plus the code that
applies it.
"""
from chainermn_torus import command_line, config, settings_table

__all__ = ['add_arguments', 'resolve', 'option_of', 'keys']

option_of = settings_table.option_of
# The options every entry point shares (command_line.add_arguments), by the attribute argparse
# gives them: settings too.
SHARED = {'threads': ('threads', '--threads'), 'grid': ('grid', '--grid'),
          'segment_size': ('segment_bytes', '--segment-size')}

def keys(target=None):
    """The settings the launcher takes (those that apply to ``target``), in table order."""
    return [k for k, s in settings_table.SETTINGS.items()
            if s.launcher is not None and (target is None or s.launcher == target)]


def add_arguments(parser):
    group = parser.add_argument_group(
        "applied to the script's communicator, optimizer and training iterator")
    for key in keys():
        command_line.add_option(group, key, help=settings_table.SETTINGS[key].meaning.replace(
            'launcher: ', '').replace('launcher, ', ''))
    return group


def resolve(opts):
    """The settings of a launch: the table resolved once from ``opts`` (the launcher's
    options and the shared ones), the environment and the defaults."""
    given = {key: (getattr(opts, key), option_of(key)) for key in keys()
             if getattr(opts, key, None) is not None}
    for attribute, (key, option) in SHARED.items():
        if getattr(opts, attribute, None) is not None:
            given[key] = (getattr(opts, attribute), option)
    return config.resolve(given)
