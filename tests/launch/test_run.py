"""python -m chainermn_torus.run: unchanged scripts get the forced communicator."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, assert_ok, run_mpi, unlimited_env, worker


def test_launcher_forces_rsap_on_a_script_asking_for_naive():
    proc = run_mpi(2, ['-m', 'chainermn_torus.run', '--communicator', 'rsap', '--grid', '2x1',
                       worker('naive_script.py'), 'x', '--flag'])
    assert_ok(proc, 2)
    assert proc.stdout.count("RsapCommunicator argv=['x', '--flag']") == 2, proc.stdout


@pytest.mark.slow
def test_launcher_without_communicator_keeps_the_scripts_choice():
    proc = run_mpi(2, ['-m', 'chainermn_torus.run', worker('naive_script.py')])
    assert_ok(proc, 2)
    assert proc.stdout.count('NaiveCommunicator') == 2


@pytest.mark.slow
def test_launcher_options_without_communicator_reach_our_communicators():
    # Passed to the factory, not exported: the script's own environment is left alone.
    proc = run_mpi(2, ['-m', 'chainermn_torus.run', '--grid', '1x2', '--segment-size', '4096',
                       worker('report_options.py')])
    lines = assert_ok(proc, 2)
    assert all('grid (1, 2) segment 4096 4096 wire None' in line for line in lines), lines


@pytest.mark.slow
@pytest.mark.parametrize('options, env, wire', [
    (['--allreduce-dtype', 'bfloat16'], None, 'bfloat16'),
    ([], {'CHAINERMN_TORUS_ALLREDUCE_DTYPE': 'float16'}, 'float16'),
    (['--fp16-allreduce'], None, 'float16')])
def test_the_wire_dtype_reaches_every_communicator_the_script_makes(options, env, wire):
    pytest.importorskip('ml_dtypes', reason='bfloat16 needs ml_dtypes (make setup installs it)')
    proc = run_mpi(2, ['-m', 'chainermn_torus.run'] + options + [worker('report_options.py')],
                   env=env)
    assert_ok(proc, 2)
    # each rank's dtype, read from the merged stdout: a launcher's line may follow a rank's
    # on the same line (mpiexec interleaves the ranks' writes)
    wires = re.findall(r'OK rank \d+ grid .*? wire (None|bfloat16|float16|float32)',
                       proc.stdout)
    assert wires == [wire, wire], proc.stdout


def _run_single(*args):
    return subprocess.run([sys.executable, '-m', 'chainermn_torus.run'] + list(args),
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_launcher_threads_hold_in_a_script_without_a_communicator():
    # --threads 1 reached the pools only with a communicator: a plain script ran its
    # OpenMP, OpenBLAS and numba pools at the cores (2 here).
    proc = subprocess.run([sys.executable, '-m', 'chainermn_torus.run', '--threads', '1',
                           worker('report_pools.py')], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env=unlimited_env())
    assert proc.returncode == 0, proc.stderr
    pools = json.loads(proc.stdout.split('POOLS ', 1)[1])
    assert pools and set(pools.values()) == {1}, pools


@pytest.mark.slow
def test_launcher_preserves_exit_code():
    proc = _run_single('--communicator', 'pure_allreduce', worker('naive_script.py'), '3')
    assert proc.returncode == 3, proc.stderr
    assert 'PureAllreduceCommunicator' in proc.stdout


@pytest.mark.slow
def test_launcher_preserves_exceptions():
    proc = _run_single(worker('naive_script.py'), 'raise')
    assert proc.returncode == 1
    assert 'RuntimeError: the script failed on purpose' in proc.stderr
    assert 'naive_script.py' in proc.stderr  # the traceback points into the script


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_launcher_rejects_unknown_names_and_missing_scripts():
    proc = _run_single('--communicator', 'bogus', worker('naive_script.py'))
    assert proc.returncode == 2 and "invalid choice: 'bogus'" in proc.stderr
    assert 'rsap' in proc.stderr
    proc = _run_single('no/such/script.py')
    assert proc.returncode != 0 and 'script not found: no/such/script.py' in proc.stderr


@pytest.mark.slow
def test_launcher_refuses_a_grid_for_a_communicator_without_one():
    # Found at start-up, not as an option error inside the script on every rank.
    proc = _run_single('--communicator', 'auto', '--grid', '2x1', worker('naive_script.py'))
    assert proc.returncode == 1
    assert "--grid 2x1 applies to rsaa, rsap; communicator 'auto' has no grid" in proc.stderr


def test_world_size_check_names_a_pmi_mismatch_and_a_wrong_count():
    from chainermn_torus.runtime import world
    lib = 'MPICH Version:      5.0.2\nMPICH Release date: ...'
    job = {'CHAINERMN_TORUS_EXPECT_RANKS': '8'}
    assert world.mismatch(8, lib, job) is None
    singleton = world.mismatch(1, lib, job)
    assert 'a world of 1 rank' in singleton and 'PMI/launcher mismatch' in singleton
    assert 'says 8 ranks' in singleton and 'MPICH Version:      5.0.2' in singleton
    assert 'srun --mpi=pmi2' in singleton and '--mpi=pmix for Open MPI' in singleton
    assert 'MPI started 4 ranks but' in world.mismatch(4, lib, job)
    # srun's own count names only the singleton case; in the batch step, or under an MPI's
    # mpiexec inside an allocation, it is not a rank count.
    srun = {'SLURM_STEP_ID': '0', 'SLURM_STEP_NUM_TASKS': '4'}
    assert 'PMI/launcher mismatch' in world.mismatch(1, lib, srun)
    assert world.mismatch(4, lib, srun) is None and world.mismatch(2, lib, srun) is None
    batch = {'SLURM_STEP_ID': 'batch', 'SLURM_STEP_NUM_TASKS': '1'}
    assert world.mismatch(4, lib, batch) is None and world.mismatch(1, lib, {}) is None


@pytest.mark.slow  # the message itself is the fast test above
def test_launcher_stops_when_mpi_started_other_than_the_job_asked():
    wrong = run_mpi(2, ['-m', 'chainermn_torus.run', worker('naive_script.py')],
                    env={'CHAINERMN_TORUS_EXPECT_RANKS': '3'})
    assert wrong.returncode != 0 and 'OK' not in wrong.stdout
    # One world of two: its rank 0 says it; a world of one per process: each says it.
    assert wrong.stderr.count('MPI started 2 ranks but CHAINERMN_TORUS_EXPECT_RANKS') == 1
    alone = subprocess.run([sys.executable, '-m', 'chainermn_torus.run',
                            worker('naive_script.py')], capture_output=True, text=True,
                           cwd=ROOT, timeout=120,
                           env=dict(os.environ, CHAINERMN_TORUS_EXPECT_RANKS='2'))
    assert alone.returncode != 0 and 'PMI/launcher mismatch' in alone.stderr


def test_launcher_usage_errors_are_printed_by_rank_0_only():
    # Every rank printed argparse's usage and error: 46 lines at 2 ranks.
    proc = run_mpi(2, ['-m', 'chainermn_torus.run', '--watchdog', 'inf', worker('refuse.py')],
                   timeout=60)
    err = proc.stderr
    assert proc.returncode == 2, err[-2000:]
    assert err.count('error: argument --watchdog: must be a number of seconds >= 1 (the '
                     "watcher wakes once a second) and at most 31536000 (a year), got 'inf'"
                     ) == 1, err[-2000:]
    assert err.count('usage: python -m chainermn_torus.run') == 1, err[-2000:]
