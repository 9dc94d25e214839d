"""`make test`'s lanes (scripts/test_lanes.sh) run every test once: lane A takes the root
tests and the files it names, lane B every other test but the worlds', then the `world`
tests. A test marked both root and world would run twice, a file of lane A that is gone
would fail the run late: both found here, at once."""
import os
import re
import subprocess
import sys

from conftest import ROOT

SCRIPT = os.path.join(ROOT, 'scripts', 'test_lanes.sh')


def lane_a_files():
    text = open(SCRIPT).read()
    m = re.search(r"^lane_a_files='([^']*)'", text, re.M)
    assert m, 'scripts/test_lanes.sh has no lane_a_files'
    return m.group(1).split()


def collected(*args):
    proc = subprocess.run([sys.executable, '-m', 'pytest', '--collect-only', '-q',
                           '-p', 'no:cacheprovider'] + list(args),
                          capture_output=True, text=True, cwd=ROOT)
    return proc.returncode, [l for l in proc.stdout.splitlines() if '::' in l]


def test_lane_a_files_exist_and_hold_tests_of_lane_b_kind():
    files = lane_a_files()
    assert files and all(os.path.isfile(os.path.join(ROOT, f)) for f in files), files
    code, tests = collected('-m', 'not root and not world', *files)
    assert code == 0 and len(tests) >= len(files), (code, tests[:5])


def test_no_test_is_both_root_and_world():
    code, tests = collected('-m', 'root and world', 'tests')
    assert code == 5 and tests == [], tests  # 5: pytest's "no tests collected"
