"""A pytest plugin: runs a session of Chainer's own tests with Chainer's heavy functions on
oneDNN (CHAINER_TESTS_COMPUTE=onednn, the default) or on Chainer's numpy
(CHAINER_TESTS_COMPUTE=numpy), as ``compute.use`` sets them. scripts/chainer_function_tests.sh
runs both and compares."""
import os

import chainermn_torus  # noqa: F401 (before Chainer: its import then scans nothing)
from chainermn_torus import compute


def pytest_configure(config):
    compute.use(os.environ.get('CHAINER_TESTS_COMPUTE', 'onednn'))
