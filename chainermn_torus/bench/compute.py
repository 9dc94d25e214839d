"""``bench compute``: a network's forward + backward on Chainer's numpy and on oneDNN, in
one run.

    python -m chainermn_torus.bench.compute [--model resnet50|nin|tiny|mlp] [--batch 8]
        [--size PIXELS] [--threads 2] [--rounds 3] [--torch PYTHON] [--json OUT]

The networks: Chainer's ResNet50Layers (224 px), Network in Network as Chainer's ImageNet
example builds it (227 px) and the ImageNet example's tiny network (64 px), 1000 classes;
the MNIST MLP (784-1000-1000-10: its linear layers stay on OpenBLAS, so it shows what
running beside oneDNN's OpenMP threads costs them) (``chainermn_torus.models``).

Each round times one iteration (forward, loss, backward; Chainer's type checks as the
multi-node optimizer has them in training, ``CHAINERMN_TORUS_TYPE_CHECK``: by default
checked in the warm-up only) on numpy, then on oneDNN (``chainermn_torus.compute``), then,
with ``--torch`` naming a Python that has PyTorch (a venv of its own), the same network in
PyTorch (``bench/torch_resnet50.py``, a process that waits for each round), after a warm-up
each, so all see the same machine; the table gives the medians and the ratios. A breakdown
by Chainer function (timed as its ``TimerHook`` does, each call less the calls inside it,
in an iteration beside each timed one, in the same rounds and type-check state; the
functions and the rest add up to that iteration) shows where each spends its time, and the
machine's bound puts both beside what the cores can do: the network's floating-point work
(forward + backward about 3x the forward's multiply-adds x 2, the multiply-adds counted
from the convolutions' and linear layers' shapes in one forward) over the best FLOP/s
measured in the same run at the same threads: a 2048 x 2048 float32 matrix product by
OpenBLAS and by oneDNN's own GEMM, and a large 3 x 3 convolution on oneDNN (an OpenBLAS
product alone was no bound: PyTorch ran at 0.44x of it on a 16-core machine). PyTorch's
side exists for ResNet-50.
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import chainer
import chainer.functions as F
import numpy

from chainermn_torus import command_line, compute
from chainermn_torus.compute import precision, replacements
from chainermn_torus.compute.onednn import binding, conv, copies, linear
from chainermn_torus.models import MLP, NIN, ResNet50, TinyNet
from chainermn_torus.optimizers import type_checks
from chainermn_torus.runtime.cpu import allocation, threads

__all__ = ['main', 'problem', 'MODELS', 'MODES']

MODES = ('numpy', 'onednn')  # the rows every run has; --precision bf16 adds onednn-bf16

# name -> (the network, its image size, its classes); the MNIST MLP's input is the 28 x 28
# image flattened
MODELS = {'resnet50': (lambda: ResNet50(1000), 224, 1000),
          'nin': (lambda: NIN(1000), NIN.insize, 1000), 'tiny': (lambda: TinyNet(1000), 64, 1000),
          'mlp': (lambda: MLP(1000, 10), 28, 10)}
class OwnTimes(chainer.FunctionHook):
    """Each Chainer function's own seconds (``own``), timed around every forward and backward
    call as Chainer's TimerHook times them, less the calls made inside it, as a backward that
    applies other functions makes them (convolution's, Mean's). The nesting is read from the
    hook's own stack, not from a list of names: a name missing from such a list counted its
    inner calls twice, and a preemption inside one of them twice over (a tiny network's rows
    once added up to 1.45x their iteration on a loaded machine)."""

    name = 'OwnTimes'

    def __init__(self):
        self.own = {}
        self.calls = []  # (function, its whole seconds), as TimerHook's call_history
        self._open = []  # per open call: [start, the seconds of the calls made inside it]

    def _pre(self):
        self._open.append([time.perf_counter(), 0.0])

    def _post(self, function):
        start, inner = self._open.pop()
        elapsed = time.perf_counter() - start
        if self._open:
            self._open[-1][1] += elapsed
        # the class's name, as TimerHook's table has it (an old-style Function's own class)
        name = type(getattr(function, 'function', function)).__name__
        self.calls.append((name, elapsed))
        self.own[name] = self.own.get(name, 0.0) + elapsed - inner

    def forward_preprocess(self, function, in_data):
        self._pre()

    def backward_preprocess(self, function, in_data, out_grad):
        self._pre()

    def forward_postprocess(self, function, in_data):
        self._post(function)

    def backward_postprocess(self, function, in_data, out_grad):
        self._post(function)


class _Macs(chainer.FunctionHook):
    """Multiply-adds of the convolutions and linear layers a forward runs."""

    name = 'MacsHook'

    def __init__(self):
        self.macs = 0

    def forward_postprocess(self, function, in_data):
        kind = type(function).__name__
        if kind == 'Convolution2DFunction':
            x, W = in_data[:2]
            oh = conv.out_size(x.shape[2], W.shape[2], function.sy, function.ph,
                               function.cover_all, function.dy)
            ow = conv.out_size(x.shape[3], W.shape[3], function.sx, function.pw,
                               function.cover_all, function.dx)
            self.macs += x.shape[0] * oh * ow * W.size
        elif kind == 'LinearFunction':
            self.macs += in_data[0].shape[0] * in_data[1].size


def forward_macs(model, x):
    hook = _Macs()
    with hook, chainer.no_backprop_mode():
        model(x)
    return hook.macs


def problem(name, batch, size):
    """(the network ``name``, a batch of ``batch`` inputs of ``size`` pixels, its labels):
    the same seeded data for every benchmark of the compute path."""
    make, _, classes = MODELS[name]
    rng = numpy.random.RandomState(0)
    shape = (batch, size * size) if name == 'mlp' else (batch, 3, size, size)
    x = rng.uniform(-1, 1, shape).astype(numpy.float32)
    t = rng.randint(0, classes, batch).astype(numpy.int32)
    return make(), x, t


def _iteration(model, x, t):
    model.cleargrads()
    loss = F.softmax_cross_entropy(model(x), t)
    loss.backward()
    return float(loss.array)


def gemm_flops(n=2048, repeat=3, by='openblas'):
    """FLOP/s of an n x n float32 matrix product: by the BLAS numpy uses ('openblas'), or by
    oneDNN's own GEMM ('onednn')."""
    a = numpy.random.RandomState(0).rand(n, n).astype(numpy.float32)
    c = numpy.empty_like(a)
    product = (lambda: a.dot(a, out=c)) if by == 'openblas' else (
        lambda: binding.sgemm(a, a, c))
    product()
    best = min(_timed(product) for _ in range(repeat))
    return 2.0 * n ** 3 / best


def bf16_gemm_flops(n=2048, repeat=3):
    """FLOP/s of an n x n matrix product in bfloat16 with float32 sums, by oneDNN (its
    inner product: ``compute.onednn.linear``), the operands converted once before the timed calls:
    the bound of bfloat16 arithmetic on these cores."""
    a = numpy.random.RandomState(0).rand(n, n).astype(numpy.float32)
    kept = copies.Copies(keep=('src', 'weights'))
    product = lambda: linear.forward(a, a, copies=kept)  # noqa: E731
    product()
    best = min(_timed(product) for _ in range(repeat))
    return 2.0 * n ** 3 / best


# A large convolution: ResNet-50's 3x3 of its second stage at batch 32 (7.4 GFLOP).
_LARGE_CONV = ((32, 128, 28, 28), (128, 128, 3, 3))


def conv_flops(repeat=3):
    """FLOP/s of a large 3x3 convolution's forward on oneDNN (``_LARGE_CONV``, pad 1)."""
    rng = numpy.random.RandomState(0)
    x = rng.uniform(-1, 1, _LARGE_CONV[0]).astype(numpy.float32)
    W = rng.uniform(-1, 1, _LARGE_CONV[1]).astype(numpy.float32)
    run = lambda: conv.forward(x, W, None, (1, 1), (1, 1))  # noqa: E731
    run()
    best = min(_timed(run) for _ in range(repeat))
    n, c, h, w = x.shape
    return 2.0 * n * h * w * W.shape[0] * c * 9 / best


def bound_flops():
    """{'openblas', 'onednn', 'conv': FLOP/s measured now}; the bound takes the largest:
    what these cores were seen to do at this thread count."""
    return {'openblas': gemm_flops(), 'onednn': gemm_flops(by='onednn'),
            'conv': conv_flops()}


def _set(mode):
    """A row's compute: 'numpy', 'onednn' (float32) or 'onednn-bf16'."""
    (replacements.disable if mode == 'numpy' else replacements.enable)()
    compute.set_precision('bf16' if mode == 'onednn-bf16' else 'fp32')


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _hooked(model, x, t):
    """({function: its own seconds}, the iteration's seconds) of one iteration under
    ``OwnTimes``: the breakdown, taken as the timed iterations are (same mode, same
    type-check state, in the same rounds)."""
    hook = OwnTimes()
    t0 = time.perf_counter()
    with hook:
        _iteration(model, x, t)
    return hook.own, time.perf_counter() - t0


def breakdown_of(runs, slack=0.02):
    """The medians over rounds of ``runs`` (``_hooked``'s pairs): {function: seconds},
    the hooked iteration and the rest (Python, Chainer's graph, the hook: the iteration less
    the functions). Raises where the functions add up to more than their iteration (a
    call counted twice), beyond ``slack`` of it."""
    names = set().union(*(own for own, _ in runs))
    funcs = {n: statistics.median([own.get(n, 0.0) for own, _ in runs]) for n in names}
    for own, wall in runs:
        if sum(own.values()) > wall * (1 + slack):
            raise SystemExit(f'bench compute: the breakdown adds up to {sum(own.values()):.4f} s '
                             'in an iteration '
                             f'of {wall:.4f} s: a call is counted twice (OwnTimes)')
    wall = statistics.median([w for _, w in runs])
    rest = statistics.median([w - sum(own.values()) for own, w in runs])
    return funcs, wall, rest


class _Torch:
    """The PyTorch process: one iteration per ``run()``, its seconds."""

    def __init__(self, python, batch, size, threads):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'torch_resnet50.py')
        self.proc = subprocess.Popen([python, script, str(batch), str(size), str(threads)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.version = self.proc.stdout.readline().strip()
        if not self.version.startswith('ready'):
            raise SystemExit(f'bench compute: {python} could not run PyTorch: {self.version}')

    def run(self, side='torch'):
        self.proc.stdin.write('run bf16\n' if side == 'torch-bf16' else 'run\n')
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.write('quit\n')
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def main(argv=None):
    p = argparse.ArgumentParser(prog='chainermn-torus bench compute', description=__doc__.split(
        '\n')[0])
    p.add_argument('--model', choices=sorted(MODELS), default='resnet50')
    p.add_argument('--batch', type=int, default=8)
    p.add_argument('--size', type=int, default=None, help='pixels (default: the model\'s)')
    command_line.add_option(p, 'threads', default=2, counts=True)
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--torch', default=None, metavar='PYTHON',
                   help='a Python that has PyTorch: its ResNet-50 in the same rounds')
    command_line.add_option(p, 'precision', default='fp32',
                      help='bf16: oneDNN in bfloat16 too, a row of its own in the same rounds')
    p.add_argument('--torch-amp', choices=('bf16',), default=None,
                   help="bf16: PyTorch under autocast bfloat16 too, beside its float32")
    p.add_argument('--json', default=None)
    args = command_line.parse_args(p, argv)
    if args.torch_amp and not args.torch:
        p.error('--torch-amp goes with --torch PYTHON')
    if args.torch and args.model != 'resnet50':
        p.error(f'--torch: PyTorch\'s side is ResNet-50 only, not {args.model}')
    args.size = args.size or MODELS[args.model][1]
    allocation.keep(rank=0)  # as a job's process has it (process_setup's malloc step)
    if compute.use('auto', rank=0) != 'onednn':
        raise SystemExit('bench compute: oneDNN is not available here: ' +
                         (compute.onednn.binding.why_unavailable() or '?'))
    model, x, t = problem(args.model, args.batch, args.size)
    modes = MODES + (('onednn-bf16',) if args.precision == 'bf16' else ())
    if args.precision == 'bf16':
        compute.set_precision('bf16', '--precision')  # refused here where the CPU lacks it
    times = {m: [] for m in modes}
    torch = None
    sides = ('torch',) + (('torch-bf16',) if args.torch_amp else ())
    if args.torch:
        torch = _Torch(args.torch, args.batch, args.size, args.threads)
        for side in sides:
            times[side] = []
            torch.run(side)  # warm-up
    breakdown = {}
    # The whole budget, numba's pool included: numba's OpenMP layer sets OpenMP's thread
    # count to its own before each parallel loop, so a limit on the OpenMP pool alone
    # (threadpoolctl) was undone by the first batch normalization (2 threads, asked 1).
    threads.ensure(None, args.threads)
    measured = bound_flops()
    flops = max(measured.values())
    if args.precision == 'bf16':
        measured['bf16_gemm'] = bf16_gemm_flops()
    macs = forward_macs(model, x)
    for mode in modes:
        _set(mode)
        _iteration(model, x, t)  # warm-up: oneDNN makes its primitives here
    # Chainer's type checks as training has them (the multi-node optimizer's setting,
    # CHAINERMN_TORUS_TYPE_CHECK: by default the warm-up checked, the rounds not).
    checks = type_checks.TypeChecks(rank=1)  # rank 1: nothing said
    hooked = {m: [] for m in modes}
    for i in range(args.rounds):
        for mode in modes:
            _set(mode)
            with checks.forward(i + 1):
                times[mode].append(_timed(lambda: _iteration(model, x, t)))
            with checks.forward(i + 1):  # the breakdown: an iteration like the timed one
                hooked[mode].append(_hooked(model, x, t))
        if torch is not None:
            for side in sides:
                times[side].append(torch.run(side))
    hooked_seconds, rest = {}, {}
    for mode in modes:
        breakdown[mode], hooked_seconds[mode], rest[mode] = breakdown_of(hooked[mode])
    pools = threads.pools_in_force()  # after the rounds: what they ran with
    work = 3 * 2 * macs
    bound = work / flops
    med = {m: statistics.median(v) for m, v in times.items()}
    print(f'{args.model} forward + backward, batch {args.batch}, {args.size} px, {args.threads} '
          f'threads; medians of {args.rounds} '
          'interleaved rounds')
    if torch is not None:
        torch.close()
    print('{:<12} {:>10} {:>10}'.format('', 'seconds', 'x bound'))
    for mode in times:
        print(f'{mode:<12} {med[mode]:>10.3f} {med[mode] / bound:>10.2f}')
    if 'onednn-bf16' in med:
        print('bfloat16 on oneDNN is {:.2f}x faster than its float32{}; the bfloat16 bound '
              '(the same work at {:.1f} GFLOP/s, oneDNN\'s 2048x2048 bfloat16 product) is '
              '{:.3f} s, {:.2f}x of it'.format(
                  med['onednn'] / med['onednn-bf16'], '' if 'torch-bf16' not in med else
                  ", {:.2f}x PyTorch's time under autocast bfloat16".format(
                      med['onednn-bf16'] / med['torch-bf16']),
                  measured['bf16_gemm'] / 1e9, work / measured['bf16_gemm'],
                  med['onednn-bf16'] / (work / measured['bf16_gemm'])))
    print('oneDNN is {:.2f}x faster than numpy{}; the bound ({:.1f} GFLOP of work at '
          '{:.1f} GFLOP/s, the best measured now of: a 2048x2048 SGEMM by OpenBLAS {:.1f}, '
          "by oneDNN {:.1f}, oneDNN's 3x3 convolution {} x {} {:.1f}) is {:.3f} s".format(
              med['numpy'] / med['onednn'], '' if torch is None else
              ', {:.2f}x PyTorch\'s time ({})'.format(med['onednn'] / med['torch'],
                                                     torch.version[6:]),
              work / 1e9, flops / 1e9, measured['openblas'] / 1e9, measured['onednn'] / 1e9,
              _LARGE_CONV[0], _LARGE_CONV[1], measured['conv'] / 1e9, bound))
    print('by Chainer function, its own time (seconds, {}; medians of the rounds, an '
          'iteration under the hook beside each timed one):'.format(' / '.join(modes)))
    names = sorted(set().union(*breakdown.values()),
                   key=lambda n: -breakdown['numpy'].get(n, 0.0))
    for name in names[:12]:
        print(f'  {name:<32}' + ''.join(f' {breakdown[m].get(name, 0.0):>8.3f}' for m in modes))
    if len(names) > 12:
        print('  {:<32}'.format(f'the other {len(names) - 12} functions') + ''.join(
            f' {sum(breakdown[m].get(n, 0.0) for n in names[12:]):>8.3f}'
            for m in modes))
    print('  {:<32}'.format('rest: Python, graph, the hook') + ''.join(
        f' {rest[m]:>8.3f}' for m in modes))
    print('  {:<32}'.format('iteration under the hook') + ''.join(
        f' {hooked_seconds[m]:>8.3f}' for m in modes))
    print('  {:<32}'.format('iteration, timed') + ''.join(
        f' {med[m]:>8.3f}' for m in modes))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'model': args.model, 'forward_macs': macs, 'batch': args.batch,
                       'size': args.size, 'threads': args.threads, 'rounds': args.rounds,
                       'seconds': times,
                       'median': med, 'ratio_numpy_over_onednn': med['numpy'] / med['onednn'],
                       'ratio_onednn_over_torch': med['onednn'] / med['torch']
                       if 'torch' in med else None,
                       'ratio_fp32_over_bf16': med['onednn'] / med['onednn-bf16']
                       if 'onednn-bf16' in med else None,
                       'ratio_bf16_over_torch_bf16': med['onednn-bf16'] / med['torch-bf16']
                       if 'torch-bf16' in med else None,
                       'bf16_instructions': precision.cpu_bf16()[1]
                       if 'onednn-bf16' in med else None,
                       'torch': None if torch is None else torch.version[6:],
                       'type_check': checks.setting,
                       'pools': pools, 'gemm_flops': measured['openblas'],
                       'bound_flops_measured': measured, 'bound_flops': flops,
                       'bound_seconds': bound,
                       'bf16_bound_seconds': work / measured['bf16_gemm']
                       if 'bf16_gemm' in measured else None,
                       'breakdown': breakdown, 'breakdown_iteration': hooked_seconds,
                       'breakdown_rest': rest, 'breakdown_rounds': args.rounds,
                       'onednn_version': list(compute.onednn.binding.version()[:3])}, f, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
