"""A pytest plugin for a session of Chainer's own tests (scripts/chainer_function_tests.sh).

CHAINER_TESTS_COMPUTE=onednn (the default) puts Chainer's heavy functions on oneDNN and
numba's kernels as ``compute.use`` does, and makes the tests test them:

* expected values are computed with the replacements off: Chainer's tests compute, for
  example, a convolution's expected output with ``F.convolution_2d`` itself, which with the
  replacements on compares the replaced function with itself. ``FunctionTestCase``'s and
  ``LinkTestCase``'s ``_forward_expected`` (Chainer's private step that calls a test's
  ``forward_expected``) run on Chainer's numpy;
* small arrays go through the kernels: ``eltwise.SMALL`` is 0 (Chainer's ReLU and Add tests
  use arrays under 4,096 elements, which training leaves to Chainer's numpy);
* every call that reached a oneDNN primitive or a numba kernel is counted and written, at
  the session's end, to CHAINER_TESTS_COUNTS (JSON): the script fails a run that never
  reached them.

CHAINER_TESTS_COMPUTE=numpy keeps Chainer's functions (the package loaded, nothing
replaced). CHAINER_TESTS_GPU_TO_CPU=1 also installs everything ``--gpu-to-cpu`` does
(launch.gpu_to_cpu: Chainer's device functions and cuda module, for a script that is here
pytest's entry, so that no test file is the script). The script's baseline run is plain
Chainer, without this plugin."""
import json
import os
import sys

import chainermn_torus  # noqa: F401 before Chainer: its import then scans nothing
from chainer.testing import function_link
from chainermn_torus import compute
from chainermn_torus.bench import compute_profile
from chainermn_torus.compute import modes
from chainermn_torus.compute.kernels import eltwise
from chainermn_torus.launch import gpu_to_cpu
from chainermn_torus.runtime.chainer_glue import patches

_CLOCK = []


def _with_replacements_off(original):
    def forward_expected(self, *args):
        was = modes.enabled()
        modes.set_on(False)
        try:
            return original(self, *args)
        finally:
            modes.set_on(was)
    return forward_expected


def pytest_configure(config):
    mode = os.environ.get('CHAINER_TESTS_COMPUTE', 'onednn')
    compute.use(mode)
    if os.environ.get('CHAINER_TESTS_GPU_TO_CPU') == '1':
        gpu_to_cpu.install(os.path.abspath(sys.argv[0]), True, rank=0)
    if mode != 'onednn':
        return
    for cls in (function_link.FunctionTestBase, function_link.LinkTestCase):
        patches.apply(cls, '_forward_expected', _with_replacements_off(
            cls.__dict__['_forward_expected']), 'chainer tests',
            "Chainer's tests' expected values on Chainer's numpy")
    patches.apply(eltwise, 'SMALL', 0, 'chainer tests',
                  "Chainer's tests' small arrays through the kernels")
    clock = compute_profile.Clock()
    clock.install()
    _CLOCK.append(clock)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get('CHAINER_TESTS_COUNTS')
    if not _CLOCK or not path:
        return
    calls = _CLOCK[0].calls
    with open(path, 'w') as f:
        json.dump({'onednn': sum(n for k, n in calls.items() if k.startswith('oneDNN')),
                   'kernels': sum(n for k, n in calls.items() if k.startswith('numba')),
                   'by_part': dict(calls)}, f, indent=1)
