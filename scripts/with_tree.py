"""python scripts/with_tree.py TREE (-m MODULE | SCRIPT) ARGS: run with the chainermn_torus of TREE
(another checkout) ahead of the installed one; scripts/bench_trees.sh compares two trees."""
import runpy
import sys

tree, rest = sys.argv[1], sys.argv[2:]
sys.path.insert(0, tree)
import chainermn_torus  # noqa: E402
assert chainermn_torus.__file__.startswith(tree), chainermn_torus.__file__
if rest[0] == '-m':
    sys.argv = [rest[1]] + rest[2:]
    runpy.run_module(rest[1], run_name='__main__', alter_sys=True)
else:
    sys.argv = rest
    runpy.run_path(rest[0], run_name='__main__')
