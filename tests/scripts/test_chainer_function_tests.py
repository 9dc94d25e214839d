"""scripts/chainer_function_tests.sh on a stand-in checkout (tests/scripts/chainer_checkout:
Chainer's pytest settings, tests shaped as Chainer's): a run that does not run stops it,
each run says how many tests ran and how many calls reached oneDNN and the kernels, the
baseline is plain Chainer, and a test failing only with the replacements is named."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = os.path.join(ROOT, 'scripts', 'chainer_function_tests.sh')
CHECKOUT = os.path.join(ROOT, 'tests', 'scripts', 'chainer_checkout')
FILES = ('functions_tests/activation_tests/test_relu.py '
         'functions_tests/connection_tests/test_convolution_2d.py')

pytestmark = pytest.mark.slow


def _needs_onednn():
    from chainermn_torus.compute.onednn import binding
    if not binding.available():
        pytest.skip('oneDNN is not installed (make setup installs onednn-cpu-gomp on '
                    'x86-64): ' + str(binding.why_unavailable()))


def _run(checkout, out, files=FILES):
    env = dict(os.environ, CHAINER_TESTS_FILES=files, PY=os.path.relpath(sys.executable))
    env.pop('PYTHONWARNINGS', None)  # the checkout's own settings decide, as in Chainer's
    return subprocess.run(['bash', SCRIPT, str(checkout), str(out)], capture_output=True,
                          text=True, timeout=300, env=env)


def test_a_test_failing_only_with_the_replacements_is_named_with_the_counts(tmp_path):
    _needs_onednn()
    checkout = tmp_path / 'checkout'  # a copy: pytest's bytecode stays out of this checkout
    shutil.copytree(CHECKOUT, str(checkout))
    proc = _run(checkout, tmp_path / 'out')
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    plain = [line for line in lines if line.startswith('[chainer tests] plain: ')]
    assert plain and plain[0].startswith('[chainer tests] plain: 5 tests run'), lines
    for mode in ('onednn', 'gpu_to_cpu'):
        said = [line for line in lines if line.startswith(f'[chainer tests] {mode}: ')]
        assert said and '5 tests run' in said[0], lines
        onednn = int(said[0].split('reached oneDNN: ')[1].split(',')[0])
        kernels = int(said[0].split("numba's kernels: ")[1])
        assert onednn > 0 and kernels > 0, said  # the small ReLU reached its kernel
    # the baseline imported nothing of the package; the convolution's expected values came
    # from Chainer's numpy (its test asserts it), so it passed
    named = [line for line in lines if line.startswith('FAILED')]
    assert named == ['FAILED tests/chainer_tests/functions_tests/activation_tests/'
                     'test_relu.py::test_plain_chainer_is_the_baseline'], lines


def test_a_run_whose_tests_do_not_run_stops_the_script(tmp_path):
    _needs_onednn()
    checkout = tmp_path / 'checkout'
    shutil.copytree(CHECKOUT, str(checkout))
    # a warning at import under Chainer's `filterwarnings = error`: collection fails
    bad = checkout / 'tests' / 'chainer_tests' / 'functions_tests' / 'activation_tests'
    (bad / 'test_warns.py').write_text('import warnings\nwarnings.warn("at import", '
                                       'DeprecationWarning)\n\n\ndef test_x():\n    pass\n')
    proc = _run(checkout, tmp_path / 'out',
                FILES + ' functions_tests/activation_tests/test_warns.py')
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert 'plain: pytest exited 2 without running the tests' in proc.stderr, proc.stderr
    # a file with no test in it: pytest's exit code 5, not "0 failures"
    (bad / 'test_none.py').write_text('"""no tests"""\n')
    proc = _run(checkout, tmp_path / 'out2', 'functions_tests/activation_tests/test_none.py')
    assert proc.returncode == 2 and 'pytest exited 5' in proc.stderr, proc.stderr
