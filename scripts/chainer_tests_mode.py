"""A pytest plugin: runs a session of Chainer's own tests with Chainer's heavy functions on
oneDNN (CHAINER_TESTS_COMPUTE=onednn, the default) or on Chainer's numpy
(CHAINER_TESTS_COMPUTE=numpy), as ``compute.use`` sets them; with CHAINER_TESTS_GPU_TO_CPU=1
also with everything ``--gpu-to-cpu`` installs (launch.gpu_to_cpu: Chainer's device functions
and cuda module patched for a script, here pytest's entry, so that no test file is the
script: they must all see what a CPU-only machine shows). scripts/chainer_function_tests.sh
runs the modes and compares."""
import os
import sys

import chainermn_torus  # noqa: F401 (before Chainer: its import then scans nothing)
from chainermn_torus import compute
from chainermn_torus.launch import gpu_to_cpu


def pytest_configure(config):
    compute.use(os.environ.get('CHAINER_TESTS_COMPUTE', 'onednn'))
    if os.environ.get('CHAINER_TESTS_GPU_TO_CPU') == '1':
        gpu_to_cpu.install(os.path.abspath(sys.argv[0]), True, rank=0)
