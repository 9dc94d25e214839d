"""The launcher's options come from the configuration table: adding one is a row of
``settings_table.SETTINGS`` (with what it applies to) plus the code that applies it."""
import chainer

from chainermn_torus import settings_table
from chainermn_torus.launch import Launch, options
from chainermn_torus.launch import optimizer


def test_every_launcher_row_is_an_option_with_its_variable():
    from chainermn_torus import run
    text = run.build_parser().format_help()
    for key in options.keys():
        assert settings_table.SETTINGS[key].launcher in settings_table.LAUNCHER_TARGETS, key
        assert options.option_of(key) in text, key
        assert settings_table.SETTINGS[key].env in text, key


def test_a_new_optimizer_row_reaches_the_option_the_variable_and_the_optimizer(monkeypatch):
    from chainermn_torus import run
    row = settings_table.Setting('CHAINERMN_TORUS_TOY_OPTION', 'count', None,
                         'launcher: a toy optimizer option', launcher='optimizer')
    monkeypatch.setitem(settings_table.SETTINGS, 'toy_option', row)
    opts = run.build_parser().parse_args(['--toy-option', '3', 'script.py'])
    launch = Launch(opts)
    assert launch.get('toy_option') == 3 and 'toy_option' in launch.given
    merged = optimizer.options_for(launch, chainer.optimizers.SGD(), {'fused': False})
    assert merged['toy_option'] == 3  # handed to create_multi_node_optimizer as a keyword
    # The same from the environment, as job scripts set it.
    monkeypatch.setenv('CHAINERMN_TORUS_TOY_OPTION', '5')
    launch = Launch(run.build_parser().parse_args(['script.py']))
    assert launch.get('toy_option') == 5
    # The report names an option it has no phrase for by its key.
    from chainermn_torus.launch.lines import optimizer_line
    line = optimizer_line('SGD', dict(merged), False, False, ['Adam'], options.keys('optimizer'))
    assert line.endswith('toy_option'), line
