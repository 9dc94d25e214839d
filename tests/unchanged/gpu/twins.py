"""The CPU-written twin of each GPU-written script here: the same file with its device lines
changed by hand, as a user porting it to a CPU cluster would. ``--gpu-to-cpu`` must train the
GPU-written script exactly as its twin trains (tests/launch/test_gpu_to_cpu.py,
scripts/gpu_to_cpu_table.py).

The twin's communicator is ``auto``, which is what ``--gpu-to-cpu`` makes of ``pure_nccl``
without ``--communicator``; its training iterator becomes ``--loader ours`` where the GPU
script's is a MultiprocessIterator (the run passes it: LOADER).
"""
import json
import os
import shutil

import numpy

__all__ = ['EDITS', 'LOADER', 'make', 'HERE', 'differences', 'last', 'seconds_per_iteration']

HERE = os.path.dirname(os.path.abspath(__file__))

# script -> [(the GPU-written lines, the CPU twin's)]; each must be found exactly once
EDITS = {
    'chainermn_mnist.py': [
        ("default='pure_nccl')", "default='auto')"),
        ('device = chainer.get_device(comm.intra_rank)', "device = chainer.get_device('@numpy')"),
    ],
    'chainermn_imagenet.py': [
        ("    # Check if GPU is available\n    if not chainer.cuda.available:\n"
         "        raise RuntimeError('ImageNet requires GPU support.')\n", ''),
        ("default='pure_nccl')", "default='auto')"),
        ('    device = comm.intra_rank\n', '    device = -1\n'),
        ('    chainer.cuda.get_device_from_id(device).use()  # Make the GPU current\n'
         '    model.to_gpu()\n', ''),
    ],
    'dcgan.py': [
        ("default='pure_nccl')", "default='auto')"),
        ('        device = comm.intra_rank\n', '        device = -1\n'),
    ],
    'chainer_mnist.py': [
        ('device = chainer.get_device(args.device)', "device = chainer.get_device('@numpy')"),
    ],
}

# script -> the launcher options its twin's run adds (what --gpu-to-cpu chose by itself)
LOADER = {'chainermn_imagenet.py': ['--loader', 'ours']}


def make(name, folder):
    """Write the twin of ``name`` into ``folder`` (with models.py, which it imports);
    returns its path."""
    with open(os.path.join(HERE, name)) as f:
        text = f.read()
    for gpu, cpu in EDITS[name]:
        found = text.count(gpu)
        if found != 1:
            raise ValueError(f'{name}: the GPU line {gpu!r} is there {found} times, not once')
        text = text.replace(gpu, cpu)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, 'w') as f:
        f.write(text)
    shutil.copy(os.path.join(HERE, 'models.py'), folder)
    return path


def _log(out):
    with open(os.path.join(out, 'log')) as f:
        return json.load(f)


def differences(out_a, out_b):
    """What differs between two runs' results (their LogReport logs without the times, every
    array of their final .npz files, bit for bit); [] when nothing does."""
    found = []
    strip = [[{k: v for k, v in e.items() if k != 'elapsed_time'} for e in _log(out)]
             for out in (out_a, out_b)]
    if strip[0] != strip[1]:
        found.append(f'log: {strip[0][-1:]} / {strip[1][-1:]}')
    names = [sorted(n for n in os.listdir(out) if n.endswith('.npz')) for out in (out_a, out_b)]
    if names[0] != names[1] or not names[0]:
        return found + ['model files: {} / {}'.format(*names)]
    for name in names[0]:
        with numpy.load(os.path.join(out_a, name)) as a, numpy.load(
                os.path.join(out_b, name)) as b:
            if sorted(a.files) != sorted(b.files):
                found.append(f'{name}: arrays {a.files} / {b.files}')
                continue
            for key in a.files:
                x, y = a[key], b[key]
                if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                    found.append(f'{name}: {key} differs')
    return found


def last(out):
    """The last log entry of a run."""
    return _log(out)[-1]


def seconds_per_iteration(out):
    """Wall seconds per iteration between the first and the last log entry (start-up and the
    first steps left out), or None with fewer than two entries."""
    log = [e for e in _log(out) if 'elapsed_time' in e]
    if len(log) < 2 or log[-1]['iteration'] == log[0]['iteration']:
        return None
    return (log[-1]['elapsed_time'] - log[0]['elapsed_time']) / (
        log[-1]['iteration'] - log[0]['iteration'])
