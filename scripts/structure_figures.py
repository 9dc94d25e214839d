"""The package's structure in figures, for a tree (this checkout or another's):

    python scripts/structure_figures.py [--tree DIR] [--json FILE]

* lines of the files issue 36 names and of what replaced them;
* functions (and methods) longer than 60 lines;
* module-level mutable names: names bound at module level to a list, dict or set (display,
  comprehension or constructor call) that code in the module changes (an item assigned or
  deleted, a mutating method called), and names rebound through ``global``;
* patches: assignments to an attribute (or ``setattr``) of an object reached from an
  imported ``chainer`` or ``chainermn`` name, directly or through a local name or loop
  variable bound from one (read the list: the rule is of the text, not of the objects);
* pairs of repeated blocks of six lines or more in the package (the ``duplicates`` tool,
  where it is installed);
* modules (``.py`` files) per folder of the package;
* references to the project's history in the package: an issue number (``issue 35``,
  ``issues 16``, ``(#12)``) or a source document by its file number (``seed 003``);
* module docstrings over 30 lines;
* test files at the top level of ``tests/``;
* patch call sites: calls of ``patches.apply`` (under any name the module imports it as);
* frame reads in the source: ``sys._getframe``, ``inspect.stack``/``currentframe``, ``f_back``
  (a step's count is ``scripts/gpu_to_cpu_overhead.py``'s);
* import aliases (``import x as y``, ``from x import y as z``) and the modules imported under
  more than one alias;
* module sizes (the largest, and those over 500 lines) and file names that occur twice;
* lists kept by hand: the files other than a kernel module or a benchmark that name it in a
  string (each a list that adding one must edit);
* option sites: ``add_argument`` calls, in the package, the examples and scripts/, of an
  option a settings row has (``--key-with-dashes`` of config.py's table, or
  ``--segment-size``), outside config.py: an entry point spelling a setting itself.

The figures are counted from the source text (ast), so two trees compare by the same rule.
"""
import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys

NAMED = ['extensions/checkpoint.py', 'extensions/checkpoint', 'auto.py', 'tuning',
         'optimizers/multi_node.py', 'optimizers/update_modes.py', 'optimizers/finite_checks.py',
         'tools/jobscript.py', 'tools/systems.py', 'tools/jobscripts',
         'runtime/chainer_glue/patches.py']
MUTABLE_CALLS = {'list', 'dict', 'set', 'defaultdict', 'OrderedDict', 'deque', 'Counter',
                 'WeakKeyDictionary', 'WeakValueDictionary', 'WeakSet'}
LONG = 60
LONG_DOCSTRING = 30
HISTORY = re.compile(r"\bissues? #?\d+|\(#\d+\)|\bseeds? 0\d\d|\bseed_?0\d\d|\bthe issue's",
                     re.IGNORECASE)
BIG_MODULE = 500


def _py_files(package):
    for root, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != '__pycache__')
        for name in sorted(files):
            if name.endswith('.py'):
                yield os.path.join(root, name)


def _lines(path):
    with open(path) as f:
        return sum(1 for _ in f)


def _named_lines(package):
    out = {}
    for rel in NAMED:
        path = os.path.join(package, rel)
        if os.path.isfile(path):
            out[rel] = _lines(path)
        elif os.path.isdir(path):
            out[rel] = {os.path.relpath(p, package): _lines(p) for p in _py_files(path)}
    return out


def _long_functions(tree, rel):
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > LONG:
                found.append(f'{rel}:{node.lineno} {node.name} ({n} lines)')
    return found


def _is_mutable(value):
    if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp,
                          ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        f = value.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
            else None
        return name in MUTABLE_CALLS
    return False


MUTATORS = {'append', 'extend', 'insert', 'add', 'update', 'pop', 'popitem', 'clear',
            'setdefault', 'remove', 'discard', 'appendleft', 'popleft', '__setitem__'}


def _mutable_names(tree, rel):
    """Module-level containers that some code changes, and names rebound through global.

    Changed: an item assigned or deleted (also inside a tuple target), an augmented
    assignment, a mutating method called; on the container itself, on a local name bound
    to it, or by a function of the module that changes the parameter it is passed as."""
    containers = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        if targets and _is_mutable(node.value):
            containers.update(t.id for t in targets if isinstance(t, ast.Name))
    helpers = _mutating_helpers(tree)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            names.update(node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            aliases = {t.id: n.value.id for n in ast.walk(node) if isinstance(n, ast.Assign)
                       and isinstance(n.value, ast.Name) and n.value.id in containers
                       for t in n.targets if isinstance(t, ast.Name)}
            names.update(aliases[n] for n in _changed(node) if n in aliases)
    names.update(n for n in _changed(tree) if n in containers)
    for node in ast.walk(tree):  # passed to a helper that changes that parameter
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in helpers:
            for i, arg in enumerate(node.args):
                if i in helpers[node.func.id] and isinstance(arg, ast.Name) and \
                        arg.id in containers:
                    names.add(arg.id)
    return sorted(f'{rel}:{n}' for n in names)


def _flat(targets):
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            yield from _flat(t.elts)
        else:
            yield t


def _changed(tree):
    """The names whose contents the code in ``tree`` changes (item assignment or deletion,
    augmented assignment, a mutating method)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if not isinstance(node, ast.AugAssign) else [node.target]
            for t in _flat(targets):
                if isinstance(t, ast.Subscript) and _root(t.value):
                    names.add(_root(t.value))
                elif isinstance(node, ast.AugAssign) and isinstance(t, ast.Name):
                    names.add(t.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in MUTATORS and isinstance(node.func.value, ast.Name):
            names.add(node.func.value.id)
    return names


def _mutating_helpers(tree):
    """{function name: positions of the parameters it changes} for the module's functions."""
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = [a.arg for a in node.args.args]
            changed = _changed(node)
            hit = {i for i, p in enumerate(params) if p in changed}
            if hit:
                out[node.name] = hit
    return out


def _chainer_names(tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split('.')[0] in ('chainer', 'chainermn'):
                    names.add((a.asname or a.name).split('.')[0])
        elif isinstance(node, ast.ImportFrom) and node.module and \
                node.module.split('.')[0] in ('chainer', 'chainermn'):
            names.update(a.asname or a.name for a in node.names)
    return names


def _mentions(node, names):
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _aliases(tree, names):
    """Names bound (by assignment or a for loop) to expressions that mention a Chainer
    name: ``cls = standard_updater.StandardUpdater``, ``for cls, name in PATCHED``."""
    names = set(names)
    tables = {}
    for node in tree.body:  # module-level tables of Chainer objects
        if isinstance(node, ast.Assign) and _mentions(node.value, names):
            tables.update((t.id, node.value) for t in node.targets if isinstance(t, ast.Name))
    names |= set(tables)
    for _ in range(3):
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _mentions(node.value, names):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.For) and _mentions(node.iter, names):
                names.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
    return names


def _root(node):
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _patches(tree, rel):
    chainer_names = _aliases(tree, _chainer_names(tree))
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == 'setattr' and node.args:
            targets = [node.args[0]]
        for t in targets:
            base = t if node.__class__ is ast.Call else \
                (t.value if isinstance(t, ast.Attribute) else None)
            if base is not None and _root(base) in chainer_names and \
                    not _root(base) == 'self':
                found.append(f'{rel}:{node.lineno} {ast.unparse(t)}')
    return found


def _history(text, rel):
    return ['{}:{} {}'.format(rel, text.count('\n', 0, m.start()) + 1, m.group(0))
            for m in HISTORY.finditer(text)]


def _long_docstring(tree, rel):
    doc = ast.get_docstring(tree, clean=False)
    n = len(doc.splitlines()) if doc else 0
    return [f'{rel} ({n} lines)'] if n > LONG_DOCSTRING else []


def _modules_per_folder(package):
    out = {}
    for path in _py_files(package):
        folder = os.path.relpath(os.path.dirname(path), os.path.dirname(package))
        out[folder] = out.get(folder, 0) + 1
    return out


def _top_level_tests(tree):
    tests = os.path.join(tree, 'tests')
    return sorted(n for n in os.listdir(tests) if n.startswith('test_') and n.endswith('.py')) \
        if os.path.isdir(tests) else []


def _duplicates(package):
    exe = shutil.which('duplicates')
    if exe is None:
        return None
    proc = subprocess.run([exe, '--repo', package, '--most', '200', '--seconds', '120'],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    first = proc.stdout.splitlines()[0] if proc.stdout else ''
    m = re.match(r'(\d+) pairs?', first)
    return {'pairs': int(m.group(1)) if m else 0, 'summary': first}


def _patch_calls(tree, rel):
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == 'apply' and isinstance(node.func.value, ast.Name) and \
                'patches' in node.func.value.id:
            out.append(f'{rel}:{node.lineno}')
    return out


FRAME_READS = re.compile(r'sys\._getframe|inspect\.(?:stack|currentframe)|\.f_back\b')


def _frame_reads(text, rel):
    return [f'{rel}:{i}' for i, line in enumerate(text.splitlines(), 1)
            if FRAME_READS.search(line.split('#')[0])]


def _import_aliases(tree, rel):
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.asname and a.asname != a.name.rsplit('.', 1)[-1]:
                    base = node.module + '.' if isinstance(node, ast.ImportFrom) and \
                        node.module else ''
                    out.append((rel, base + a.name, a.asname))
    return out


def _lists_naming(tree, names):
    """Whether a display (tuple, list, set, dict) of the module holds 2 or more of ``names``
    as strings: a list kept by hand."""
    for node in ast.walk(tree):
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else \
            node.values + node.keys if isinstance(node, ast.Dict) else []
        held = {i.value for i in items if isinstance(i, ast.Constant) and i.value in names}
        if len(held) >= 2:
            return True
    return False


def _hand_lists(tree_dir, package):
    """Files (package, tests) holding a list of kernel modules or of benchmarks by name:
    the lists a new one must be added to."""
    kernels = set()
    for path in _py_files(package):
        if 'jit.kernel(' in open(path).read() and not path.endswith('jit.py'):
            kernels.add(os.path.relpath(path[:-3], tree_dir).replace(os.sep, '.'))
    bench = os.path.join(package, 'bench')
    benchmarks = {n[:-3] for n in os.listdir(bench) if n.endswith('.py') and
                  not n.startswith('_') and '\ndef main(' in open(os.path.join(bench, n)).read()}
    benchmarks |= {'chainermn_torus.bench.' + n for n in benchmarks}
    files = {'kernel': [], 'benchmark': []}
    for root in (package, os.path.join(tree_dir, 'tests')):
        for path in _py_files(root):
            tree = ast.parse(open(path).read())
            rel = os.path.relpath(path, tree_dir)
            for kind, names in (('kernel', kernels), ('benchmark', benchmarks)):
                if _lists_naming(tree, names):
                    files[kind].append(rel)
    return files


def _names_all(tree, names):
    """Whether one display (tuple, list, set, dict) or one ``from ... import`` of the module
    names nearly every one of ``names`` (4 in 5 or more, at least 2): a list kept by hand of
    all of them, which a new one must join. A display that picks a few (the paper's rsap
    and rsaa in a study, a phrase for some options) is a choice, not such a list."""
    need = max(2, -(-4 * len(names) // 5))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            held = {a.name for a in node.names} & names
        else:
            items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else \
                node.values + node.keys if isinstance(node, ast.Dict) else []
            # (name, ...) pairs count by their first item: an OrderedDict's rows
            items = [i.elts[0] if isinstance(i, ast.Tuple) and i.elts else i for i in items]
            held = {i.value for i in items if isinstance(i, ast.Constant) and i.value in names}
        if len(held) >= need:
            return True
    return False


def _to_add(tree_dir, package):
    """The package's files to touch to add one more of: a communicator variant, a
    communicator, a launcher option (a setting), a oneDNN function. Each is the file(s) the
    new one is written in, plus every file that keeps a list of all the existing ones by
    hand (``_names_all``). Its test, and the docs' tables that tests compare with the code,
    come on top and are not counted."""
    sys.path.insert(0, tree_dir)
    try:
        from chainermn_torus import settings_table
        from chainermn_torus import communicators
        from chainermn_torus.algorithms import variants
    finally:
        sys.path.pop(0)
    # The registrations; before issue 74, communicators.CLASSES beside the variants
    registered = getattr(variants, 'COMMUNICATORS', None) or communicators.CLASSES
    functions = os.path.join(package, 'compute', 'functions')
    binding = open(os.path.join(package, 'compute', 'onednn', 'binding.py')).read()
    kinds = {
        'variant': ([set(variants.VARIANTS)],
                    ['chainermn_torus/algorithms/variants.py (its row)']),
        # auto registers itself from _registry, as a plugin's does: not in the package's lists
        'communicator': ([set(registered) - {'auto'}],
                         ['chainermn_torus/communicators/<name>.py (its class)',
                          'chainermn_torus/algorithms/variants.py (its registration)']),
        'launcher option': (
            [set(settings_table.SETTINGS),
             {settings_table.option_of(k) for k in settings_table.SETTINGS},
             {s.env for s in settings_table.SETTINGS.values()}],
            ['chainermn_torus/settings_table.py (its row)', '(the module that applies it)']),
        'onednn function': (
            [{n[:-3] for n in os.listdir(functions)
              if n.endswith('.py') and n not in ('__init__.py', 'common.py')},
             set(re.findall(r"'(dnnl_\w+_primitive_desc_create)'", binding))],
            ['chainermn_torus/compute/functions/<function>.py',
             'chainermn_torus/compute/onednn/<primitive>.py']),
    }
    out = {}
    for kind, (name_sets, own) in kinds.items():
        files = list(own)
        for path in _py_files(package):
            rel = os.path.relpath(path, tree_dir)
            parsed = ast.parse(open(path).read())
            if not any(rel in o for o in own) and \
                    any(_names_all(parsed, names) for names in name_sets):
                files.append(rel)
        out[kind] = files
    return out


def _config_names(tree):
    """Names under which a module holds ``chainermn_torus.config`` (the module) and its
    ``value``/``env`` functions."""
    modules, functions = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == 'chainermn_torus':
            modules.update(a.asname or a.name for a in node.names if a.name == 'config')
        elif isinstance(node, ast.ImportFrom) and node.module == 'chainermn_torus.config':
            functions.update((a.asname or a.name, a.name) for a in node.names
                             if a.name in SETTINGS_READERS)
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names
                           if a.name == 'chainermn_torus.config' and a.asname)
    return modules, functions


SETTINGS_READERS = ('value', 'env')
VARIABLE_PREFIX = 'CHAINERMN_TORUS_'


def _settings_reads(tree, rel):
    """Where a setting is resolved outside the settings module: calls of config.value or
    config.env, and reads of a CHAINERMN_TORUS_* variable from os.environ/os.getenv by a
    literal name (``rel:line how key``)."""
    modules, functions = _config_names(tree)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f, how = node.func, None
        if isinstance(f, ast.Attribute) and f.attr in SETTINGS_READERS and \
                isinstance(f.value, ast.Name) and f.value.id in modules:
            how = 'config.' + f.attr
        elif isinstance(f, ast.Name) and f.id in functions:
            how = 'config.' + functions[f.id]
        elif isinstance(f, ast.Attribute) and f.attr in ('get', 'getenv', 'pop') and \
                node.args and _literal(node.args[0]).startswith(VARIABLE_PREFIX) and \
                'environ' in ast.unparse(f.value) + f.attr:
            how = 'os.environ'
        if how:
            key = _literal(node.args[0]) if node.args else '?'
            out.append('{}:{} {} {}'.format(rel, node.lineno, how, key or '?'))
    for node in ast.walk(tree):  # os.environ['CHAINERMN_TORUS_X'] read
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                ast.unparse(node.value).endswith('environ') and \
                _literal(node.slice).startswith(VARIABLE_PREFIX):
            out.append(f'{rel}:{node.lineno} os.environ {_literal(node.slice)}')
    return sorted(out, key=lambda x: (x.split(':')[0], int(x.split(':')[1].split()[0])))


def _literal(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) \
        else ''


# Calls that change the whole process, not an object the caller holds: (dotted suffix of the
# called name, what it is). Read the list: the rule is of the text.
PROCESS_CALLS = (
    ('faulthandler.enable', 'faulthandler'), ('faulthandler.register', 'faulthandler'),
    ('faulthandler.dump_traceback_later', 'faulthandler'),
    ('signal.signal', 'signal handler'), ('atexit.register', 'exit hook'),
    ('threadpool_limits', 'BLAS/OpenMP threads'), ('set_num_threads', 'threads'),
    ('mallopt', 'malloc'), ('environ.setdefault', 'environment'), ('putenv', 'environment'),
    ('patches.apply', 'patch of Chainer'), ('sys.setswitchinterval', 'interpreter'),
    ('sys.setrecursionlimit', 'interpreter'), ('gc.disable', 'interpreter'),
)
PROCESS_ATTRIBUTES = (('sys.excepthook', 'exception hook'),
                      ('threading.excepthook', 'exception hook'),
                      ('global_config.', "Chainer's configuration"),
                      ('chainer.config.', "Chainer's configuration"))


def _process_effects(tree, rel):
    """Call sites that configure the process (``rel:line what``): PROCESS_CALLS, an item of
    os.environ assigned, and assignments to PROCESS_ATTRIBUTES."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            for suffix, what in PROCESS_CALLS:
                if name == suffix or name.endswith('.' + suffix):
                    out.append(f'{rel}:{node.lineno} {what} ({name})')
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                text = ast.unparse(target)
                if isinstance(target, ast.Subscript) and text.startswith('os.environ['):
                    out.append(f'{rel}:{node.lineno} environment ({text})')
                for prefix, what in PROCESS_ATTRIBUTES:
                    if ('.' + text + '.').find('.' + prefix.rstrip('.') + '.') >= 0:
                        out.append(f'{rel}:{node.lineno} {what} ({text})')
    return sorted(set(out), key=lambda x: (x.split(':')[0], int(x.split(':')[1].split()[0])))


STYLE_PATHS = ('chainermn_torus', 'scripts', 'tests', 'examples', 'setup.py')


def _style_findings(tree):
    """ruff's findings on the package, scripts, tests and examples at the project's line
    length (``{code: count}``, ``None`` where ruff is not installed)."""
    here = os.path.join(tree, '.venv', 'bin', 'ruff')
    exe = here if os.path.exists(here) else shutil.which('ruff')
    if exe is None:
        return None
    paths = [p for p in STYLE_PATHS if os.path.exists(os.path.join(tree, p))]
    args = [exe, 'check', '--no-cache', '--output-format', 'json', '--exit-zero']
    if not os.path.exists(os.path.join(tree, 'ruff.toml')):
        args += ['--isolated', '--line-length', '100', '--select', 'E,F,W']
    run = subprocess.run(args + paths, cwd=tree, capture_output=True, text=True)
    counts = {}
    for finding in json.loads(run.stdout or '[]'):
        code = finding.get('code') or 'syntax'
        counts[code] = counts.get(code, 0) + 1
    return dict(sorted(counts.items()))


def _table_module(tree):
    """The module of ``tree`` that holds the settings' rows: settings_table.py, or
    config.py in a tree from before the split."""
    split = os.path.join(tree, 'chainermn_torus', 'settings_table.py')
    return split if os.path.exists(split) else os.path.join(tree, 'chainermn_torus',
                                                             'config.py')


def _row_options(tree):
    """The options of the settings rows of ``tree``'s table, read from its text."""
    with open(_table_module(tree)) as f:
        keys = re.findall(r"^    \('([a-z0-9_]+)', Setting\(", f.read(), re.M)
    return {'--' + k.replace('_', '-') for k in keys} | {'--segment-size'}


def _option_sites(tree):
    """``path:line --option`` of each add_argument of a row's option outside the modules
    that declare them (config.py before the split, command_line.py after)."""
    options, out = _row_options(tree), []
    for top in ('chainermn_torus', 'examples', 'scripts'):
        for path in _py_files(os.path.join(tree, top)):
            rel = os.path.relpath(path, tree)
            if rel in (os.path.join('chainermn_torus', 'config.py'),
                       os.path.join('chainermn_torus', 'command_line.py')):
                continue
            with open(path) as f:
                parsed = ast.parse(f.read())
            for node in ast.walk(parsed):
                if isinstance(node, ast.Call) and getattr(node.func, 'attr', None) == \
                        'add_argument':
                    out += [f'{rel}:{node.lineno} {a.value}' for a in node.args
                            if _literal(a) in options]
    return sorted(out)


def figures(tree):
    package = os.path.join(tree, 'chainermn_torus')
    long_functions, mutable, patches, history, docstrings, total = [], [], [], [], [], 0
    patch_calls, frames, aliases, sizes, names = [], [], [], {}, {}
    settings_reads, effects = [], []
    for path in _py_files(package):
        rel = os.path.relpath(path, package)
        with open(path) as f:
            text = f.read()
        total += text.count('\n')
        sizes[rel] = text.count('\n')
        names.setdefault(os.path.basename(path), []).append(rel)
        parsed = ast.parse(text)
        patch_calls += _patch_calls(parsed, rel)
        if rel not in ('config.py', 'command_line.py'):
            settings_reads += _settings_reads(parsed, rel)
        effects += _process_effects(parsed, rel)
        frames += _frame_reads(text, rel)
        aliases += _import_aliases(parsed, rel)
        long_functions += _long_functions(parsed, rel)
        mutable += _mutable_names(parsed, rel)
        patches += _patches(parsed, rel)
        history += _history(text, rel)
        docstrings += _long_docstring(parsed, rel)
    return {'package_lines': total, 'named_files': _named_lines(package),
            'functions_over_60_lines': long_functions, 'module_level_mutable': mutable,
            'patches': patches, 'history_references': history,
            'docstrings_over_30_lines': docstrings,
            'top_level_test_files': _top_level_tests(tree),
            'modules_per_folder': _modules_per_folder(package),
            'duplicates': _duplicates(package),
            'patch_call_sites': patch_calls,
            'patch_call_modules': sorted({c.rsplit(':', 1)[0] for c in patch_calls}),
            'frame_reads': frames,
            'import_aliases': ['{}: {} as {}'.format(*a) for a in aliases],
            'modules_under_several_aliases': sorted(
                '{}: {}'.format(m, ', '.join(sorted(v))) for m, v in _by_module(aliases).items()
                if len(v) > 1),
            'largest_module': max(sizes.items(), key=lambda kv: kv[1]),
            'modules_over_500_lines': sorted(f'{k} {v}' for k, v in sizes.items()
                                             if v > BIG_MODULE),
            'file_names_twice': sorted('{}: {}'.format(n, ', '.join(v))
                                       for n, v in names.items()
                                       if len(v) > 1 and n != '__init__.py'),
            'hand_lists': _hand_lists(tree, package),
            'files_to_add': _to_add(tree, package),
            'settings_reads_outside_config': settings_reads,
            'settings_read_modules': sorted({r.split(':')[0] for r in settings_reads}),
            'process_effects': effects,
            'process_effect_modules': sorted({e.split(':')[0] for e in effects}),
            'option_sites': _option_sites(tree),
            'style_findings': _style_findings(tree)}


def _by_module(aliases):
    out = {}
    for _, module, alias in aliases:
        out.setdefault(module, set()).add(alias)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--tree', default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    parser.add_argument('--json', default=None)
    args = parser.parse_args()
    out = figures(args.tree)
    for key in ('functions_over_60_lines', 'module_level_mutable', 'patches',
                'history_references', 'docstrings_over_30_lines', 'top_level_test_files',
                'patch_call_modules', 'frame_reads', 'modules_under_several_aliases',
                'modules_over_500_lines', 'file_names_twice',
                'settings_reads_outside_config', 'settings_read_modules', 'process_effects',
                'process_effect_modules', 'option_sites'):
        print(f'{key}: {len(out[key])}')
        for line in out[key]:
            print('  ' + line)
    print('modules per folder: {}'.format(', '.join(
        f'{k} {v}' for k, v in sorted(out['modules_per_folder'].items()))))
    print('package lines: {}'.format(out['package_lines']))
    print('named files: {}'.format(json.dumps(out['named_files'], indent=1)))
    print('duplicates: {}'.format(out['duplicates']))
    print('patch call sites: {} in {} modules; import aliases: {}; largest module: {} ({} '
          'lines)'.format(len(out['patch_call_sites']), len(out['patch_call_modules']),
                          len(out['import_aliases']), *out['largest_module']))
    print('lists kept by hand: {}'.format(json.dumps(out['hand_lists'])))
    for kind, files in out['files_to_add'].items():
        print(f'files to touch to add a {kind}: {len(files)}')
        for f in files:
            print('  ' + f)
    style = out['style_findings']
    print('style findings: {}'.format('ruff not installed' if style is None else '{} ({})'.format(
        sum(style.values()), ', '.join(f'{k} {v}' for k, v in style.items()))))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(out, f, indent=1)


if __name__ == '__main__':
    main()
