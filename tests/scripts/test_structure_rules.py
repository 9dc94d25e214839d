"""scripts/structure_figures.py's rules for where settings are resolved and where the process
is configured (the figures of the settings object's issue): each finds what it names, under
the names a module imports, and passes over what only looks like it."""
import ast

from conftest import script


def _figures():
    return script('structure_figures')


def test_settings_reads_are_found_under_any_import_name():
    source = ('from chainermn_torus import config as c\n'
              'from chainermn_torus.config import value as v\n'
              'import os\n'
              'a = c.value("watchdog")\n'
              'b = v("grid", None)\n'
              'd = c.env("threads")\n'
              'e = os.environ.get("CHAINERMN_TORUS_TUNE")\n'
              'f = os.environ["CHAINERMN_TORUS_GRID"]\n'
              'g = os.environ.get("HOME")\n'          # not a setting
              'h = other.value("x")\n')               # not the config module
    found = _figures()._settings_reads(ast.parse(source), 'm.py')
    assert found == ['m.py:4 config.value watchdog', 'm.py:5 config.value grid',
                     'm.py:6 config.env threads', 'm.py:7 os.environ CHAINERMN_TORUS_TUNE',
                     'm.py:8 os.environ CHAINERMN_TORUS_GRID']


def test_process_effects_are_found_and_an_objects_own_change_is_not():
    source = ('import faulthandler, signal, sys, os\n'
              'faulthandler.enable()\n'
              'signal.signal(signal.SIGTERM, f)\n'
              'sys.excepthook = hook\n'
              'os.environ["GOMP_SPINCOUNT"] = "0"\n'
              'chainer.global_config.type_check = False\n'
              'patches.apply(ledger, chainer.functions, "relu", r)\n'
              'libc.mallopt(1, 2)\n'
              'model.x = 1\n'                          # an object the caller holds
              'config = {}\n')
    found = _figures()._process_effects(ast.parse(source), 'm.py')
    assert [f.split(' ', 1)[0] for f in found] == [
        'm.py:2', 'm.py:3', 'm.py:4', 'm.py:5', 'm.py:6', 'm.py:7', 'm.py:8']
    assert 'malloc' in found[-1] and 'exception hook' in found[2]
