"""The `chainermn-torus` command.

    chainermn-torus bench allreduce [options]         (under mpiexec)
    chainermn-torus bench update [options]            (one process)
    chainermn-torus bench mnist [options]             (under mpiexec)
    chainermn-torus bench double-buffering [options]  (under mpiexec)
    chainermn-torus run [--communicator NAME] [--grid MxN] script.py ARGS
    chainermn-torus names
"""
import sys

USAGE = __doc__
BENCHMARKS = {'allreduce': 'allreduce', 'update': 'optimizer_update', 'mnist': 'mnist_iteration',
              'double-buffering': 'double_buffering'}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ('-h', '--help'):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == 'bench' and rest[:1] and rest[0] in BENCHMARKS:
        import importlib
        module = importlib.import_module('chainermn_torus.bench.' + BENCHMARKS[rest[0]])
        return module.main(rest[1:])
    if cmd == 'run':
        from chainermn_torus import run
        return run.main(rest)
    if cmd == 'names':
        from chainermn_torus import valid_names
        print('\n'.join(valid_names()))
        return 0
    sys.stderr.write('chainermn-torus: unknown command {!r}; commands: {}, run, names\n'.format(
        ' '.join(argv[:2]), ', '.join('bench ' + b for b in BENCHMARKS)))
    return 2


if __name__ == '__main__':
    sys.exit(main())
