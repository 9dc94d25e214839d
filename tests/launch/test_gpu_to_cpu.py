"""``--gpu-to-cpu``: scripts written for GPUs run on CPU unchanged.

The scripts are tests/unchanged/gpu/'s, in the shapes GPU-written scripts have. In this
process (the mapping installed and undone around each test): every GPU device request
becomes the CPU, wherever it is made; what the script reads of CUDA and CuPy is bound into
its own modules, so code that is not the script's (a library's ``import cupy``, ChainerMN's
among them) still sees a CPU-only machine; no frame is read on a training step; what cannot
be mapped is one line naming the file and line, and without the option the first GPU request
is one line naming it. In real MPI jobs: each shape trains with the option and equals its
CPU-written twin bit for bit.
"""
import importlib
import json
import os
import runpy
import sys
import types

import chainer
import pytest
from chainer import backend
from chainer.backends import cuda

from chainermn_torus import _registry, settings_table
from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from chainermn_torus.errors import Unsupported
from chainermn_torus.launch import gpu_to_cpu
from chainermn_torus.launch.gpu_to_cpu import scan
from chainermn_torus.runtime.chainer_glue import patches
from conftest import ROOT

GPU = os.path.join(ROOT, 'tests', 'unchanged', 'gpu')
sys.path.insert(0, GPU)
import twins  # noqa: E402 (tests/unchanged/gpu/twins.py)
import unmappable  # noqa: E402
import package_probes  # noqa: E402

OPTION = '--gpu-to-cpu'


_SAID = []  # the test's installed launch: run_script gives its script the script's builtins


@pytest.fixture
def installed():
    """install(script, mapping) for one test; everything undone after it."""
    saved = list(sys.argv)

    def install(script, mapping=True, extra=None):
        _SAID[:] = [gpu_to_cpu.install(script, mapping, rank=0, extra=extra)]
        return _SAID[0]

    yield install
    gpu_to_cpu.uninstall()
    _SAID[:] = []
    sys.argv[:] = saved


def run_script(name, *args, folder=GPU):
    sys.argv[:] = [name] + list(args)
    return runpy.run_path(os.path.join(folder, name), run_name='__main__',
                          init_globals=gpu_to_cpu.globals_for_script(_SAID[0]))


def test_every_device_call_of_a_gpu_script_is_the_cpu_and_only_the_script_sees_a_gpu(
        installed, tmp_path):
    other = tmp_path / 'other'
    other.mkdir()
    (other / 'other_reader.py').write_text(
        'from chainer.backends import cuda\n\n\ndef read():\n'
        "    return {'available': cuda.available, 'cupy': type(cuda.cupy).__name__}\n")
    said = installed(os.path.join(GPU, 'device_api.py'))
    out = tmp_path / 'seen.json'
    run_script('device_api.py', str(out), '--other', str(other))
    seen = json.loads(out.read_text())
    for key in ('get_device(0)', '@cupy:1', 'cuda:0', 'numpy stays', 'Link.device',
                'get_device_from_array'):
        assert seen[key] == '@numpy', (key, seen)
    for key in ('W module', 'to_gpu module', 'concat_examples', 'cupy.zeros'):
        assert seen[key] == 'numpy', (key, seen)
    assert seen['available'] is True and seen['backends.cuda.available'] is True
    assert seen['import cupy'] == [0, 1, 2]
    assert seen['to_cpu'] == seen['cupy.asnumpy']
    assert seen['xp'] == seen['get_array_module'] == seen['cupy.get_array_module'] == 'numpy'
    # a module outside the script's directory reads Chainer's own answer
    assert seen['other'] == {'available': False, 'cupy': 'object'}, seen
    # and so does this test file, and Chainer itself; a device request is the CPU wherever
    # it is made (the node has no GPU)
    assert cuda.available is False and type(cuda) is types.ModuleType
    assert str(chainer.get_device(0)) == '@numpy'
    assert backend.get_array_module(cuda.to_cpu([1.0])).__name__ == 'numpy'
    # a library's import cupy after the script's fails as on any CPU node
    assert 'cupy' not in sys.modules
    with pytest.raises(ImportError):
        importlib.import_module('cupy')
    # each mapped call said once, in the order the script made them
    assert said.names[:4] == ['import cupy', 'chainer.cuda.check_cuda_available',
                              'chainer.cuda.available', 'chainer.cuda.Device'], said.names
    assert {'chainer.get_device', 'Link.to_gpu', 'chainer.cuda.to_gpu',
            'chainer.cuda.cupy'} <= set(said.names)


def test_chainers_final_marker_stays_on_what_is_replaced(installed):
    # Before: the replaced DeviceResident.to_gpu lost chainer.utils.final's marker, so a Link
    # overriding to_gpu no longer got Chainer's warning (Chainer v7.8.1's own
    # test_link.py::TestLinkOverrideToDeviceMethods::test_to_gpu_override).
    installed(os.path.join(GPU, 'device_api.py'))
    assert chainer.link.Link.to_gpu is not package_probes.original_of(
        chainer.device_resident.DeviceResident, 'to_gpu')
    with pytest.warns(DeprecationWarning, match="Overriding method 'to_gpu'"):
        class Mine(chainer.Link):
            def to_gpu(self, device=None):
                return self


def test_uninstall_leaves_chainer_as_it_was(installed):
    before = (chainer.get_device, backend.get_device, cuda.get_device_from_id, cuda.to_gpu,
              chainer.link.Link.to_gpu, list(sys.meta_path))
    installed(os.path.join(GPU, 'device_api.py'))
    assert len(sys.meta_path) == len(before[-1]) + 1
    gpu_to_cpu.uninstall()
    assert (chainer.get_device, backend.get_device, cuda.get_device_from_id, cuda.to_gpu,
            chainer.link.Link.to_gpu, list(sys.meta_path)) == before
    assert not patches.applied(group='gpu to cpu')
    assert 'cupy' not in sys.modules and _registry.policy().rename is None


def test_chainermns_own_import_of_cupy_is_not_the_scripts(installed, tmp_path):
    # Before: ChainerMN's lazy import inside create_communicator counted as the script's
    # (the innermost frame not a library's), so it got the stand-in, _cupy_avail became
    # True and every ChainerMN script logged a false "import cupy" line.
    script = tmp_path / 'train.py'
    script.write_text(
        'import importlib, sys\n'
        "name = 'chainermn.communicators._memory_utility'\n"
        'kept = sys.modules.pop(name, None)\n'
        'try:\n'
        '    CUPY_AVAIL = importlib.import_module(name)._cupy_avail\n'
        'finally:\n'
        '    sys.modules[name] = kept\n')
    said = installed(str(script))
    assert run_script('train.py', folder=str(tmp_path))['CUPY_AVAIL'] is False
    assert 'import cupy' not in said.names and 'cupy' not in sys.modules


def test_a_helper_elsewhere_is_the_scripts_where_the_setting_names_its_directory(
        installed, tmp_path):
    (tmp_path / 'job').mkdir()
    (tmp_path / 'helpers').mkdir()
    (tmp_path / 'helpers' / 'gpu_helper.py').write_text(
        'import cupy\nfrom chainer import cuda\n\n\ndef read():\n'
        '    return cupy.asnumpy(cupy.arange(2)).tolist(), cuda.available\n')
    (tmp_path / 'job' / 'train.py').write_text(
        'import sys\nsys.path.insert(0, {!r})\nimport gpu_helper\nSEEN = gpu_helper.read()\n'
        .format(str(tmp_path / 'helpers')))
    try:
        installed(str(tmp_path / 'job' / 'train.py'))
        with pytest.raises(ModuleNotFoundError) as e:
            run_script('train.py', folder=str(tmp_path / 'job'))
        line = gpu_to_cpu.explain(_SAID[0], e.value)
        assert line.startswith(str(tmp_path / 'helpers' / 'gpu_helper.py') + ':1: import '
                               "cupy in a module outside the script's directory"), line
        assert 'CHAINERMN_TORUS_GPU_TO_CPU_PATHS' in line and '\n' not in line
        gpu_to_cpu.uninstall()
        sys.modules.pop('gpu_helper', None)
        installed(str(tmp_path / 'job' / 'train.py'), extra=str(tmp_path / 'helpers'))
        assert run_script('train.py', folder=str(tmp_path / 'job'))['SEEN'] == ([0, 1], True)
        listed = '\n'.join(gpu_to_cpu.listing(str(tmp_path / 'job' / 'train.py'),
                                              gpu_to_cpu.paths(str(tmp_path / 'helpers'))))
        assert 'gpu_helper.py:1  import cupy' in listed, listed
    finally:
        sys.modules.pop('gpu_helper', None)


@pytest.mark.parametrize('mapping', [True, False])
def test_updaters_of_several_gpus_are_refused_before_chainers_constructor(installed,
                                                                         tmp_path, mapping):
    script = tmp_path / 'multi.py'
    script.write_text(
        'import sys\nimport chainer, chainer.links as L, numpy\n'
        'from chainer import training\n'
        'opt = chainer.optimizers.SGD().setup(L.Classifier(L.Linear(4, 3)))\n'
        'data = chainer.datasets.TupleDataset(numpy.ones((8, 4), numpy.float32), '
        'numpy.zeros(8, numpy.int32))\n'
        'it = chainer.iterators.SerialIterator(data, 4)\n'
        'if sys.argv[1] == "cpu":\n'
        "    training.updaters.ParallelUpdater(it, opt, devices={'main': '@numpy'})\n"
        'elif sys.argv[1] == "gpus":\n'
        "    training.updaters.ParallelUpdater(it, opt, devices={'main': 0, 'second': 1})\n"
        'else:\n'
        '    training.updaters.MultiprocessParallelUpdater([it, it], opt, devices=[0, 1])\n')
    installed(str(script), mapping=mapping)
    run_script('multi.py', 'cpu', folder=str(tmp_path))  # CPU devices: Chainer's own
    for use, line, name in (('gpus', 10, 'ParallelUpdater'),
                            ('nccl', 12, 'MultiprocessParallelUpdater')):
        with pytest.raises(Unsupported) as e:
            run_script('multi.py', use, folder=str(tmp_path))
        text = str(e.value)
        assert f'multi.py:{line} uses {name}, one process driving several GPUs' \
            in text and '--data-parallel' in text and '\n' not in text, text
    listed = [line for line in gpu_to_cpu.listing(str(script)) if 'REFUSED' in line]
    assert len(listed) == 2 and all('several GPUs' in ln for ln in listed), listed  # not @numpy's


def test_a_training_step_reads_no_frame(installed):
    # The decision is made at install: a step of a GPU script's updater (device=0 mapped)
    # walks no stack, and reads cuda.available through Chainer's own module.
    import chainer.links as L
    import numpy
    installed(os.path.join(GPU, 'device_api.py'))
    model = L.Classifier(L.Linear(784, 10))
    optimizer = chainer.optimizers.Adam().setup(model)
    data = chainer.datasets.TupleDataset(numpy.ones((20, 784), numpy.float32),
                                         numpy.zeros(20, numpy.int32))
    updater = chainer.training.updaters.StandardUpdater(
        chainer.iterators.SerialIterator(data, 10), optimizer, device=0)
    updater.update()  # the first: the mapping said, the optimizer's state made
    frames = []

    def profile(frame, event, arg):
        if event == 'c_call' and arg is sys._getframe:
            frames.append(frame.f_code.co_filename)
    sys.setprofile(profile)
    try:
        updater.update()
    finally:
        sys.setprofile(None)
    assert frames == [] and 'chainer.get_device' in _SAID[0].names


def _line_of(use):
    """The line of unmappable.py that makes ``use`` (marked ``<- refused`` there)."""
    with open(unmappable.__file__) as f:
        lines = f.read().splitlines()
    branch = next(i for i, ln in enumerate(lines) if (f"'{use}'" in ln and 'use ==' in ln)
                  or (use.startswith('import') and ln.strip() == 'else:'))
    return next(i for i in range(branch, len(lines)) if '<- refused' in lines[i]) + 1


@pytest.mark.parametrize('use', unmappable.USES)
def test_what_cannot_be_mapped_is_one_line_naming_the_call_file_and_line(installed, use):
    installed(unmappable.__file__)
    with pytest.raises(Unsupported) as e:
        run_script('unmappable.py', '--use', use)
    text = str(e.value)
    assert '\n' not in text
    assert f'unmappable.py:{_line_of(use)}' in text, text
    name = use.replace('import ', '').replace('cuda.', 'chainer.cuda.', 1) \
        if use.startswith('cuda.') else use.replace('import ', '')
    assert name in text, text
    why = 'raw CUDA kernel' if 'Kernel' in use or use.startswith('cuda.') else \
        'NCCL used directly' if 'nccl' in use else 'CuPy-only'
    assert why in text, text


@pytest.mark.parametrize('args,call', [
    (['chainer_mnist.py', '--device', '0'], "chainer.get_device('0')"),
    (['chainer_mnist.py', '--gpu', '1'], 'chainer.get_device(1)'),
])
def test_without_the_option_a_gpu_request_is_one_line_naming_it(installed, args, call):
    installed(os.path.join(GPU, args[0]), mapping=False)
    with pytest.raises(Unsupported) as e:
        run_script(*args)
    text = str(e.value)
    assert text.startswith(f'chainer_mnist.py:51: {call} asks for a GPU'), text
    assert OPTION in text and '\n' not in text


def test_without_the_option_a_gpu_communicator_name_is_one_line_naming_it(installed):
    said = installed(os.path.join(GPU, 'dcgan.py'), mapping=False)
    try:
        _registry.install(_registry.Policy(rename=said.rename))  # as the launch does
        with pytest.raises(Unsupported) as e:
            _registry.create_communicator('pure_nccl')  # refused before MPI starts
    finally:
        _registry.install(None)
    assert "create_communicator('pure_nccl') asks for ChainerMN's GPU communicator" in \
        str(e.value) and OPTION in str(e.value) and '--communicator NAME' in str(e.value)


def test_with_the_option_gpu_communicator_names_become_auto(installed):
    policy = _registry.Policy(rename=installed(os.path.join(GPU, 'dcgan.py')).rename)
    for name in gpu_to_cpu.GPU_COMMUNICATORS:
        assert policy.choose(name, {}, _registry.names()) == ('auto', {})
    assert policy.choose('naive', {}, _registry.names()) == ('naive', {})


def test_a_gpu_script_stopping_itself_is_one_line_naming_the_option(installed, tmp_path):
    said = installed(os.path.join(GPU, 'chainermn_imagenet.py'), mapping=False)
    with pytest.raises(RuntimeError) as e:
        run_script('chainermn_imagenet.py', 'train.txt', 'val.txt')
    line = gpu_to_cpu.explain(said, e.value)
    assert line.startswith('chainermn_imagenet.py:76: RuntimeError: ImageNet requires GPU '
                           'support'), line
    assert 'chainer.cuda.available at chainermn_imagenet.py:75' in line and OPTION in line
    # import cupy, missing on a CPU node
    script = tmp_path / 'imports_cupy.py'
    script.write_text('import chainer\nimport cupy\n')
    said = gpu_to_cpu.install(str(script), False, 0)
    with pytest.raises(ModuleNotFoundError) as e:
        runpy.run_path(str(script), run_name='__main__')
    line = gpu_to_cpu.explain(said, e.value)
    assert line.startswith("imports_cupy.py:2: ModuleNotFoundError: No module named 'cupy'")
    assert 'import cupy at imports_cupy.py:2' in line, line
    # a CPU script's error keeps its traceback; and with the option nothing is explained
    cpu = os.path.join(ROOT, 'tests', 'unchanged', 'chainermn_mnist.py')
    assert gpu_to_cpu.explain(gpu_to_cpu.install(cpu, False, 0), RuntimeError('x')) is None
    assert gpu_to_cpu.explain(gpu_to_cpu.install(cpu, True, 0), RuntimeError('x')) is None


def test_gpu_calls_lists_each_call_with_what_it_becomes():
    found = {(f.name, f.line) for f in scan.gpu_calls(os.path.join(GPU, 'chainermn_imagenet.py'))
             if f.certain}
    assert found == {('chainer.cuda.available', 75), ('chainermn.create_communicator', 90),
                     ('chainer.cuda.get_device_from_id', 119), ('Link.to_gpu', 120)}, found
    refused = [f.name for f in scan.gpu_calls(unmappable.__file__) if f.refused]
    assert {'chainer.cuda.elementwise', 'chainer.cuda.reduce', 'chainer.cuda.raw',
            'cupy.ElementwiseKernel', 'cupy.RawKernel', 'cupy.*', 'chainermn.nccl',
            'cupy.cuda.nccl'} == set(refused), refused
    lines = gpu_to_cpu.listing(os.path.join(GPU, 'dcgan.py'))
    assert lines[0].endswith('dcgan.py: 4 GPU call(s), and 1 device(s) in variables; under '
                             '--gpu-to-cpu:'), lines
    assert any('dcgan.py:126  gen.to_gpu  -> ' in line for line in lines), lines
    # a CPU-written script: nothing to map
    cpu = gpu_to_cpu.listing(os.path.join(ROOT, 'tests', 'unchanged', 'chainermn_mnist.py'))
    assert cpu[0].endswith('no GPU call found: it runs on CPU without --gpu-to-cpu'), cpu


def test_the_option_is_a_setting_with_its_variable():
    setting = settings_table.SETTINGS['gpu_to_cpu']
    assert (setting.env, setting.kind, setting.default, setting.launcher) == (
        'CHAINERMN_TORUS_GPU_TO_CPU', 'flag', False, 'script')


def test_a_twin_is_its_script_with_each_device_line_changed_once(tmp_path):
    for name in twins.EDITS:
        with open(twins.make(name, str(tmp_path / 'twins'))) as f:
            twin = f.read()
        for gpu, cpu in twins.EDITS[name]:
            assert gpu not in twin and (cpu in twin), (name, gpu)
        assert "'pure_nccl'" not in twin  # the twin asks for no GPU communicator
    saved = list(twins.EDITS['dcgan.py'])
    twins.EDITS['dcgan.py'].append(('a line the script does not have', ''))
    try:
        with pytest.raises(ValueError, match='there 0 times, not once'):
            twins.make('dcgan.py', str(tmp_path / 'bad'))
    finally:
        twins.EDITS['dcgan.py'][:] = saved


def test_differences_finds_a_changed_array_and_a_changed_loss(tmp_path):
    import numpy
    for name, value, loss in (('a', 1.0, 0.5), ('b', 1.0, 0.5), ('c', 1.5, 0.5),
                              ('d', 1.0, 0.25)):
        out = tmp_path / name
        out.mkdir()
        numpy.savez(str(out / 'model_final.npz'), W=numpy.full(3, value, numpy.float32))
        (out / 'log').write_text(json.dumps([{'iteration': 10, 'main/loss': loss,
                                              'elapsed_time': value}]))
    assert twins.differences(str(tmp_path / 'a'), str(tmp_path / 'b')) == []
    assert twins.differences(str(tmp_path / 'a'), str(tmp_path / 'c')) == [
        'model_final.npz: W differs']
    assert twins.differences(str(tmp_path / 'a'), str(tmp_path / 'd'))[0].startswith('log:')


# --- real ranks: each shape trains with the option exactly as its CPU-written twin --------

def _mnist_args(out, *extra):
    return ['--epoch', '1', '--limit', '2000', '--unit', '100', '--out', out] + list(extra)


# shape -> (ranks, launcher options, the script's arguments, the lines said on rank 0). The
# ChainerMN MNIST shape, and every shape at 1-4 ranks, are scripts/gpu_to_cpu_table.py's
# (docs/measurements/gpu-to-cpu.md): here one job pair per kind of script, within the
# suite's 10 minutes.
SHAPES = {
    'chainermn_imagenet.py': (2, [], lambda out, lists: [
        os.path.join(lists, 'train.txt'), os.path.join(lists, 'val.txt'), '--root', lists,
        '--mean', os.path.join(lists, 'mean.npy'), '--arch', 'tiny', '--iterations', '8',
        '--batchsize', '8', '--val_batchsize', '8', '--seed', '1', '--out', out], [
        "create_communicator('pure_nccl') -> auto on P = 2",
        '--gpu-to-cpu: chainer.cuda.available (chainermn_imagenet.py:75) -> True',
        '--gpu-to-cpu: chainer.cuda.get_device_from_id(0) (chainermn_imagenet.py:119)',
        '--gpu-to-cpu: Tiny.to_gpu() (chainermn_imagenet.py:120)',
        '--gpu-to-cpu: MultiprocessIterator(n_processes=2, batch_size=8) -> LoaderIterator']),
    'dcgan.py': (4, ['--communicator', 'rsap'], lambda out, lists: [
        '--gpu', '--epoch', '1', '--limit', '800', '--batchsize', '20', '--out', out], [
        '--gpu-to-cpu: chainer.cuda.get_device_from_id(0) (dcgan.py:125)',
        '--gpu-to-cpu: Generator.to_gpu() (dcgan.py:126)',
        '--gpu-to-cpu: chainer.get_device(0) (dcgan.py:71)']),
    'chainer_mnist.py': (2, ['--data-parallel'], lambda out, lists: _mnist_args(
        out, '--device', '0'), [
        "--gpu-to-cpu: chainer.get_device('0') (chainer_mnist.py:51) -> '@numpy'",
        "--data-parallel: chainer.serializers.save_npz("]),
}
# At 3 ranks and more both runs name a communicator: auto measures the network at start-up
# and may choose another algorithm in each run, whose sums differ in the last bit (DCGAN at
# 3 ranks, 1e-7); at 2 ranks every order of one sum gives the same bits.
# The ImageNet shape at 2 ranks keeps auto: create_communicator('pure_nccl') -> auto.


def _launch(nprocs, options, script, args, dataset_root, env=None):
    from conftest import run_mpi
    return run_mpi(nprocs, ['-m', 'chainermn_torus.run'] + options + [script] + args,
                   timeout=300, env=dict(env or {}, CHAINER_DATASET_ROOT=dataset_root))


@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed (make setup '
                           'installs it)')
# Full tier only (the mapping is Python's, the same under every MPI): the in-process tests
# above are the fast tier's.
@pytest.mark.slow
@pytest.mark.parametrize('shape', sorted(SHAPES))
def test_a_gpu_script_trains_with_the_option_as_its_cpu_twin_bit_for_bit(
        shape, tmp_path, dataset_root, imagenet_lists):
    nprocs, options, args, said = SHAPES[shape]
    gpu, cpu = str(tmp_path / 'gpu'), str(tmp_path / 'cpu')
    # the option as its variable for one shape, as a job script would set it
    by_variable = shape == 'dcgan.py'
    proc = _launch(nprocs, options + ([] if by_variable else [OPTION]),
                   os.path.join(GPU, shape), args(gpu, imagenet_lists), dataset_root,
                   env={'CHAINERMN_TORUS_GPU_TO_CPU': '1'} if by_variable else None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in said:  # once, on rank 0 (counted in the whole output: the script's own
        # prints of several ranks share the pipe, and a line may follow another's unended)
        assert proc.stdout.count(line) == 1, (line, proc.stdout[-3000:])
    twin = twins.make(shape, str(tmp_path / 'twin'))
    proc = _launch(nprocs, options + twins.LOADER.get(shape, []), twin,
                   args(cpu, imagenet_lists), dataset_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert twins.differences(gpu, cpu) == []
    final = twins.last(gpu)
    if 'main/accuracy' in final:
        assert final['main/accuracy'] > 0.1 or shape == 'chainermn_imagenet.py', final
    else:
        assert final['gen/loss'] > 0 and final['dis/loss'] > 0, final


@pytest.mark.one_mpi  # a refusal said once: tests/test_refusals.py under each MPI
@pytest.mark.slow  # full tier: the in-process tests above are the fast tier's
@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed (make setup '
                           'installs it)')
def test_without_the_option_a_gpu_job_ends_with_one_line_naming_it(tmp_path, dataset_root,
                                                                   imagenet_lists):
    shape = SHAPES['chainermn_imagenet.py']
    proc = _launch(2, [], os.path.join(GPU, 'chainermn_imagenet.py'),
                   shape[2](str(tmp_path / 'out'), imagenet_lists), dataset_root)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if 'ImageNet requires GPU support' in line]
    assert len(lines) == 1, proc.stderr[-3000:]  # said once, for both ranks
    assert OPTION in lines[0] and 'chainermn_imagenet.py:76' in lines[0], lines
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]


def test_the_docs_name_every_mapped_and_refused_call():
    from chainermn_torus.launch.gpu_to_cpu import calls
    with open(os.path.join(ROOT, 'docs', 'cluster.md')) as f:
        text = f.read()
    start = text.index('### Scripts written for GPUs')
    section = text[start:text.index('\n## ', start)]
    for name in list(calls.MAPPED) + [n for n in calls.REFUSED if n != 'cupy.*']:
        assert name.rsplit('.', 1)[-1].replace('import ', '') in section, name
    for name in gpu_to_cpu.GPU_COMMUNICATORS:
        assert f'`{name}`' in section, name
