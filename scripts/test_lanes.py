"""The full tier as two pytest runs side by side: the tests marked ``lane`` at the lowest
priority, beside all the others at the normal one.

    python scripts/test_lanes.py "MARK-EXPRESSION and " python -m pytest -q tests

Why: on 2 cores the full tier keeps about 1.45 of them busy (single-process tests use one;
jobs waiting for a watchdog, a batch system or a kill use less), and 2 x its wall time is
the most it could use. The ``lane`` tests (tests/conftest.py says which may be) are jobs that
compute and are judged by no clock; at the lowest priority they take only what the others
leave, and the timed tests among those keep their cores.

The lowest priority: scripts/lowest.sh, for this pytest and (tests/conftest.py's run_mpi)
for every rank of its jobs, whose launcher starts them in sessions of their own.

The lane's output comes after the others'. The exit code is the first non-zero of the two
(the lane selecting no test is not a failure).
"""
import os
import signal
import subprocess
import sys
import tempfile

LOWEST = ['sh', os.path.join(os.path.dirname(os.path.abspath(__file__)), 'lowest.sh')]
NO_TESTS = 5  # pytest's exit code when nothing was selected


def main(argv):
    if len(argv) < 2:
        sys.exit('usage: test_lanes.py "MARK-EXPRESSION and " PYTEST-COMMAND...')
    prefix, command = argv[0], argv[1:]
    env = dict(os.environ, PYTEST_LANE='1')
    with tempfile.TemporaryFile('w+') as log:
        # -p no:cacheprovider: the two runs would both write .pytest_cache's last failures.
        lane = subprocess.Popen(LOWEST + command + ['-m', prefix + 'lane', '-p',
                                                    'no:cacheprovider'],
                                stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # its process group: ended below
        try:
            others = subprocess.call(command + ['-m', prefix + 'not lane'])
            print('[test] the others done; the lane (tests marked lane, at the lowest '
                  'priority beside them):', flush=True)
            laned = lane.wait()
        finally:
            if lane.poll() is None:  # interrupted: no test of the lane goes on alone
                os.killpg(lane.pid, signal.SIGKILL)
                lane.wait()
        log.seek(0)
        sys.stdout.write(log.read())
    laned = 0 if laned == NO_TESTS else laned
    return others or laned


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
