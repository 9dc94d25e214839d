"""``bench compute-profile``: where one forward + backward spends its time, by kind of work,
at each thread count given, in one run.

    python -m chainermn_torus.bench.compute_profile [--model resnet50] [--batch 1]
        [--size 64] [--threads 1 2] [--rounds 5] [--grain N] [--precision bf16]
        [--json OUT]

The same iteration as ``bench compute`` (the network on the oneDNN path, softmax
cross-entropy, backward), timed whole and, in the same rounds, its parts:

* each oneDNN primitive kind (convolution forward, backward data, backward weights,
  pooling) and, apart, the reorders between numpy's layout and the primitives' blocked ones;
* each numba kernel of the path (batch normalization, ReLU, the sums, the finite checks);
* each Chainer function left on Chainer's numpy: its own time, where none of the parts
  above ran inside it (the linear layer, softmax cross-entropy, small sums);
* Chainer's type checks: the iteration with ``chainer.config.type_check`` off, in the same
  rounds, against on (Chainer's default);
* the rest: the iteration the parts were timed in, less the parts and the type checks,
  which is Chainer's graph bookkeeping
  (``FunctionNode.apply``, variables, the backward's order), this package's calls around
  the primitives and the kernels, and the waits between them.

Each part's median over the rounds; the rows at each thread count side by side, and each
part's speed-up from the first count to the last, so that what does not scale with the
threads shows (the target: a part that is at least 2% of the iteration should be 1.7x
faster at 2 threads than at 1). The timing wrappers add about a microsecond a call.
"""
import argparse
import collections
import importlib
import json
import statistics
import time

import chainer

from chainermn_torus import command_line, compute
from chainermn_torus.bench.compute import _iteration, MODELS, problem
from chainermn_torus.compute.onednn import binding, primitives
from chainermn_torus.runtime.chainer_glue import patches
from chainermn_torus.runtime.cpu import allocation, jit, threads

__all__ = ['main', 'profile', 'Clock']

# The kernels of the compute path: the kernel modules of the layers a step computes in
# (those of the communicators and the optimizers would start MPI when imported).
COMPUTE_LAYERS = ('chainermn_torus.compute.', 'chainermn_torus.runtime.')


class Clock:
    """Seconds and calls per part (a oneDNN primitive's kind, a numba kernel), while
    ``installed``: this benchmark's parts, and scripts/chainer_tests_mode.py's counts."""

    def __init__(self):
        self.parts = collections.defaultdict(float)
        self.calls = collections.Counter()
        self._undo = []

    def add(self, part, seconds):
        self.parts[part] += seconds
        self.calls[part] += 1

    def wrap(self, owner, name, part_of):
        original = getattr(owner, name)
        clock = self

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                clock.add(part_of(args), time.perf_counter() - t0)
        self._undo.append(patches.apply(owner, name, timed, 'timing',
                                        'bench compute-profile times each part'))

    def install(self):
        # Reorders are Primitive.run calls too: their own row, the primitives' by kind.
        self.wrap(primitives.Primitive, 'run', lambda a: 'oneDNN reorders' if isinstance(
            a[0], primitives.Reorder) else f'oneDNN {a[0].what}')
        if jit.available():
            for module_name in jit.kernel_modules():
                if not module_name.startswith(COMPUTE_LAYERS):
                    continue
                module = importlib.import_module(module_name)
                # The kernels themselves (runtime.cpu.jit.kernel), looked up in their module's
                # globals at each call, wrappers and callers alike.
                for name, value in sorted(vars(module).items()):
                    if hasattr(value, 'ahead'):
                        self.wrap(module, name, lambda a, n=name: 'numba {}'.format(
                            n.lstrip('_')))

    def uninstall(self):
        for patch in reversed(self._undo):
            patches.undo(patch)
        self._undo = []


class _NumpyFunctions(chainer.FunctionHook):
    """Each Chainer function's own time (less the functions applied inside it) where none
    of the timed oneDNN primitives and numba kernels ran inside it: what is left on
    Chainer's numpy, found by what ran rather than by a list of the replaced functions."""

    name = 'NumpyFunctionsHook'

    def __init__(self, clock):
        self.clock = clock
        self.seconds = collections.defaultdict(float)
        self._stack = []

    def forward_preprocess(self, function, in_data):
        self._stack.append([time.perf_counter(), sum(self.clock.calls.values()), 0.0])

    def forward_postprocess(self, function, in_data):
        start, calls, inner = self._stack.pop()
        elapsed = time.perf_counter() - start
        if self._stack:
            self._stack[-1][2] += elapsed
        if sum(self.clock.calls.values()) == calls:
            self.seconds[type(function).__name__] += elapsed - inner


def profile(model, x, t, rounds):
    """{part: median seconds} of one iteration and its parts (module doc)."""
    _iteration(model, x, t)  # warm-up: primitives made, kernels loaded
    whole, unchecked, timed, parts = [], [], [], collections.defaultdict(list)
    for _ in range(rounds):
        t0 = time.perf_counter()
        _iteration(model, x, t)
        whole.append(time.perf_counter() - t0)
        with chainer.using_config('type_check', False):
            t0 = time.perf_counter()
            _iteration(model, x, t)
            unchecked.append(time.perf_counter() - t0)
        clock = Clock()
        clock.install()
        hook = _NumpyFunctions(clock)
        try:
            with hook:
                t0 = time.perf_counter()
                _iteration(model, x, t)
                timed.append(time.perf_counter() - t0)
        finally:
            clock.uninstall()
        seen = dict(clock.parts)
        for name, seconds in hook.seconds.items():
            seen[f'Chainer numpy {name}'] = seconds
        for part in set(parts) | set(seen):
            parts[part].append(seen.get(part, 0.0))
    # The parts are timed inside an iteration of their own (``timed``): what they add up to
    # is less than that one's time, whatever the host did during the others.
    out = {'iteration': statistics.median(whole),
           'iteration, type checks off': statistics.median(unchecked),
           'iteration, timed by parts': statistics.median(timed)}
    out['Chainer type checks'] = out['iteration'] - out['iteration, type checks off']
    for part, values in parts.items():
        out[part] = statistics.median(values)
    counted = sum(v for k, v in out.items() if k.startswith(('oneDNN', 'numba', 'Chainer numpy')))
    out['rest: Chainer bookkeeping, calls, waits'] = out['iteration, timed by parts'] - \
        counted - max(0.0, out['Chainer type checks'])
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog='chainermn-torus bench compute-profile',
                                description=__doc__.split('\n')[0])
    p.add_argument('--model', choices=sorted(MODELS), default='resnet50')
    p.add_argument('--batch', type=int, default=1)
    p.add_argument('--size', type=int, default=64)
    command_line.add_option(p, 'threads', default=[1, 2], nargs='+', counts=True)
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--grain', type=int, default=None,
                   help='elements of work per numba thread (runtime.cpu.jit.GRAIN, '
                        f'default {jit.GRAIN}); '
                        '0: every kernel on every thread')
    command_line.add_option(p, 'precision', default='fp32')
    p.add_argument('--json', default=None)
    args = command_line.parse_args(p, argv)
    if args.grain is not None:
        if args.grain < 0:
            p.error(f'--grain: 0 or more elements, got {args.grain}')
        jit.GRAIN = args.grain
    for n in args.threads:
        if n < 1:
            p.error(f'--threads: counts of 1 or more, got {n}')
    if args.rounds < 1 or args.batch < 1 or args.size < 1:
        p.error('--rounds, --batch and --size must be 1 or more')
    allocation.keep(rank=0)  # as a job's process has it (process_setup's malloc step)
    # raises where oneDNN does not load (or bf16 where the CPU lacks it), naming the fix
    compute.use('onednn', rank=0, precision=args.precision, precision_source='--precision')
    model, x, t = problem(args.model, args.batch, args.size)
    by_threads = {}
    for n in args.threads:
        threads.ensure(None, n)
        by_threads[n] = profile(model, x, t, args.rounds)
    counts = list(args.threads)
    first, last = by_threads[counts[0]], by_threads[counts[-1]]
    rows = sorted(set().union(*by_threads.values()) - {'iteration'},
                  key=lambda k: -last.get(k, 0.0))
    print(f'{args.model} forward + backward, batch {args.batch}, {args.size} px, oneDNN path; '
          f'medians of {args.rounds} rounds '
          f'(milliseconds; share of the iteration at {counts[-1]} threads)')
    head = ''.join('{:>12}'.format(f'{n} thr') for n in counts)
    print('{:<44}{}{:>8}{:>10}'.format('', head, 'share', 'speed-up'))
    for row in ['iteration'] + rows:
        cells = ''.join(f'{by_threads[n].get(row, 0.0) * 1e3:>12.2f}' for n in counts)
        share = last.get(row, 0.0) / last['iteration']
        gain = first.get(row, 0.0) / last[row] if last.get(row, 0.0) > 1e-6 else float('nan')
        print(f'{row[:44]:<44}{cells}{100 * share:>7.1f}%{gain:>9.2f}x')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'model': args.model, 'batch': args.batch, 'size': args.size,
                       'rounds': args.rounds, 'threads': counts, 'grain': jit.GRAIN,
                       'precision': args.precision,
                       'onednn_version': list(binding.version()[:3]),
                       'seconds': {str(n): v for n, v in by_threads.items()}}, f, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
