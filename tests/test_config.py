"""The configuration table: one parser per kind, one precedence (flag, else variable, else
default) for every row, resolved once into a frozen object, the docs' table the same as the
code's, and the shared command-line options."""
import argparse
import os

import pytest

from chainermn_torus import command_line, config, settings_table
from chainermn_torus.errors import ConfigError, UnsafePath
from chainermn_torus.process import STATE
from chainermn_torus.tools import cli
from conftest import ROOT
from tests.other_user import as_other, shared_dir  # noqa: F401


def test_given_value_wins_then_environment_then_default(monkeypatch):
    monkeypatch.delenv('CHAINERMN_TORUS_SEGMENT_BYTES', raising=False)
    assert config.resolve().pick('segment_bytes') == (4 << 20, None)
    monkeypatch.setenv('CHAINERMN_TORUS_SEGMENT_BYTES', '1024')
    known = config.resolve()
    assert known.pick('segment_bytes') == (1024, 'CHAINERMN_TORUS_SEGMENT_BYTES')
    assert known.pick('segment_bytes', 0, 'segment_size') == (0, 'segment_size')


# Two values each kind accepts, as text (the first is not the kind's parse of the second).
VALID = {
    'seconds': ('5', '7.5'), 'limit': ('3', '60'), 'bytes': ('0', '2048'),
    'segment': ('0', '4096'), 'threads': ('2', 'off'), 'grid': ('2x2', '1x4'),
    'text': ('one', 'two'), 'count': ('3', '5'), 'positive': ('0.5', '2'),
    'non-negative': ('0', '1.5'), 'flag': ('1', '0'), 'switch': ('on', 'off'),
    'tune': ('on', 'again'), 'seed': ('1', '2'), 'type_check': ('off', '4'),
    'elastic_step': ('0123abcd:1', '0123abcd:2'),
    'elastic_run': ('0123abcd', 'feedbeef'),
}


def _two_values(kind):
    names = settings_table.KINDS[kind].names
    return names[:2] if names else VALID[kind]


@pytest.mark.parametrize('key', list(settings_table.SETTINGS))
def test_every_row_takes_its_flag_over_its_variable_over_its_default(key):
    s = settings_table.SETTINGS[key]
    flag, variable = _two_values(s.kind)
    parse = settings_table.KINDS[s.kind].parse
    assert parse(flag) != parse(variable), (key, 'the two values must differ')
    option = settings_table.option_of(key)
    environ = {s.env: variable}
    # default
    default = config.resolve(environ={})
    assert (default[key], default.source(key)) == (s.default, None)
    # the variable over the default
    heard = config.resolve(environ=environ)
    assert (heard[key], heard.source(key)) == (parse(variable), s.env)
    # the flag over the variable
    flagged = config.resolve({key: (flag, option)}, environ=environ)
    assert (flagged[key], flagged.source(key)) == (parse(flag), option)
    # a value given in code for one call over all three
    assert flagged.pick(key, variable, 'code') == (parse(variable), 'code')


def test_the_settings_are_resolved_once_and_frozen(monkeypatch):
    from chainermn_torus.process import STATE
    monkeypatch.setenv('CHAINERMN_TORUS_SEGMENT_BYTES', '2048')
    # before an entry point installs them, a read resolves for itself and keeps nothing
    assert config.current()['segment_bytes'] == 2048 and config.installed() is None
    held = config.install(config.resolve())  # what an entry point (init) does, once
    assert STATE.settings is held and held['segment_bytes'] == 2048
    monkeypatch.setenv('CHAINERMN_TORUS_SEGMENT_BYTES', '4096')
    assert config.current() is held and config.current()['segment_bytes'] == 2048
    with pytest.raises(AttributeError, match='frozen'):
        held.segment_bytes = 1
    with pytest.raises(TypeError):
        held._values['segment_bytes'] = (1, None)
    # what the launcher installs is what every module reads
    mine = config.resolve({'segment_bytes': (8192, '--segment-size')})
    assert config.install(mine) is config.current() is mine
    assert mine.describe(['segment_bytes']) == 'segment_bytes=8192 (--segment-size)'
    with pytest.raises(KeyError, match='not settings: segments'):
        config.resolve({'segments': (1, '--segments')})


def test_before_the_first_read_a_script_s_own_variable_is_heard(monkeypatch):
    # the import resolves nothing: a variable the script sets before init is heard
    from chainermn_torus.process import STATE
    assert STATE.settings is None
    monkeypatch.setenv('CHAINERMN_TORUS_SEGMENT_BYTES', '4096')
    assert config.current()['segment_bytes'] == 4096


@pytest.mark.parametrize('key, raw, fragment', [
    ('segment_bytes', '-1', 'byte count >= 1024'),
    ('segment_bytes', '8', 'each segment costs several MPI calls'),
    ('bucket_bytes', '-1', 'byte count >= 0'),
    ('watchdog', '0', 'number of seconds >= 1'),
    ('watchdog', 'soon', 'number of seconds >= 1'),
    ('threads', '0', 'thread count >= 1'),
    ('threads', '999999999999999', 'thread count >= 1 and <= 65536'),
])
def test_bad_environment_values_name_the_variable_and_what_is_allowed(monkeypatch, key, raw,
                                                                        fragment):
    var = settings_table.SETTINGS[key].env
    monkeypatch.setenv(var, raw)
    with pytest.raises(ValueError) as e:
        config.resolve()
    assert f'{var} must be' in str(e.value) and fragment in str(e.value)
    assert repr(raw) in str(e.value)


def test_flags_and_off(monkeypatch):
    monkeypatch.setenv('CHAINERMN_TORUS_QUIET', '1')
    assert config.quiet() is True
    config.install(config.resolve())  # an entry point's, once
    monkeypatch.delenv('CHAINERMN_TORUS_QUIET')
    assert config.quiet() is True  # installed: held
    STATE.settings = None
    assert config.quiet() is False
    monkeypatch.setenv('CHAINERMN_TORUS_THREADS', 'OFF')
    assert config.resolve().pick('threads') == ('off', 'CHAINERMN_TORUS_THREADS')


def test_no_module_reads_a_variable_outside_the_table():
    # Every CHAINERMN_TORUS_* name in the package is one of the table's.
    import re
    known = {s.env for s in settings_table.SETTINGS.values()}
    for base, _, files in os.walk(os.path.join(ROOT, 'chainermn_torus')):
        for name in files:
            if name.endswith('.py'):
                text = open(os.path.join(base, name)).read()
                for var in re.findall(r'CHAINERMN_TORUS_[A-Z0-9_]+', text):
                    assert var in known, (name, var)


def test_docs_list_the_table(capsys):
    assert cli.main(['config']) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == settings_table.table()
    assert settings_table.table() in open(os.path.join(ROOT, 'docs', 'communicators.md')).read()


def test_shared_arguments_validate_once(capsys):
    parser = argparse.ArgumentParser()
    command_line.add_arguments(parser, communicator='rsap', segment_size=True)
    args = parser.parse_args(['--grid', '2x2', '--threads', '4', '--segment-size', '0'])
    assert (args.communicator, args.grid, args.threads, args.segment_size) == \
        ('rsap', '2x2', 4, 0)
    assert parser.parse_args(['--threads', 'off']).threads == 'off'
    for bad, fragment in ((['--communicator', 'ring'], "unknown communicator 'ring'"),
                          (['--threads', '0'], 'thread count >= 1'),
                          (['--segment-size', '-5'], 'byte count >= 1024'),
                          (['--segment-size', '64'], 'at 4-64 B one MLP all-reduce')):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
        assert fragment in capsys.readouterr().err


@pytest.mark.parametrize('key', sorted(settings_table.SETTINGS))
@pytest.mark.parametrize('empty', ['', ' ', '\t'])
def test_a_variable_set_to_nothing_is_unset_whatever_its_kind(key, empty, monkeypatch):
    # An empty flag once switched its feature on (DOUBLE_BUFFERING= trained on stale
    # gradients) where an empty number meant unset: now every kind means unset.
    monkeypatch.setenv(settings_table.SETTINGS[key].env, empty)
    assert config.resolve().pick(key) == (settings_table.SETTINGS[key].default, None)


@pytest.mark.parametrize('value', ['inf', '1e300', 'nan', '-1', '0'])
def test_seconds_are_finite_and_at_most_a_year(monkeypatch, value):
    # inf and 1e300 overflowed the watchdog's clocks: a 31-41-line OverflowError, the board
    # file left in /dev/shm.
    for key in ('watchdog', 'watchdog_startup'):
        monkeypatch.setenv(settings_table.SETTINGS[key].env, value)
        with pytest.raises(ConfigError) as e:
            config.resolve()
        assert f'and at most 31536000 (a year), got {value!r}' in str(e.value)
    assert settings_table.parse('seconds', '31536000', 'x') == 31536000.0


def test_a_watchdog_under_its_floor_is_refused_not_a_false_alarm(monkeypatch):
    # Before: CHAINERMN_TORUS_WATCHDOG=1e-9 was accepted, and a healthy job got a stall
    # verdict (its watcher woke every 0.25 ns) and a traceback at exit.
    for key in ('watchdog', 'watchdog_startup'):
        monkeypatch.setenv(settings_table.SETTINGS[key].env, '1e-9')
        with pytest.raises(ConfigError) as e:
            config.resolve()
        assert 'must be a number of seconds >= 1 (the watcher wakes once a second)' in \
            str(e.value) and "got '1e-9'" in str(e.value), str(e.value)
        monkeypatch.setenv(settings_table.SETTINGS[key].env, '1')
        assert config.resolve()[key] == 1.0


@pytest.mark.skipif(os.getuid() != 0, reason='reading as another user needs root')
def test_a_network_file_that_cannot_be_read_is_one_line(shared_dir):
    # Before: CHAINERMN_TORUS_NETWORK=/etc/shadow gave a PermissionError traceback on every
    # rank. As the other user, a file only root may read.
    import pathlib
    from chainermn_torus.planning import planner
    tmp_path = pathlib.Path(shared_dir)
    secret = tmp_path / 'network.json'
    secret.write_text('{}')
    secret.chmod(0o600)

    def load():
        try:
            planner.load_network(str(secret))
        except ConfigError as e:
            return str(e)
    said = as_other(load)
    assert said == (f'chainermn_torus: cannot read the network file {secret} (Permission denied); '
                    'give a file this user can read, or a preset (k, ofp)'), said
    link = tmp_path / 'link.json'
    link.symlink_to(secret)
    with pytest.raises(UnsafePath) as e:
        planner.load_network(str(link))
    assert f'refusing the network file {link}: it is a symbolic link' in str(e.value)


# The folders below the entry points: their settings arrive as arguments (issue 83's item 2).
HANDED_DOWN = ('communicators', 'optimizers', 'algorithms', 'compute', 'datasets', 'loader',
               'extensions', 'planning', 'tuning', 'simulation')
# What these folders do with the environment that is not reading a setting, each with why:
ENVIRONMENT_USES = {
    # libgomp reads its spin count when it loads: set before it, unless the user chose one
    'compute/onednn/binding.py': 3,
    # the loader's children must not start MPI: set around their start, then put back
    'loader/iterator.py': 4,
    # the SimGrid player's child gets this process's environment with the folder found
    'simulation/simulate.py': 2,
}


def test_no_module_below_the_entry_points_reads_the_settings_or_the_environment():
    import ast
    package = os.path.join(ROOT, 'chainermn_torus')
    reads, environment = [], {}
    for folder in HANDED_DOWN:
        for base, _, names in os.walk(os.path.join(package, folder)):
            for name in (n for n in names if n.endswith('.py')):
                path = os.path.join(base, name)
                rel = os.path.relpath(path, package)
                for node in ast.walk(ast.parse(open(path).read())):
                    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                        if node.value.id == 'config' and node.attr in ('current', 'alone'):
                            reads.append(f'{rel}:{node.lineno}')
                        if node.value.id == 'os' and node.attr in ('environ', 'getenv'):
                            environment[rel] = environment.get(rel, 0) + 1
    assert reads == [], 'hand these settings down from the entry point'
    assert environment == ENVIRONMENT_USES, environment
