"""One line per refusal (issue 34): every setting of the configuration table given a bad
value, through its environment variable and through its option, ends the job with its
message once and no traceback; an unexpected exception keeps its traceback;
CHAINERMN_TORUS_DEBUG=1 shows a refusal's too.

The settings are checked twice: in this process (the parser: a ConfigError, a ValueError,
naming the source and the value), and by a real job under the launcher (a process of its
own, one rank, the abort hook installed as in any job) running an unchanged ChainerMN script
(tests/mpi_workers/refusal_script.py) that reads every setting somewhere. The multi-rank
paths (the same refusal on every rank said once, differing ones each once, a refusal of one
rank alone) run under mpiexec; the MNIST example's refusals at P = 2 are rows of the fault
matrix (tests/scripts/test_fault_matrix.py).
"""
import concurrent.futures
import os
import re
import subprocess
import sys

import pytest

from chainermn_torus import config, settings_table
from chainermn_torus.errors import ConfigError, Refusal
from conftest import ROOT, pythonpath, run_mpi, worker

SCRIPT = worker('refusal_script.py')

# key -> (bad value, environment the setting needs to be read, script arguments). A
# setting of kind 'text' takes any text: where it has no bad value, WHY_NONE says what
# happens to a wrong one instead.
BAD = {
    'grid': ('2x-1', {}, []),
    'segment_bytes': ('4', {}, []),
    'bucket_bytes': ('4MB', {'CHAINERMN_TORUS_OVERLAP': '1'}, []),
    'threads': ('two', {}, []),
    'network': ('nowhere', {}, ['auto']),
    'simulate': ('maybe', {}, ['auto']),
    'tune': ('maybe', {}, ['auto']),
    'watchdog': ('abc', {}, []),
    'watchdog_startup': ('soon', {}, []),
    'timeline': ('/proc/nope/tl', {}, []),
    'expect_ranks': ('four', {}, []),
    'quiet': ('loud', {}, []),
    'debug': ('maybe', {}, []),
    'abort_hook': ('maybe', {}, []),
    'keep_mpi_shm': ('maybe', {}, []),
    'fused': ('maybe', {}, []),
    'flush_denormals': ('maybe', {}, []),
    'double_buffering': ('maybe', {}, []),
    'overlap': ('maybe', {}, []),
    'fp16_allreduce': ('maybe', {}, []),
    'exact_sum': ('maybe', {}, []),
    'virtual_ranks': ('0', {}, []),
    'loader': ('fast', {}, []),
    'loader_eval': ('maybe', {}, []),
    'loader_processes': ('0', {}, []),
    'affinity': ('diagonal', {}, []),
    'dedicated_cores': ('-1', {}, []),
    'check_replicas': ('0', {}, []),
    'check_finite': ('maybe', {}, []),
    'trust_checkpoints': ('maybe', {}, []),
    'trust_gpu_to_cpu_paths': ('maybe', {}, []),
    'trust_out_dir': ('maybe', {}, []),
    'elastic_step': ('run:1', {}, []),
    'elastic_probe': ('run', {}, []),
    'memory_snapshots': ('0', {}, []),
    'checkpoint_interval': ('0', {}, []),
    'auto_resume': ('maybe', {}, []),
    'shuffle_seed': ('-1', {}, []),
    'type_check': ('sometimes', {}, []),
    'keep_freed_memory': ('maybe', {}, []),
    'data_parallel': ('maybe', {}, []),
    'global_batch': ('maybe', {}, []),
    'gpu_to_cpu': ('maybe', {}, []),
    'gpu_to_cpu_paths': ('/proc/nope', {}, []),
    'mpi': ('lam', {}, []),
    'compute': ('fast', {}, []),
    'precision': ('fp8', {}, []),
    'allreduce_dtype': ('int8', {}, []),
    'onednn_cache': ('0', {}, []),
    'max_image_pixels': ('0', {}, []),
    'tune_dir': ('/proc/nope', {'CHAINERMN_TORUS_TUNE': 'on'}, ['auto']),
}
WHY_NONE = {
    'simgrid_path': 'any folder; one without SimGrid is said (the simulator unavailable) and '
                    'the planner\'s choice is used',
    'mpiexec': 'any path; read by the tests and benchmark scripts when they start mpiexec',
    'checkpoint_dir': 'any folder; one that cannot be made, or is another user\'s, is refused '
                      'in one line when the script\'s Trainer starts (the checkpointer\'s '
                      'own refusals, tests/extensions/checkpoint)',
}
# Settings the package itself never reads (the tests and scripts/with_mpi.sh do): checked in
# this process only.
NOT_IN_JOBS = {'mpi': 'read by the tests and benchmark scripts only',
               'elastic_step': 'read by the snapshots in node memory, which a script asks '
                               'for (test_in_memory.py runs one under a bad value)',
               'elastic_probe': 'read by tools/elastic_node.py, the supervisor\'s probe '
                                '(tests/tools/test_elastic.py runs it under a bad value)',
               'max_image_pixels': 'read by the ImageNet example, handed to its datasets '
                                   '(a bad value: '
                                   'test_a_bad_value_is_a_config_error_naming_its_source)'}


def _check_grid(value, source):
    from chainermn_torus.communicators._grid import parse_grid
    return parse_grid(value, 4, source=source)


def _check_network(value, source):
    from chainermn_torus.planning import planner
    return planner.load_network(value)


def _check_tune_dir(value, source):
    from chainermn_torus.tuning import memory
    return memory.check_folder(value, source)


def _check_gpu_paths(value, source):
    from chainermn_torus.launch import gpu_to_cpu
    return gpu_to_cpu.paths(value, source)


def _check_timeline(value, source):
    from chainermn_torus.runtime import timeline
    return timeline.enable(value, source)


# Text settings whose value is checked where it is used: (the check, what it says).
CHECKED_WHERE_USED = {
    'grid': (_check_grid, 'CHAINERMN_TORUS_GRID.* must look like "MxN"'),
    'network': (_check_network, "network 'nowhere' is neither a preset"),
    'tune_dir': (_check_tune_dir, 'CHAINERMN_TORUS_TUNE_DIR must be a folder this user can '
                                  "write, where the tuning's choices are remembered, got "
                                  "'/proc/nope'"),
    'gpu_to_cpu_paths': (_check_gpu_paths, 'CHAINERMN_TORUS_GPU_TO_CPU_PATHS must be '
                                           "directories separated by \":\", and '/proc/nope'"),
    'timeline': (_check_timeline, "CHAINERMN_TORUS_TIMELINE '/proc/nope/tl' must be a path "
                                  'in a writable directory'),
}


def test_the_tables_cover_every_setting():
    assert set(BAD) | set(WHY_NONE) == set(settings_table.SETTINGS)
    assert not set(BAD) & set(WHY_NONE)


@pytest.mark.parametrize('key', sorted(BAD))
def test_a_bad_value_is_a_config_error_naming_its_source(key, monkeypatch):
    value = BAD[key][0]
    setting = settings_table.SETTINGS[key]
    monkeypatch.setenv(setting.env, value)
    if key in CHECKED_WHERE_USED:  # any text for the table; checked where it is used
        with pytest.raises(ConfigError, match=CHECKED_WHERE_USED[key][1]):
            CHECKED_WHERE_USED[key][0](config.resolve()[key], setting.env)
        return
    with pytest.raises(ConfigError) as e:
        config.resolve()
    assert isinstance(e.value, (Refusal, ValueError))
    assert f'{setting.env} must be' in str(e.value) and repr(value) in str(e.value)
    with pytest.raises(ConfigError, match='--{} must be'.format(key.replace('_', '-'))):
        config.resolve({key: (value, '--' + key.replace('_', '-'))})


def _job(env=None, args=(), launcher=()):
    """A one-rank job under the launcher: (exit code, lines printed)."""
    full = dict(os.environ, CHAINERMN_TORUS_QUIET='1', PYTHONPATH=pythonpath())
    full.update(env or {})
    proc = subprocess.run([sys.executable, '-m', 'chainermn_torus.run'] + list(launcher)
                          + [SCRIPT] + list(args), capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=full)
    return proc.returncode, [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]


def _options():
    """(key, launcher arguments) for every setting that has an option: the launcher's
    table, and --grid, --threads, --segment-size of every entry point (command_line.add_arguments).
    A flag takes no value, so it has no bad one."""
    out = []
    for key, setting in settings_table.SETTINGS.items():
        if key not in BAD or setting.kind == 'flag':
            continue
        if setting.launcher is not None or key in ('grid', 'threads', 'segment_bytes'):
            name = '--segment-size' if key == 'segment_bytes' else \
                '--' + key.replace('_', '-')
            out.append((key, [name, BAD[key][0]]))
    return out


def _argparse_refuses(option):
    """The launcher's parser on ``option`` in this process: its error's last line, or None
    where the parser takes the value (a later check refuses it: a job)."""
    import contextlib
    import io
    from chainermn_torus import run
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            run.build_parser().parse_args(option + [SCRIPT])
    except SystemExit as e:
        assert e.code == 2
        return err.getvalue().strip().splitlines()[-1]
    return None


@pytest.mark.slow  # 32 jobs of one rank, four at a time: about 12 s on 2 cores
def test_every_setting_refused_in_one_line_through_its_variable_and_its_option():
    jobs, parsed = [], []
    for key, (value, needs, args) in sorted(BAD.items()):
        if key in NOT_IN_JOBS:
            continue
        env = dict(needs, **{settings_table.SETTINGS[key].env: value})
        if key == 'quiet':
            env = dict(needs, CHAINERMN_TORUS_QUIET=value)
        jobs.append((f'{settings_table.SETTINGS[key].env} ({value})', key, 'variable',
                     dict(env=env, args=args)))
    for key, option in _options():
        _, needs, args = BAD[key]
        line = _argparse_refuses(option)
        if line is None:  # the parser takes it: the job refuses it
            jobs.append((' '.join(option), key, 'option', dict(env=needs, args=args,
                                                               launcher=option)))
        else:  # argparse's own line, as for every flag of the launcher
            parsed.append((option, line))
    assert all(f'argument {o[0]}: must be' in line and repr(o[1]) in line
               for o, line in parsed), parsed
    assert len(parsed) + len(jobs) > len(BAD)  # every variable, and every option
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda job: _job(**job[3]), jobs))
    bad = []
    for (label, key, source, _), (code, lines) in zip(jobs, results):
        text = '\n'.join(lines)
        value = BAD[key][0]
        if code == 0 or 'Traceback' in text or value not in text:
            bad.append((label, code, text[-600:]))
        elif source == 'variable' and len(lines) != 1:
            bad.append((label, 'lines', text[-600:]))
        elif source == 'option' and len(lines) != 1:
            bad.append((label, 'lines', text[-600:]))
    assert not bad, '\n\n'.join('{}: {}\n{}'.format(*b) for b in bad)


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_debug_shows_the_traceback_of_a_refusal():
    code, lines = _job(env={'CHAINERMN_TORUS_THREADS': 'two', 'CHAINERMN_TORUS_DEBUG': '1'})
    assert code != 0 and any(line.startswith('Traceback') for line in lines), lines
    assert lines[-1].endswith('CHAINERMN_TORUS_THREADS must be a thread count >= 1 and <= 65536 '
                              "(or off), got 'two'")


@pytest.mark.parametrize('mode, expected', [
    # Every rank refuses the same value: one line, from rank 0.
    ('same', ['chainermn_torus: X must be 1, got 2']),
    # Two messages: each once, the other one with the rank that said it first.
    pytest.param('differ', ['chainermn_torus: rank-specific 0',
                            'chainermn_torus: rank 1 (HOST): rank-specific 1'],
                 marks=pytest.mark.slow),
    # Rank 2 alone (the others wait in a barrier): its line, with its rank, after the wait.
    pytest.param('one', ['chainermn_torus: rank 2 (HOST): only rank 2'],
                 marks=pytest.mark.slow),
])
def test_a_refusal_on_several_ranks_is_said_once(mode, expected):
    proc = run_mpi(3, [worker('refuse.py'), mode], timeout=120,
                   env={'CHAINERMN_TORUS_QUIET': '1'})  # the refusals' lines alone
    ours = [line for line in (proc.stdout + proc.stderr).splitlines()
            if line.startswith('chainermn_torus')]
    host = os.uname().nodename
    assert proc.returncode != 0 and 'Traceback' not in proc.stderr, proc.stderr
    assert sorted(ours) == sorted(e.replace('HOST', host) for e in expected), ours


@pytest.mark.slow  # full tier: the fast tier's said-once check is the refusal's
@pytest.mark.parametrize('mode', ['in-trainer', 'memory'])
def test_an_exception_is_said_once_with_its_traceback_and_a_message(mode):
    # From inside a Trainer: Chainer's loop printed its traceback, then the hook again. A
    # MemoryError of Python's allocator: the banner ended in 'MemoryError: '.
    proc = run_mpi(2, [worker('refuse.py'), mode], timeout=120)
    err = proc.stdout + proc.stderr
    assert proc.returncode != 0 and err.count('Traceback (most recent call last)') == 1, err
    banner = [line for line in err.splitlines() if 'Uncaught exception on rank 1' in line]
    assert len(banner) == 1, err
    if mode == 'memory':
        assert re.search(r'MemoryError: this process could not get more memory \(.* free on ',
                         banner[0]), banner
    else:
        assert banner[0].endswith("KeyError: 'not a refusal'"), banner


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_an_unexpected_exception_keeps_its_traceback():
    proc = run_mpi(2, [worker('refuse.py'), 'unexpected'], timeout=120)
    assert proc.returncode != 0
    assert 'Traceback' in proc.stderr and 'KeyError' in proc.stderr, proc.stderr[-2000:]
    assert 'Uncaught exception on rank' in proc.stdout + proc.stderr
