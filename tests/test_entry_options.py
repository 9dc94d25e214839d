"""Every entry point declares its settings' options from their rows (command_line.add_option) and
fills in what its command line left by the one precedence (command_line.options): the flag, else
the variable, else the entry point's own default, else the row's."""
import argparse
import ast
import json
import os

import pytest

from chainermn_torus import command_line, settings_table
from chainermn_torus.process import STATE
from chainermn_torus.tools import topology
from conftest import ROOT

# An option of a row's name that means something else there, and why it is not the row's.
OTHER_MEANINGS = {
    ('chainermn_torus/tools/jobscript.py', '--mpi'):
        "the job's MPI library, written into the script (fujitsu too), not the tests' MPI",
    ('chainermn_torus/tools/jobscript.py', '--watchdog'):
        'the limit written into the job script (0: none written); the job resolves it',
    ('chainermn_torus/tools/elastic.py', '--global-batch'):
        'a batch size the steps keep (a count), not the launcher flag of that name',
    ('chainermn_torus/tools/elastic.py', '--virtual-ranks'):
        'the V its steps compute as (bare: the first step\'s ranks), set for them in the '
        'variable: the supervisor itself computes nothing',
    ('scripts/elastic_cases.py', '--virtual-ranks'):
        'a driver: the V of the elastic runs it starts (chainermn-torus elastic\'s option)',
    ('chainermn_torus/tools/jobscript.py', '--virtual-ranks'):
        'the V written into the job (bare: its ranks), not this process\'s',
    ('chainermn_torus/tools/clean.py', '--checkpoint-dir'):
        'directories whose unfinished files are cleaned (repeatable), not where a job writes',
    ('chainermn_torus/tools/jobscript.py', '--memory-snapshots'):
        "the K written into an --elastic job's launch line, not this process's snapshots",
    ('scripts/elastic_cases.py', '--mpi'):
        'a driver that does not import the package: the MPI of the runs it starts',
    ('scripts/node_loss.py', '--watchdog'):
        "a driver that does not import the package: the jobs' CHAINERMN_TORUS_WATCHDOG",
}
# Entry points that declare settings and do not fill them in: the launcher resolves its own
# (launch.options.resolve) and installs them; jobscript writes what it is given into a job,
# whose launcher resolves it there.
RESOLVED_ELSEWHERE = {'chainermn_torus/run.py', 'chainermn_torus/launch/options.py',
                      'chainermn_torus/tools/jobscript.py',
                      'chainermn_torus/extensions/checkpoint/arguments.py'}
DECLARES = ('add_option', 'add_arguments')


def _row_options():
    options = {settings_table.option_of(key): key for key in settings_table.SETTINGS}
    options['--segment-size'] = 'segment_bytes'  # command_line.add_arguments' spelling
    return options


def _sources():
    for top in ('chainermn_torus', 'examples', 'scripts'):
        for folder, _, names in os.walk(os.path.join(ROOT, top)):
            for name in sorted(names):
                if name.endswith('.py'):
                    path = os.path.join(folder, name)
                    yield os.path.relpath(path, ROOT), ast.parse(open(path).read())


def test_no_entry_point_spells_a_rows_option_itself():
    rows, found = _row_options(), []
    for path, tree in _sources():
        if path == 'chainermn_torus/command_line.py':
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, 'attr', None) == \
                    'add_argument':
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and arg.value in rows and \
                            (path, arg.value) not in OTHER_MEANINGS:
                        found.append(f'{path}:{node.lineno} {arg.value}')
    assert found == [], 'declare these with command_line.add_option (or say why not here)'
    assert len(OTHER_MEANINGS) == 10  # the stated exceptions, each still there:
    text = {path: open(os.path.join(ROOT, path)).read() for path, _ in OTHER_MEANINGS}
    for path, option in OTHER_MEANINGS:
        assert f"add_argument('{option}'" in text[path], (path, option)


def test_every_entry_point_that_declares_settings_fills_them_in():
    missing = []
    for path, tree in _sources():
        calls = {getattr(n.func, 'attr', None) for n in ast.walk(tree)
                 if isinstance(n, ast.Call)}
        if not calls & set(DECLARES) or path == 'chainermn_torus/command_line.py' or \
                path in RESOLVED_ELSEWHERE:
            continue
        source = ast.unparse(tree)
        if not any(call in source for call in ('command_line.options(', 'command_line.parse_args(',
                                                'command_line.parse_command_line(')):
            missing.append(path)
    assert missing == []


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(STATE, 'settings', None)
    for s in settings_table.SETTINGS.values():
        monkeypatch.delenv(s.env, raising=False)
    return monkeypatch


def _anew(fresh):
    """A new command's process: parse_args installs the settings it resolved (one channel),
    once per process; a test that runs several commands in one starts each anew."""
    fresh.setattr(STATE, 'settings', None)


def _parser():
    p = argparse.ArgumentParser()
    command_line.add_option(p, 'loader_processes', default=3, aliases=('-j',))
    command_line.add_option(p, 'flush_denormals', dest='ftz', default=True)
    command_line.add_option(p, 'fused')
    command_line.add_option(p, 'threads', default=[1, 2], nargs='+', counts=True)
    command_line.add_option(p, 'grid', nargs='*')
    return p


def test_flag_over_variable_over_entry_default_over_row_default(fresh):
    p = _parser()
    args = command_line.parse_args(p, [])
    assert (args.loader_processes, args.ftz, args.fused, args.threads, args.grid) == \
        (3, True, 'auto', [1, 2], None)
    fresh.setenv('CHAINERMN_TORUS_LOADER_PROCESSES', '5')
    fresh.setenv('CHAINERMN_TORUS_FLUSH_DENORMALS', '0')
    fresh.setenv('CHAINERMN_TORUS_FUSED', 'off')
    fresh.setenv('CHAINERMN_TORUS_THREADS', '4')
    fresh.setenv('CHAINERMN_TORUS_GRID', '2x2')
    _anew(fresh)
    args = argparse.Namespace()
    p.parse_args([], args)
    said = command_line.options(p, args)
    assert (args.loader_processes, args.ftz, args.fused, args.threads, args.grid) == \
        (5, False, False, [4], ['2x2'])
    assert said['loader_processes'] == (5, 'CHAINERMN_TORUS_LOADER_PROCESSES')
    _anew(fresh)
    args = command_line.parse_args(p, ['-j', '7', '--flush-denormals', '--fused', '--threads', '1',
                                 '8', '--grid', '1x4'])
    assert (args.loader_processes, args.ftz, args.fused, args.threads, args.grid) == \
        (7, True, True, [1, 8], ['1x4'])
    _anew(fresh)
    assert command_line.parse_args(p, ['--no-fused']).fused is False
    _anew(fresh)
    assert command_line.parse_args(p, ['--fused', 'auto']).fused == 'auto'


def test_a_variable_passes_the_options_own_checks(fresh, capsys):
    # A benchmark's thread counts are numbers: 'off' from the variable is refused as the
    # option would refuse it, naming the variable.
    fresh.setenv('CHAINERMN_TORUS_THREADS', 'off')
    with pytest.raises(SystemExit) as e:
        command_line.parse_args(_parser(), [])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert 'CHAINERMN_TORUS_THREADS must be a count here' in err, err
    fresh.setenv('CHAINERMN_TORUS_THREADS', '2')
    fresh.setenv('CHAINERMN_TORUS_LOADER_PROCESSES', 'many')
    _anew(fresh)
    with pytest.raises(SystemExit):
        command_line.parse_args(_parser(), [])
    assert "CHAINERMN_TORUS_LOADER_PROCESSES must be an integer >= 1, got 'many'" in \
        capsys.readouterr().err


def test_help_names_the_variable_and_the_entry_points_default():
    text = ' '.join(_parser().format_help().split())
    assert '(or CHAINERMN_TORUS_LOADER_PROCESSES; here 3)' in text
    assert '(or CHAINERMN_TORUS_FUSED)' in text and '--no-fused' in text


def test_a_real_entry_point_hears_the_variable_below_its_flag(fresh, capsys):
    # chainermn-torus topology: --policy is the affinity row, --loader-processes its own
    # default 1.
    def plan(*argv):
        _anew(fresh)
        topology.main(['--json', '--allowed', '0-1'] + list(argv))
        return json.loads(capsys.readouterr().out)
    default = plan()
    assert default['policy'] == 'same-core'  # auto's choice on a whole node
    fresh.setenv('CHAINERMN_TORUS_AFFINITY', 'none')
    heard = plan()
    assert heard['policy'] == 'none'
    assert plan('--policy', 'auto') == default
