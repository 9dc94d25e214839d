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


def test_simulate_refuses_a_machine_beyond_its_size_at_once():
    # --nodes 100000000 ran for hours building the platform, printing nothing.
    proc = run_cli(['simulate', '--nodes', '100000000'])
    assert proc.returncode == 2 and 'is 100000000 ranks; the simulator takes at most 65536' \
        in proc.stderr, proc.stderr


@pytest.mark.parametrize('path', ['/proc/no/result.json', '/sys/result.json'])
def test_an_output_that_cannot_be_written_is_refused_before_the_work(path):
    # /sys: os.access says yes to root; the write failed after the simulation, a traceback.
    from chainermn_torus.tools import result_paths
    with pytest.raises(ValueError) as e:
        result_paths.check_writable(path, '--json')
    assert str(e.value).startswith(f'cannot write --json {path}: ')
