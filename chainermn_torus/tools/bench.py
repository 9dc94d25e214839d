"""``chainermn-torus bench NAME``: the benchmarks (``chainermn_torus.bench``), each with its
own options (``chainermn-torus bench NAME --help``).
"""
import importlib
import sys

__all__ = ['main', 'BENCHMARKS']

BENCHMARKS = {'allreduce': 'allreduce', 'update': 'optimizer_update', 'mnist': 'mnist_iteration',
              'compute': 'compute', 'compute-memory': 'compute_memory',
              'compute-profile': 'compute_profile',
              'compute-semantics': 'compute_semantics',
              'double-buffering': 'double_buffering', 'overlap': 'overlap_training',
              'overlap-report': 'overlap_report'}


def main(argv):
    if not argv or argv[0] in ('-h', '--help'):
        print('chainermn-torus bench NAME [options]; NAME is one of {}; '
              'chainermn-torus bench NAME --help for its options'.format(', '.join(BENCHMARKS)))
        return 0 if argv else 2
    if argv[0] not in BENCHMARKS:
        sys.stderr.write('chainermn-torus bench: unknown benchmark {!r}; choose from {}\n'.format(
            argv[0], ', '.join(BENCHMARKS)))
        return 2
    module = importlib.import_module('chainermn_torus.bench.' + BENCHMARKS[argv[0]])
    return module.main(argv[1:])
