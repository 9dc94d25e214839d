"""`make test-fresh` (scripts/fresh_run.py): refused in one line where it may not change the
machine, and its phases read off the lines that `make test`'s scripts really print. The
reset itself changes the machine and is never run here: `make test-fresh` is its test
(docs/measurements/test-timings.md)."""
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, 'scripts'))
import fresh_run  # noqa: E402

SCRIPT = os.path.join(ROOT, 'scripts', 'fresh_run.py')


def refused(env, prefix=()):
    proc = subprocess.run(list(prefix) + [sys.executable, SCRIPT], env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stdout == '', (proc.returncode, proc.stdout)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith('fresh_run: refused: '), proc.stderr
    return lines[0]


def test_refused_without_fresh_yes():
    env = {k: v for k, v in os.environ.items() if k != 'FRESH'}
    assert "FRESH=None" in refused(env)
    assert "FRESH='1'" in refused(dict(env, FRESH='1'))   # only the word yes


def test_refused_for_a_user_other_than_root_even_with_fresh_yes(monkeypatch, capsys):
    # In this process, as uid 65534 to the check: root with FRESH=yes would reset the
    # machine, and another user could not read this checkout to run it (a 0700 clone).
    monkeypatch.setenv('FRESH', 'yes')
    monkeypatch.setattr(fresh_run.os, 'geteuid', lambda: 65534)
    with pytest.raises(SystemExit) as e:
        fresh_run.main([])
    line = capsys.readouterr().err
    assert e.value.code == 2 and line.count('\n') == 1, line
    assert line.startswith('fresh_run: refused: ') and "(uid 65534, FRESH='yes')" in line, line


def test_scripts_print_the_lines_that_end_the_phases():
    def text(name):
        return open(os.path.join(ROOT, 'scripts', name)).read()
    assert 'print(f"[setup] ok: ' in text('setup.sh')
    simgrid = text('setup_simgrid.sh')
    assert 'echo "SimGrid: importable for ' in simgrid            # found
    assert 'echo "SimGrid: python3-simgrid ' in simgrid           # installed
    lanes = text('test_lanes.sh')
    assert 'echo "[test] lane A: ' in lanes
    assert f'echo "{fresh_run.WORLDS_HEADING}"' in lanes


def test_phases_from_a_run_s_lines():
    phases = fresh_run.Phases()
    lines = ['[setup] installing chainer', '[setup] ok: chainer 7.8.1, numpy 1.26.4',
             'SimGrid: importable for .venv/bin/python',
             '1253 passed, 13 skipped, 9 deselected in 935.12s (0:15:35)',   # lane B
             '[test] lane A: the aarch64 build (root), the root tests, then ...',
             '47 passed, 2 errors in 308.00s (0:05:08)',                    # lane A, late
             '[test] the MPI worlds', '1 failed, 115 passed in 202.10s (0:03:22)',
             '[test] the fast MPI set under impi', '46 passed in 112.00s']
    ended = [(line, phases.feed(line)) for line in lines]
    assert [e for e in ended if e[1]] == [
        (lines[1], 'set-up (make setup)'), (lines[2], 'SimGrid (setup_simgrid.sh)'),
        (lines[4], 'lanes A and B'), (lines[7], 'the MPI worlds')]
    assert phases.last() == "the other MPIs' fast sets"
    assert phases.summaries == [lines[3], lines[5], lines[7], lines[9]]


def test_a_phase_that_printed_nothing_is_left_out():
    phases = fresh_run.Phases()   # no SimGrid line: not root
    assert phases.feed('[setup] ok: chainer') == 'set-up (make setup)'
    assert phases.feed('[test] lane A: ...') == 'lanes A and B'


def test_busy_cpu_seconds_count_this_process_s_work():
    before = fresh_run.busy_cpu_seconds()
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    assert fresh_run.busy_cpu_seconds() - before >= 0.25
