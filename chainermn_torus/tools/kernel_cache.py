"""``chainermn-torus kernels``: compile the package's numba kernels into numba's cache before
a job.

A kernel (``runtime.cpu.jit.kernel``) compiles on its first call in a process, then numba keeps
it in its cache (``__pycache__`` beside the source, or ``NUMBA_CACHE_DIR``). On a cold cache
every rank of a job compiles every kernel it calls, all at the same time: about 9 CPU-s for
the whole set on this project's x86 VM, on each rank, and on a cluster as many writers of the
same cache files. Compiled ahead once, the ranks only load them (0.5 s for the set). Run it
after installing or updating the package (``make setup`` does), on a node of the kind the job
runs on: numba compiles for the CPU it runs on, and a cache written for another is not used.
A call with argument types other than those declared still compiles on first use.
"""
import argparse
import concurrent.futures
import importlib
import multiprocessing
import os
import time

from chainermn_torus.runtime.cpu import jit

__all__ = ['kernels', 'compile_ahead', 'main']

def kernels(modules=None):
    """[(module, name, dispatcher)] of every kernel of ``modules`` with argument types to
    compile ahead, each once (a module may hold another's kernel under a second name);
    ``modules`` default: every kernel module of the package (``jit.kernel_modules``)."""
    found, seen = [], set()
    for module in modules or jit.kernel_modules():
        for name, value in sorted(vars(importlib.import_module(module)).items()):
            if getattr(value, 'ahead', None) is not None and id(value) not in seen:
                seen.add(id(value))
                found.append((module, name, value))
    return found


def _compile(task):
    """In a worker: one kernel's declared types, each loaded from the cache or compiled and
    saved there. Returns (label, compiled count, loaded count, cache folder)."""
    module, name = task
    dispatcher = getattr(importlib.import_module(module), name)
    for arguments in dispatcher.ahead:
        dispatcher.compile(arguments)
    stats = dispatcher.stats
    return ('{}.{}'.format(module.rsplit('.', 1)[1], name), sum(stats.cache_misses.values()),
            sum(stats.cache_hits.values()), os.path.dirname(stats.cache_path))


def compile_ahead(processes=None, modules=None):
    """Compile every declared kernel type of ``modules`` into numba's cache, ``processes`` at
    a time (default: the CPUs this process may use; 1: in this process). Returns [(kernel,
    compiled, loaded, folder)]."""
    tasks = [(module, name) for module, name, _ in kernels(modules)]
    processes = min(processes or len(os.sched_getaffinity(0)), len(tasks))
    if processes <= 1:
        return [_compile(task) for task in tasks]
    # spawn: no worker inherits a numba threading layer the parent may have started.
    with concurrent.futures.ProcessPoolExecutor(
            processes, mp_context=multiprocessing.get_context('spawn')) as pool:
        return list(pool.map(_compile, tasks))


def main(argv=None):
    """Compile the package's numba kernels into numba's cache before a job."""
    p = argparse.ArgumentParser(prog='chainermn-torus kernels', description=main.__doc__)
    p.add_argument('--processes', type=int, default=None, metavar='N',
                   help='compile in N processes (default: the CPUs this process may use)')
    p.add_argument('--list', action='store_true',
                   help='one line per kernel: what was compiled and where it is cached')
    args = p.parse_args(argv)
    if args.processes is not None and args.processes < 1:
        p.error(f'--processes must be 1 or more, got {args.processes}')
    if not jit.available():
        print('chainermn-torus kernels: numba is not installed: nothing to compile (the numpy '
              'fallbacks run instead; pip install numba)')
        return 0
    start = time.time()
    done = compile_ahead(args.processes)
    if args.list:
        for label, compiled, loaded, folder in done:
            print(f'{label}: {compiled} compiled, {loaded} from the cache ({folder})')
    compiled = sum(d[1] for d in done)
    loaded = sum(d[2] for d in done)
    print(f"chainermn-torus kernels: {len(done)} kernels, {compiled + loaded} argument "
          f"types: {compiled} compiled into numba's "
          f'cache, {loaded} there already ({time.time() - start:.1f} s; '
          f'under {os.path.commonpath([d[3] for d in done])})')
    return 0


if __name__ == '__main__':
    import sys
    sys.exit(main())
