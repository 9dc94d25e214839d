"""``chainermn-torus bench NAME``: the benchmarks (``chainermn_torus.bench``), each with its
own options (``chainermn-torus bench NAME --help``).

A benchmark is a module of ``chainermn_torus.bench`` with a ``main``: found from the
package's source, named by its file (``optimizer_update.py`` is ``optimizer-update``), so
that a new one is one new file.
"""
import ast
import importlib
import os
import sys

from chainermn_torus import bench

__all__ = ['main', 'benchmarks']

# Shorter names kept from before the benchmarks were found by file (commands in job scripts
# and notes use them): a new benchmark needs none.
SHORT = {'update': 'optimizer-update', 'mnist': 'mnist-iteration', 'overlap': 'overlap-training'}


def _has_main(path):
    with open(path) as f:
        tree = ast.parse(f.read())
    return any(isinstance(node, ast.FunctionDef) and node.name == 'main' for node in tree.body)


def benchmarks():
    """{name: module} of every benchmark, by name."""
    folder = os.path.dirname(bench.__file__)
    found = {}
    for entry in sorted(os.listdir(folder)):
        if entry.endswith('.py') and not entry.startswith('_') and \
                _has_main(os.path.join(folder, entry)):
            found[entry[:-3].replace('_', '-')] = 'chainermn_torus.bench.' + entry[:-3]
    return found


def main(argv):
    found = benchmarks()
    names = ', '.join(found)
    if not argv or argv[0] in ('-h', '--help'):
        print('chainermn-torus bench NAME [options]; NAME is one of {} (also {}); '
              'chainermn-torus bench NAME --help for its options'.format(
                  names, ', '.join(f'{k} for {v}' for k, v in SHORT.items())))
        return 0 if argv else 2
    name = SHORT.get(argv[0], argv[0].replace('_', '-'))
    if name not in found:
        sys.stderr.write(f'chainermn-torus bench: unknown benchmark {argv[0]!r}; choose '
                         f'from {names}\n')
        return 2
    return importlib.import_module(found[name]).main(argv[1:])
