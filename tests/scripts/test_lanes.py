"""`make test`'s lanes (scripts/test_lanes.sh) run every test once: lane A takes the root
tests and the files it names, lane B every other test but the worlds', then the `world`
tests. A test marked both root and world would run twice (every collection refuses it:
tests/conftest.py), a file of lane A that is gone would fail the run late: found here."""
import os
import re
import subprocess
import sys

import pytest

import conftest
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
    return proc.returncode, [line for line in proc.stdout.splitlines() if '::' in line]


@pytest.mark.slow  # full tier: the lanes' own checks
def test_lane_a_files_exist_and_hold_tests_of_lane_b_kind():
    files = lane_a_files()
    assert files and all(os.path.isfile(os.path.join(ROOT, f)) for f in files), files
    code, tests = collected('-m', 'not root and not world', *files)
    assert code == 0 and len(tests) >= len(files), (code, tests[:5])


def test_a_test_both_root_and_world_is_refused_at_collection():
    # The guard runs in every collection (tests/conftest.py); here on a pair of items.
    class Item:
        def __init__(self, nodeid, *marks):
            self.nodeid, self.marks = nodeid, marks

        def get_closest_marker(self, name):
            return name if name in self.marks else None

    conftest.refuse_root_in_world([Item('a', 'root'), Item('b', 'world', 'mpi')])
    with pytest.raises(pytest.UsageError, match=r'root and world .*: c$'):
        conftest.refuse_root_in_world([Item('a', 'root'), Item('c', 'root', 'world')])


def files_with(text):
    """The test files whose source holds ``text``: what a check collects, instead of the
    whole suite (3-8 s of CPU a collection on 2 cores)."""
    found = []
    for base, _, names in os.walk(os.path.join(ROOT, 'tests')):
        found += [os.path.join(base, n) for n in names if n.startswith('test_')
                  and n.endswith('.py') and text in open(os.path.join(base, n)).read()]
    return sorted(found)


def test_the_wide_worlds_are_left_to_make_test_wide_and_run_there():
    # `make test` runs the worlds but those of WIDE_RANKS ranks; `make test-wide` runs those:
    # together every world test once. (tests/conftest.py gives `wide` only to world tests.)
    text = open(SCRIPT).read()
    assert re.search(r'-m "\$\{only\}world and not wide" tests', text), 'worlds phase'
    make = open(os.path.join(ROOT, 'Makefile')).read()
    assert re.search(r'^test-wide:.*\n\t.*-m "\$\(ONLY\)world and wide" tests$', make, re.M)
    assert conftest.WIDE_RANKS == (5, 7, 8)
    code, wide = collected('-m', 'wide', *files_with('mpi_world'))
    assert code == 0 and wide, wide
    for test in wide:  # the rank count is the id's last number: P5, -7], [8]
        assert int(re.findall(r'\d+', test.split('[')[-1])[-1]) in conftest.WIDE_RANKS, test


@pytest.mark.slow  # full tier: the lanes' own checks
def test_what_the_other_mpis_leave_out_starts_mpi_jobs_and_is_no_world_check():
    # one_mpi: refusals said once, whose saying once tests/test_refusals.py checks under each
    # MPI; a world check (collectives, windows: the MPI's own behaviour) is never left out.
    make = open(os.path.join(ROOT, 'Makefile')).read()
    assert 'ONLY := $(if $(filter mpich,$(MPI)),,mpi and not one_mpi and )' in make
    files = files_with('mark.one_mpi')
    code, left = collected('-m', 'one_mpi', *files)
    assert code == 0 and len(left) == 5, left
    code, odd = collected('-m', 'one_mpi and (world or not mpi)', *files)
    assert code == 5 and odd == [], odd  # 5: nothing collected


def test_the_fast_tiers_lane_a_paths_exist():
    # scripts/test_fast.sh: lane A takes these paths, lane B the tier's other tests (the
    # same marks, these ignored), then the worlds (the marker): each test once by
    # construction; a path that is gone would leave lane A short, found here.
    text = open(os.path.join(ROOT, 'scripts', 'test_fast.sh')).read()
    m = re.search(r"^lane_a='([^']*)'", text, re.M)
    assert m, 'scripts/test_fast.sh has no lane_a'
    paths = m.group(1).split()
    assert paths and all(os.path.exists(os.path.join(ROOT, p)) for p in paths), paths
    assert 'for f in $lane_a; do ignore+=("--ignore=$f"); done' in text
    assert text.count('-m "$marks and not world"') == 2 and '-m "$marks and world"' in text
