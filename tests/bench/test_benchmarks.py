"""The benchmarks run and report what they promise (tiny sizes; no timing is asserted)."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, pythonpath, run_cli, run_mpi, unlimited_env


@pytest.mark.slow
def test_optimizer_update_benchmark(tmp_path):
    out = tmp_path / 'u.json'
    proc = subprocess.run(
        [sys.executable, '-m', 'chainermn_torus.bench.optimizer_update', '--model', 'mlp',
         '--rounds', '2', '--warmup', '0', '--threads', '1', '--json', str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=pythonpath()))
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    assert set(res['rows']) == {'stock', 'fused-per-array', 'fused-flat', 'copy',
                                'same-traffic'}
    assert res['elements'] == 1796010 and res['threads']['threads'] == 1
    assert all(r['median_ms'] > 0 for r in res['rows'].values())


@pytest.mark.slow
def test_mnist_iteration_benchmark(tmp_path):
    out = tmp_path / 'm.json'
    proc = run_mpi(2, ['-m', 'chainermn_torus.bench.mnist_iteration', '--epochs', '1',
                       '--limit', '2000', '--configs', 'chainermn,rsap+fused+db',
                       '--json', str(out)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert list(res['configs']) == ['chainermn', 'rsap+fused+db'] and res['ranks'] == 2
    for r in res['configs'].values():
        assert r['iterations'] == 10 and 0 < r['test_accuracy'] <= 1
        t = r['per_iteration_s']
        assert t['total'] >= t['forward_backward'] > 0 and t['update'] > 0


@pytest.mark.parametrize('args, said', [
    (['--limit', '0'], "argument --limit: must be an integer >= 1, got '0'"),  # ran until killed
    (['--epochs', '0'], "argument --epochs: must be an integer >= 1, got '0'"),  # TypeError
    (['--seed', '-1'], "argument --seed: must be an integer from 0"),
])
def test_mnist_benchmark_refuses_counts_that_hang_or_fail_before_starting(args, said):
    proc = run_cli(['bench', 'mnist'] + args)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr


@pytest.mark.one_mpi  # a refusal said once: tests/test_refusals.py under each MPI
@pytest.mark.slow  # full tier: the fast tier's said-once refusal is test_refusals'
def test_mnist_benchmark_refuses_a_batch_larger_than_a_ranks_data():
    proc = run_mpi(2, ['-m', 'chainermn_torus.bench.mnist_iteration', '--limit', '300',
                       '--batchsize', '1000'], timeout=120)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[0].startswith('bench mnist: --batchsize 1000 is more than the 150 training '
                               'images each of the 2 rank(s) gets'), lines
    assert 'Traceback' not in proc.stderr


@pytest.mark.slow
def test_double_buffering_benchmark(tmp_path):
    out = tmp_path / 'd.json'
    proc = run_mpi(2, ['-m', 'chainermn_torus.bench.double_buffering', '--payload', 'mlp',
                       '--iterations', '4', '--block', '2', '--link-gbps', '20',
                       '--json', str(out)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert len(res) == 2 and res[0]['payload_elements'] == 1796010
    # The emulated wire time of the payload + model (2 x 7.2 MB over a 2-rank ring at
    # 20 Gbit/s: 5.7 ms) is a floor for the all-reduce.
    assert res[0]['off']['communication_s'] >= 0.0057


@pytest.mark.slow
def test_allreduce_benchmark_with_debug_rows_and_exact_twins(tmp_path):
    out = tmp_path / 'a.json'
    proc = run_mpi(2, ['-m', 'chainermn_torus.bench.allreduce', '--model', 'mlp',
                       '--rounds', '3', '--warmup', '0', '--grids', '2x1', '--variants', 'rsap',
                       '--no-auto', '--chainer-debug', '--exact', '--json', str(out)],
                   timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    rows = {r['name']: r for r in res['results']}
    # Every communicator row has its debug-mode twin, ours their exact twin; the raw MPI
    # reference row has neither.
    assert list(rows) == [
        'naive', 'allreduce_1msg', 'pure_allreduce', 'pure_allreduce/exact', 'rsap(2x1)',
        'rsap(2x1)/exact', 'naive/debug', 'pure_allreduce/debug', 'pure_allreduce/exact/debug',
        'rsap(2x1)/debug', 'rsap(2x1)/exact/debug', 'copy_bound'], list(rows)
    assert res['ranks'] == 2 and all(r['median_ms'] > 0 for r in res['results'])
    for name in ('pure_allreduce', 'rsap(2x1)'):
        exact = rows[name + '/exact']
        assert exact['ratio_to_plain'] == pytest.approx(
            exact['median_ms'] / rows[name]['median_ms'])
        assert exact['paired_ratio_to_plain'] > 0 and 'ratio_to_plain' not in rows[name]


def test_exact_accuracy_benchmark_on_real_images(tmp_path, imagenet_lists):
    out = tmp_path / 'acc.json'
    proc = subprocess.run([sys.executable, '-m', 'chainermn_torus.bench.exact_accuracy',
                           os.path.join(imagenet_lists, 'train.txt'), '--ranks', '2', '3',
                           '--batch', '2', '--crop', '40', '--json', str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=pythonpath()))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    for P in ('2', '3'):
        summary = res['by_ranks'][P]['summary']
        assert summary['arrays'] == 162 and summary['exact_farther'] == 0, summary
        assert summary['elements_above_threshold'] > 0.9 * summary['elements'], summary
    # three terms round at each float32 addition: the exact mean is closer somewhere
    assert res['by_ranks']['3']['summary']['exact_closer'] > 0
    assert 'P = 3: 162 arrays' in proc.stdout


def test_timing_wrapper_counts_seconds_and_calls_even_when_the_call_raises():
    from chainermn_torus.extensions.timing import time_calls

    class Owner:
        def work(self, fail=False):
            if fail:
                raise RuntimeError('failed')
            return 'done'

    owner, other = Owner(), Owner()
    stats = time_calls(owner, 'work', {'s': 0.0, 'n': 0}, 's', 'n')
    assert owner.work() == 'done'
    try:
        owner.work(fail=True)
    except RuntimeError:
        pass
    other.work()  # only the wrapped instance is timed
    assert stats['n'] == 2 and stats['s'] > 0


@pytest.mark.slow
def test_overlap_training_benchmark_and_report(tmp_path):
    # Every configuration in one job on real Fashion-MNIST; then the report's tables, ratios
    # and plots from its JSON.
    out = tmp_path / 'sweep-mlp-2x1-1gbit.json'
    proc = run_mpi(2, ['-m', 'chainermn_torus.bench.overlap_training', '--model', 'mlp',
                       '--iterations', '6', '--label', '1gbit', '--sleep-gbps', '20',
                       '--json', str(out)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    configs = [r['config'] for r in res['results']]
    assert configs == ['naive+stock', 'rsap', 'rsap+fp16', 'rsap+db', 'rsap+overlap',
                       'rsap+fp16+overlap'] and res['ranks'] == 2
    for r in res['results']:
        m = r['median_ms']
        assert r['iterations'] == 6 and 0 < r['test_accuracy'] <= 1
        assert m['iteration'] >= m['forward_backward'] > 0
        # The communication thread did the averaging exactly where there is one.
        assert (m['allreduce_thread'] > 0) == (r['config'] in ('rsap+db', 'rsap+overlap',
                                                               'rsap+fp16+overlap'))
    # --sleep-gbps: our all-reduce of the MLP's 7.2 MB takes at least its wire time at
    # 20 Gbit/s over a 2-rank ring (2.9 ms).
    assert res['results'][1]['median_ms']['allreduce'] >= 2.8
    proc = subprocess.run([sys.executable, '-m', 'chainermn_torus.bench.overlap_report',
                           str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=pythonpath()))
    assert proc.returncode == 0, proc.stderr
    report = (tmp_path / 'report.md').read_text()
    assert '| rsap+fp16+overlap |' in report and 'naive+stock / best' in report
    assert (tmp_path / 'iteration-vs-rate-mlp-1x2.png').stat().st_size > 1000


@pytest.mark.slow
def test_tuning_benchmark_and_table(tmp_path):
    out = tmp_path / 'tuning-mlp-mpich-p2.json'
    proc = run_mpi(2, ['-m', 'chainermn_torus.bench.tuning', '--model', 'mlp', '--reps', '2',
                       '--network', 'ofp', '--tune-dir', str(tmp_path / 'tuned'),
                       '--run-seconds', '10', '--out', str(out)], timeout=300,
                   env={'CHAINERMN_TORUS_SIMULATE': 'off'})
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    # The sweep holds every planned configuration at P = 2, each with three segment sizes,
    # and both choices are timed in it; the ratios are to its best.
    assert len(res['sweep_ms']) >= 12 and res['best'] in res['sweep_ms']
    assert res['predicted'] in res['sweep_ms'] and res['tuned'] in res['sweep_ms']
    # The ratios are each choice's median over the sweep's best (the lowest median), as
    # the file's own figures give them (not >= 1, which holds by construction).
    sweep = res['sweep_ms']
    assert sweep[res['best']] == min(sweep.values()) == pytest.approx(res['best_ms'])
    for choice in ('tuned', 'predicted'):
        assert res[choice + '_ratio'] == pytest.approx(sweep[res[choice]] / res['best_ms'])
    assert res['tuning']['calls'] >= 4 and res['cost_share'] == res['tuning']['cost_s'] / 10
    from chainermn_torus.bench.tuning_table import table
    text = table(str(tmp_path))
    assert '| mpich, P = 2 | {} '.format(res['best']) in text, text


def _needs_onednn():
    from chainermn_torus.compute.onednn import binding
    if not binding.available():
        pytest.skip('oneDNN is not installed (make setup installs onednn-cpu-gomp on '
                    'x86-64): ' + str(binding.why_unavailable()))


@pytest.mark.parametrize('model, size, kinds', [
    pytest.param('resnet50', '64', ('BatchNormalization', 'MaxPoolingND'),
                 marks=pytest.mark.slow),
    pytest.param('nin', '227', ('MaxPoolingND', 'AveragePooling2D'), marks=pytest.mark.slow),
    pytest.param('tiny', '64', ('ReLU',), marks=pytest.mark.slow)])
def test_compute_benchmark(tmp_path, model, size, kinds):
    _needs_onednn()
    out = tmp_path / 'c.json'
    proc = subprocess.run(
        [sys.executable, '-m', 'chainermn_torus.bench.compute', '--model', model, '--batch',
         '1', '--size', size, '--rounds', '1', '--threads', '1', '--json', str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=unlimited_env())
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    assert set(res['median']) == {'numpy', 'onednn'} and res['bound_seconds'] > 0
    # The bound is the best of what was measured: OpenBLAS's and oneDNN's GEMM, a large conv.
    measured = res['bound_flops_measured']
    assert set(measured) == {'openblas', 'onednn', 'conv'} and min(measured.values()) > 0
    assert res['bound_flops'] == max(measured.values())
    # --threads 1 held for every pool, OpenMP's included (numba's OpenMP layer reset it to
    # numba's count, 2 here, when only the OpenMP pool was limited).
    assert res['pools'] and set(res['pools'].values()) == {1}, res['pools']
    # Each mode ran the convolutions, and the breakdown is each function's own time.
    for mode in ('numpy', 'onednn'):
        assert res['breakdown'][mode]['Convolution2DFunction'] > 0
        assert all(res['breakdown'][mode][k] > 0 for k in kinds), res['breakdown'][mode]
        assert all(v >= -1e-3 for v in res['breakdown'][mode].values()), res['breakdown']
    _breakdown_adds_up(res)
    assert 'oneDNN is' in proc.stdout and 'faster than numpy' in proc.stdout
    # the work counted from the layers' shapes: ResNet-50's 3.8 GMAC at 224 px scale with
    # the pixels (4.1e9 x (64/224)^2 with its stem's bias and classifier)
    expected = {'resnet50': (0.30e9, 0.36e9), 'nin': (1.0e9, 1.3e9), 'tiny': (1e6, 5e6)}
    lo, hi = expected[model]
    assert lo < res['forward_macs'] < hi, res['forward_macs']


def _breakdown_adds_up(res):
    # The breakdown comes from iterations like the timed ones (in the same rounds, the same
    # type-check state): its functions and its rest make its own iteration, and that
    # iteration is the timed one plus the hook's cost, not another kind of iteration (once
    # 4x the timed one: type checks on and a mode's first call).
    assert res['breakdown_rounds'] == res['rounds']
    for mode, funcs in res['breakdown'].items():
        hooked = res['breakdown_iteration'][mode]
        assert sum(funcs.values()) <= hooked * 1.02, (mode, funcs, hooked)
        # medians of the rounds: the parts' and the whole's need not be one round's
        assert abs(sum(funcs.values()) + res['breakdown_rest'][mode] - hooked) < 0.25 * hooked
        assert res['breakdown_rest'][mode] >= -0.02 * hooked, res['breakdown_rest']


@pytest.mark.slow  # full tier (the fast tier keeps test_compute_profile_parts_add_up...)
def test_compute_breakdown_is_taken_beside_the_timed_iterations_and_adds_up(tmp_path):
    _needs_onednn()
    out = tmp_path / 'b.json'
    proc = subprocess.run(
        [sys.executable, '-m', 'chainermn_torus.bench.compute', '--model', 'tiny', '--batch',
         '2', '--size', '32', '--rounds', '2', '--threads', '1', '--json', str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=unlimited_env())
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    _breakdown_adds_up(res)
    assert res['breakdown']['onednn']['Convolution2DFunction'] > 0
    assert 'iteration under the hook' in proc.stdout and 'rest: Python' in proc.stdout


def test_a_breakdown_counting_a_function_twice_is_refused():
    from chainermn_torus.bench import compute
    with pytest.raises(SystemExit, match='counted twice'):
        compute.breakdown_of([({'A': 0.6, 'B': 0.6}, 1.0)])
    funcs, wall, rest = compute.breakdown_of([({'A': 0.2}, 1.0), ({'A': 0.4}, 2.0)])
    assert set(funcs) == {'A'} and abs(funcs['A'] - 0.3) < 1e-12
    assert wall == 1.5 and abs(rest - 1.2) < 1e-12


def test_own_times_take_the_calls_made_inside_a_backward_out_whatever_their_name():
    from chainermn_torus.bench import compute
    import chainer
    import chainer.functions as F
    import numpy

    class _Inner(chainer.FunctionNode):
        def forward(self, inputs):
            time.sleep(0.05)
            return inputs[0] * 2,

        def backward(self, indexes, grads):
            return grads[0] * 2,

    class _Outer(chainer.FunctionNode):
        def forward(self, inputs):
            return inputs[0] * 3,

        def backward(self, indexes, grads):
            time.sleep(0.01)
            return _Inner().apply(grads)[0] * 1.5,  # a backward that applies a function

    x = chainer.Variable(numpy.ones(3, numpy.float32))
    hook = compute.OwnTimes()
    t0 = time.perf_counter()
    with hook:
        y = F.sum(_Outer().apply((x,))[0])
        y.backward()
    wall = time.perf_counter() - t0
    whole = sum(t for name, t in hook.calls if name == '_Outer')
    assert whole >= 0.06  # Chainer's count: the inner call's 0.05 s inside the outer's
    assert hook.own['_Inner'] >= 0.05
    assert 0.01 <= hook.own['_Outer'] <= whole - 0.05 + 1e-6, (hook.own, whole)
    assert sum(hook.own.values()) <= wall
    assert numpy.all(x.grad == 3)  # 2 x 1.5: the inner call is part of the gradient


def test_compute_profile_parts_add_up_to_the_iteration(tmp_path):
    _needs_onednn()
    out = tmp_path / 'p.json'
    proc = subprocess.run(
        [sys.executable, '-m', 'chainermn_torus.tools.cli', 'bench', 'compute-profile',
         '--model', 'tiny', '--batch', '2', '--threads', '1', '2', '--rounds', '1',
         '--json', str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT,
        env=unlimited_env())
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    assert res['threads'] == [1, 2] and set(res['seconds']) == {'1', '2'}
    for parts in res['seconds'].values():
        # The tiny network's convolutions on oneDNN, its ReLUs on numba, its linear layer
        # on Chainer's numpy: each a row; the parts and the rest make the iteration.
        assert parts['oneDNN convolution forward'] > 0 and parts['numba relu'] > 0, parts
        assert parts['Chainer numpy LinearFunction'] > 0, parts
        counted = sum(v for k, v in parts.items() if k.startswith(
            ('oneDNN', 'numba', 'Chainer numpy')))
        # Within the iteration the parts were timed in (the others ran apart: once, beside
        # another lane's jobs, the parts of one added up to more than another's whole).
        assert 0 < counted < parts['iteration, timed by parts'], parts
        assert parts['rest: Chainer bookkeeping, calls, waits'] + max(
            0, parts['Chainer type checks']) >= 0, parts
    assert 'speed-up' in proc.stdout and 'rest: Chainer bookkeeping' in proc.stdout


@pytest.mark.slow
def test_compute_benchmark_on_the_mlp(tmp_path):
    # the MLP's linear layers stay on OpenBLAS; its ReLUs are oneDNN's
    _needs_onednn()
    out = tmp_path / 'm.json'
    proc = subprocess.run(
        [sys.executable, '-m', 'chainermn_torus.bench.compute', '--model', 'mlp', '--batch',
         '100', '--rounds', '1', '--threads', '1', '--json', str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=pythonpath()))
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    assert res['forward_macs'] == 100 * (784 * 1000 + 1000 * 1000 + 1000 * 10)
    for mode in ('numpy', 'onednn'):
        assert res['breakdown'][mode]['LinearFunction'] > 0
        assert res['breakdown'][mode]['ReLU'] > 0


@pytest.mark.slow
def test_compute_numerics_benchmark(tmp_path):
    _needs_onednn()
    out = tmp_path / 'n.json'
    proc = subprocess.run(
        [sys.executable, '-m', 'chainermn_torus.bench.compute_numerics', '--json', str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=pythonpath()))
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert {'convolution_2d', 'batch_normalization', 'max_pooling_2d',
            'local_response_normalization'} <= set(res['worst'])
    for function, (absolute, relative) in res['worst'].items():
        assert relative < 2e-5, (function, absolute, relative)  # float32 rounding, summed
    assert res['worst']['relu'] == [0.0, 0.0]  # the same comparisons, bit for bit


@pytest.mark.slow
def test_data_parallel_benchmark(tmp_path):
    _needs_onednn()
    out = tmp_path / 'dp.json'
    argv = [sys.executable, '-m', 'chainermn_torus.bench.data_parallel', '--layouts', '2x1:1',
            '--size', '64', '--iterations', '1', '--warmup', '1', '--rounds', '1',
            '--variant', 'checked:CHAINERMN_TORUS_TYPE_CHECK=on', '--json', str(out)]
    if os.environ.get('TORCH_PYTHON'):
        argv += ['--torch', os.environ['TORCH_PYTHON']]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=pythonpath()))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    [res] = json.loads(out.read_text())['layouts']
    assert {'numpy', 'onednn', 'checked'} <= set(res['median'])
    assert (res['ranks'], res['threads'], res['batch']) == (2, 1, 1)
    assert res['variants'] == {'checked': {'CHAINERMN_TORUS_TYPE_CHECK': 'on'}}
    assert res['ratios']['onednn_over_checked'] > 0
    for mode in ('numpy', 'onednn', 'checked'):
        parts = res['parts'][mode]
        assert parts['forward_backward'] > 0 and parts['update'] > 0
        assert parts['forward_backward'] + parts['update'] <= res['median'][mode] + 1e-6
    assert ('torch' in res['median']) == bool(os.environ.get('TORCH_PYTHON'))


@pytest.mark.parametrize('text, layouts', [('1x2:1', [(1, 2, 1)]),
                                           ('1X16:32,4x4:8', [(1, 16, 32), (4, 4, 8)])])
def test_data_parallel_layouts_parse(text, layouts):
    from chainermn_torus.bench import data_parallel
    assert data_parallel.parse_layouts(text) == layouts


@pytest.mark.parametrize('text', ['1x2', '0x2:1', '1x2:b', '2:8', ''])
def test_data_parallel_bad_layouts_say_the_form(text):
    from chainermn_torus.bench import data_parallel
    with pytest.raises(ValueError) as e:
        data_parallel.parse_layouts(text)
    assert 'is not RANKSxTHREADS:BATCH' in str(e.value)


def test_data_parallel_variants_parse_and_refuse():
    from chainermn_torus.bench import data_parallel
    assert data_parallel.parse_variant('checked:A=on,B=2') == ('checked', {'A': 'on', 'B': '2'})
    for bad in ('onednn:A=1', 'x', 'x:', ':A=1', 'x:A=1,B'):
        with pytest.raises(ValueError) as e:
            data_parallel.parse_variant(bad)
        assert 'is not LABEL:VAR=VALUE' in str(e.value)


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_compute_accuracy_benchmark_names_the_missing_subset(tmp_path):
    proc = subprocess.run(
        [sys.executable, '-m', 'chainermn_torus.bench.compute_accuracy', '--imagenet',
         str(tmp_path / 'none')], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    assert 'make_imagenet_subset.py --out {}'.format(tmp_path / 'none') in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get('TORCH_PYTHON'),
                    reason='PyTorch side of bench compute: set TORCH_PYTHON to a Python with '
                           'torch (a venv of its own: pip install "torch==2.13.0+cpu")')
def test_compute_benchmark_beside_pytorch(tmp_path):
    out = tmp_path / 'c.json'
    proc = subprocess.run(
        [sys.executable, '-m', 'chainermn_torus.bench.compute', '--batch', '1', '--size', '64',
         '--rounds', '1', '--threads', '1', '--torch', os.environ['TORCH_PYTHON'],
         '--json', str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=pythonpath()))
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    assert res['median']['torch'] > 0 and res['ratio_onednn_over_torch'] > 0
    assert res['torch'].startswith('torch ')


def test_every_benchmark_module_is_a_command_without_a_list(tmp_path, monkeypatch, capsys):
    from chainermn_torus import bench
    from chainermn_torus.tools import bench as command
    found = command.benchmarks()
    programs = sorted(n[:-3] for n in os.listdir(os.path.dirname(bench.__file__))
                      if n.endswith('.py') and not n.startswith('_')
                      and 'def main(' in open(os.path.join(os.path.dirname(bench.__file__),
                                                            n)).read())
    assert sorted(m.rsplit('.', 1)[1] for m in found.values()) == programs
    assert found['optimizer-update'] == 'chainermn_torus.bench.optimizer_update'
    assert 'gradient-sets' not in found  # a helper without main is no benchmark
    # a new file with a main is one more command, nothing else edited
    (tmp_path / 'new_probe.py').write_text('def main(argv):\n    return 7\n')
    (tmp_path / 'helper.py').write_text('def not_main():\n    pass\n')
    monkeypatch.setattr(bench, '__file__', str(tmp_path / '__init__.py'))
    assert command.benchmarks() == {'new-probe': 'chainermn_torus.bench.new_probe'}
    assert command.main(['nope']) == 2 and 'new-probe' in capsys.readouterr().err
