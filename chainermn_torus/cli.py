"""The `chainermn-torus` command.

    chainermn-torus bench allreduce [options]   (run it under mpiexec)
    chainermn-torus run [--communicator NAME] [--grid MxN] script.py ARGS
    chainermn-torus names
"""
import sys

USAGE = __doc__


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ('-h', '--help'):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == 'bench' and rest[:1] == ['allreduce']:
        from chainermn_torus.bench import allreduce
        return allreduce.main(rest[1:])
    if cmd == 'run':
        from chainermn_torus import run
        return run.main(rest)
    if cmd == 'names':
        from chainermn_torus import valid_names
        print('\n'.join(valid_names()))
        return 0
    sys.stderr.write('chainermn-torus: unknown command {!r}; commands: bench allreduce, run, '
                     'names\n'.format(' '.join(argv[:2])))
    return 2


if __name__ == '__main__':
    sys.exit(main())
