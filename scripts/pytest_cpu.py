"""A pytest plugin: each test's wall time and CPU seconds (pytest's own and its children's,
the jobs it waited for), written as JSON at the end: [[test id, wall s, self CPU-s, children
CPU-s], ...] (PYTEST_CPU_OUT, default $TMPDIR/pytest_cpu.json; '{pid}' in it is replaced by
pytest's pid). What the "CPU-s of the run" figures of docs/measurements/test-timings.md
come from.

    PYTHONPATH=scripts PYTEST_ADDOPTS="-p pytest_cpu" PYTEST_CPU_OUT=/tmp/cpu.json make test

Children's CPU is counted when pytest reaps them: a session's MPI world counts in the test
after which it ends, and ranks killed or aborted under mpiexec may not count at all.
"""
import json
import os
import resource
import tempfile
import time

import pytest

_ROWS = []


def _cpu(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    wall, own, children = time.time(), _cpu(resource.RUSAGE_SELF), \
        _cpu(resource.RUSAGE_CHILDREN)
    yield
    _ROWS.append([item.nodeid, time.time() - wall, _cpu(resource.RUSAGE_SELF) - own,
                  _cpu(resource.RUSAGE_CHILDREN) - children])


def pytest_sessionfinish(session):
    # '{pid}' in the name: one file per pytest (make test runs several side by side)
    out = os.environ.get('PYTEST_CPU_OUT', os.path.join(tempfile.gettempdir(), 'pytest_cpu.json'))
    with open(out.replace('{pid}', str(os.getpid())), 'w') as f:
        json.dump(_ROWS, f)
