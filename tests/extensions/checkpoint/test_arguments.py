"""The examples' checkpoint options (extensions.checkpoint.arguments), parsed in one process."""
import argparse

import pytest

from chainermn_torus.extensions.checkpoint import add_arguments, check_arguments


def parse(*argv):
    parser = argparse.ArgumentParser(prog='train')
    add_arguments(parser)
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    return args


@pytest.mark.parametrize('argv, fact', [
    (['--resume'], '--resume needs --checkpoint-dir DIR'),
    (['--auto-resume'], '--resume needs --checkpoint-dir DIR'),
    (['--checkpoint-dir', 'ck', '--checkpoint-interval', '0'],
     "argument --checkpoint-interval: must be an integer >= 1, got '0'"),
    (['--checkpoint-dir', 'ck', '--resume-batch', 'double'], "invalid choice: 'double'"),
])
def test_bad_options_are_refused_naming_the_value(argv, fact, capsys):
    with pytest.raises(SystemExit) as e:
        parse(*argv)
    assert e.value.code == 2 and fact in capsys.readouterr().err


def test_the_options_as_given():
    args = parse('--checkpoint-dir', 'ck', '--checkpoint-interval', '5', '--auto-resume',
                 '--resume-batch', 'scale')
    assert (args.checkpoint_dir, args.checkpoint_interval, args.auto_resume,
            args.resume, args.resume_batch) == ('ck', 5, True, False, 'scale')
    assert parse().resume_batch == 'keep'
