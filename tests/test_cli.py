"""The `chainermn-torus` command: one table of subcommands, each answering --help."""
import pytest

from chainermn_torus.tools import cli
from conftest import run_cli


@pytest.mark.parametrize('command', list(cli.COMMANDS))
def test_every_subcommand_answers_help(command):
    proc = run_cli([command, '--help'])
    assert proc.returncode == 0, proc.stderr
    assert 'usage' in proc.stdout.lower() or 'chainermn-torus ' + command in proc.stdout, \
        proc.stdout[:500]


def test_usage_lists_every_command_and_an_unknown_one_is_named():
    proc = run_cli(['--help'])
    assert proc.returncode == 0
    for command in cli.COMMANDS:
        assert 'chainermn-torus ' + command in proc.stdout, command
    bad = run_cli(['frobnicate'])
    assert bad.returncode == 2
    assert "unknown command 'frobnicate'" in bad.stderr and 'plan' in bad.stderr
