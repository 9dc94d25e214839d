"""One way to turn it on: ``CHAINERMN_TORUS_COMPUTE`` / the launcher's ``--compute`` /
``compute.use()``; what rank 0 says; what happens where oneDNN does not load; oneDNN's
OpenMP threads inside the rank's budget."""
import os
import subprocess
import sys
import textwrap

import pytest

from chainermn_torus import compute
from chainermn_torus.compute import modes, replacements
from chainermn_torus.compute.onednn import binding
from chainermn_torus.errors import ConfigError
from conftest import ROOT, assert_ok, run_mpi, worker

needs_onednn = pytest.mark.skipif(
    not binding.available(), reason='oneDNN is not installed for this Python (make setup '
    f'installs onednn-cpu-gomp on x86-64): {binding.why_unavailable()}')


@pytest.fixture
def restored():
    was = replacements.enabled()
    state = dict(binding._STATE)
    in_force = modes.applied(), modes.precision()
    yield
    binding._STATE.clear()
    binding._STATE.update(state)
    modes.set_applied(in_force[0])
    modes.set_precision(in_force[1])
    (replacements.enable if was else replacements.disable)()


def _lines(proc, text):
    return [line for line in proc.stdout.splitlines() if text in line]


@needs_onednn
@pytest.mark.parametrize('options, env, where, said', [
    pytest.param(['--compute', 'onednn'], None, 'chainermn_torus.compute.functions.convolution',
                 'compute: oneDNN 3.', marks=pytest.mark.slow),
    # auto (full tier: the fast tier's launcher test is test_run's)
    pytest.param([], None, 'chainermn_torus.compute.functions.convolution', 'compute: oneDNN 3.',
                 marks=pytest.mark.slow),
    pytest.param(['--compute', 'numpy'], None, 'chainer.functions.connection.convolution_2d',
                 "compute: Chainer's numpy (--compute=numpy)", marks=pytest.mark.slow),
    pytest.param([], {'CHAINERMN_TORUS_COMPUTE': 'numpy'},
                 'chainer.functions.connection.convolution_2d',
                 "compute: Chainer's numpy (CHAINERMN_TORUS_COMPUTE=numpy)",
                 marks=pytest.mark.slow),
])
def test_the_launcher_puts_an_unchanged_scripts_layers_where_asked(options, env, where, said):
    proc = run_mpi(2, ['-m', 'chainermn_torus.run'] + options + [worker('compute_mode.py')],
                   env=env)
    lines = assert_ok(proc, 2)
    assert all(f'conv {where} ' in line for line in lines), lines
    assert len(_lines(proc, said)) == 1, proc.stdout  # rank 0, once
    # the same numbers either way (checked closely in test_conv): a sum printed to 4 places
    assert len({line.split(' sum ')[1].split()[0] for line in lines}) == 2  # two ranks' data


@needs_onednn
@pytest.mark.slow
def test_the_same_script_gives_the_same_convolution_on_numpy_and_onednn():
    sums = []
    for mode in ('numpy', 'onednn'):
        proc = run_mpi(2, ['-m', 'chainermn_torus.run', '--compute', mode,
                           worker('compute_mode.py')])
        sums.append(sorted(line.split(' sum ')[1].split()[0] for line in assert_ok(proc, 2)))
    assert sums[0] == sums[1]


@pytest.mark.one_mpi  # a refusal said once: tests/test_refusals.py under each MPI
def test_a_bad_value_is_refused_in_one_line():
    proc = run_mpi(2, ['-m', 'chainermn_torus.run', worker('compute_mode.py')],
                   env={'CHAINERMN_TORUS_COMPUTE': 'mkl'})
    assert proc.returncode != 0
    refusal = [line for line in proc.stderr.splitlines() if 'CHAINERMN_TORUS_COMPUTE' in line]
    assert len(refusal) == 1, proc.stderr
    assert "'mkl'" in refusal[0] and 'onednn, numpy or auto' in refusal[0]
    assert 'Traceback' not in proc.stderr
    with pytest.raises(ConfigError, match='onednn, numpy or auto'):
        compute.use('mkl')


def test_where_onednn_does_not_load_auto_is_numpy_said_and_onednn_is_refused(restored):
    # The library's search as it ends where nothing loads (the state _load leaves).
    binding._STATE.clear()
    binding._STATE['why'] = ('oneDNN (libdnnl.so.3) is not installed for this Python (/x): pip '
                          'install onednn-cpu-gomp (x86-64)')
    modes.set_applied(None)
    said = []
    from chainermn_torus.runtime import report
    original = report.say
    report.say = lambda text, *a, **k: said.append(text)
    try:
        assert compute.use('auto') == 'numpy'
        assert not replacements.enabled()
        assert said == ["compute: Chainer's numpy (auto, and oneDNN (libdnnl.so.3) is not "
                        "installed for this Python (/x): pip install onednn-cpu-gomp "
                        "(x86-64))"]
        with pytest.raises(binding.DnnlError, match='pip install onednn-cpu-gomp'):
            compute.use('onednn')
    finally:
        report.say = original


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
@needs_onednn
def test_onednn_openmp_threads_follow_the_budget_and_the_loader_placement():
    code = textwrap.dedent('''
        import os
        from threadpoolctl import threadpool_info
        from chainermn_torus import compute
        from chainermn_torus.loader import apply_placement, plan_placement
        from chainermn_torus.runtime.cpu import threads
        def gomp():
            return sorted({i['num_threads'] for i in threadpool_info()
                           if 'gomp' in i['filepath']})
        threads.ensure(None, 2)        # the budget of a rank alone on two cores
        compute.use('onednn')          # loads oneDNN's OpenMP after it: ...
        threads.reapply()              # ... in the budget too (process_setup's order)
        print('budget', gomp(), len(os.sched_getaffinity(0)))
        plan = plan_placement('dedicated', loader_processes=1)
        apply_placement(plan)          # the loader's core left out
        print('placed', len(plan.compute_cpus), gomp(), len(os.sched_getaffinity(0)))
    ''')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(' ', 1) for line in out.stdout.splitlines()
                 if line.startswith(('budget', 'placed')))
    pool, allowed = lines['budget'].split()
    assert pool == '[2]'
    cpus, pool, mask = lines['placed'].split()
    assert int(cpus) < int(allowed)  # the loader's core is not the rank's any more
    assert pool == f'[{cpus}]' and mask == cpus, lines


@needs_onednn
@pytest.mark.parametrize('user, expected', [
    ({}, binding.SPIN[1]),
    pytest.param({'GOMP_SPINCOUNT': '5000'}, '5000', marks=pytest.mark.slow),
    pytest.param({'OMP_WAIT_POLICY': 'active'}, None, marks=pytest.mark.slow)])
def test_openmp_threads_do_not_spin_on_the_other_pools_cores(user, expected):
    # Set before libgomp loads (it reads the variable then), unless the user chose.
    code = textwrap.dedent('''
        import os
        from threadpoolctl import threadpool_info
        gomp = lambda: [i for i in threadpool_info() if 'gomp' in i['filepath']]
        before = len(gomp())
        from chainermn_torus import compute
        compute.use('onednn')
        print(before, len(gomp()) > 0, os.environ.get('GOMP_SPINCOUNT'))
    ''')
    env = {k: v for k, v in os.environ.items()
           if k not in ('GOMP_SPINCOUNT', 'OMP_WAIT_POLICY')}
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env=dict(env, **user))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-3:] == ['0', 'True', str(expected)]
