"""Where the package reaches Chainer's or ChainerMN's private names, found by parsing it.

A private name is one that starts with one underscore. Chainer's and ChainerMN's are the
ones their sources define (a function, class, module, module-level name, an attribute they
assign, a name they import under one); the package's own are those it defines the same way.
A use of one of theirs in the package is:

* an attribute ``x._name`` of theirs, unless it is ``self._name`` / ``cls._name`` and the
  package defines ``_name`` itself (its own class's attribute);
* ``getattr/setattr/hasattr(x, '_name')``, or any string that names one of theirs (a
  dotted module path, a frame's function name);
* ``from chainer... import _name``, or an import of a private module of theirs.

``tests/runtime/chainer_glue/test_chainer_private.py`` checks every name found against
``runtime.chainer_glue.chainer_private.REGISTRY`` (why, and the public alternative checked) and
``OURS_TOO`` (names the package defines as well, read on its own objects).

    python scripts/private_names.py     # name: the places, one line each
"""
import ast
import collections
import os
import sys

THEIRS = ('chainer', 'chainermn')


def _private(name):
    return name.startswith('_') and not name.startswith('__')


def _py_files(root):
    """The package's .py files, walked as scripts/structure_figures.py walks them."""
    import importlib.util
    spec = importlib.util.spec_from_file_location('structure_figures', os.path.join(
        os.path.dirname(os.path.abspath(__file__)), 'structure_figures.py'))
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    return figures._py_files(root)


def defined(root):
    """The private names the package at ``root`` defines."""
    names = set()
    for path in _py_files(root):
        for part in os.path.relpath(path, os.path.dirname(root))[:-3].split(os.sep):
            if _private(part):
                names.add(part)
        try:
            tree = ast.parse(open(path, encoding='utf-8').read())
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = node.name
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                name = node.attr
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                name = node.id
            elif isinstance(node, ast.alias):
                name = node.asname or node.name.split('.')[-1]
            else:
                continue
            if _private(name):
                names.add(name)
    return names


def _theirs_module(module):
    return module is not None and module.split('.')[0] in THEIRS


def uses(tree, theirs, ours):
    """[(name, line, text)]: the uses of ``theirs`` in the parsed module ``tree``."""
    found = []

    def add(name, node):
        found.append((name, node.lineno, ast.unparse(node)[:70]))

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in theirs:
            own = isinstance(node.value, ast.Name) and node.value.id in ('self', 'cls') \
                and node.attr in ours
            if not own:
                add(node.attr, node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for part in node.value.split('.'):
                if part in theirs and part not in ours:
                    add(part, node)
        elif isinstance(node, ast.ImportFrom) and _theirs_module(node.module):
            for part in node.module.split('.'):
                if _private(part):
                    add(part, node)
            for alias in node.names:
                if _private(alias.name):
                    add(alias.name, node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _theirs_module(alias.name):
                    for part in alias.name.split('.'):
                        if _private(part):
                            add(part, node)
    return found


def theirs():
    import importlib
    names = set()
    for package in THEIRS:
        names |= defined(os.path.dirname(importlib.import_module(package).__file__))
    return names


# The registry's own tables name every name: not uses.
REGISTRY_FILE = os.path.join('runtime', 'chainer_glue', 'chainer_private.py')
TABLES = ('NAMES', 'REGISTRY', 'OURS_TOO')


def _without_tables(tree):
    tree.body = [node for node in tree.body if not (
        isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in TABLES
                                             for t in node.targets))]
    return tree


def scan(package_root, their_names=None):
    """{name: ['path:line text', ...]} over the package at ``package_root``;
    ``their_names``: ``theirs()``, where the caller has it already."""
    their_names = their_names if their_names is not None else theirs()
    ours = defined(package_root)
    out = collections.defaultdict(list)
    for path in _py_files(package_root):
        tree = ast.parse(open(path, encoding='utf-8').read())
        rel = os.path.relpath(path, package_root)
        if rel == REGISTRY_FILE:
            tree = _without_tables(tree)
        for name, line, text in uses(tree, their_names, ours):
            out[name].append(f'{rel}:{line} {text}')
    return dict(out)


if __name__ == '__main__':
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'chainermn_torus')
    for name, places in sorted(scan(root).items()):
        print('{}: {}'.format(name, '; '.join(places)))
