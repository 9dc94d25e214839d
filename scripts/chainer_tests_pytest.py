"""pytest for scripts/chainer_function_tests.sh, with Chainer imported before pytest reads
Chainer's setup.cfg: ``python chainer_tests_pytest.py PYTEST_ARGS...``.

Chainer's warning filters name ``chainer.warnings.PerformanceWarning``, and resolving that
name imports Chainer while the filter ``error`` is already in force: Chainer's environment
check then warns (numpy.distutils under numpy 1.26) and the session stopped with exit 4
before a test ran. A ``-p`` plugin is imported too late for that. Nothing of
chainermn_torus is imported here: the plain run is Chainer alone."""
import sys
import warnings

with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    import chainer  # noqa: F401

import pytest  # noqa: E402

if __name__ == '__main__':
    sys.exit(pytest.main(sys.argv[1:]))
