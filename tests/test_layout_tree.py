"""docs/layout.md's tree is the package's: every module of chainermn_torus/ is
named under its folder (``NAME.py``; the benchmarks' folder lists them by name), and every
module it names exists. The check can fail: a module the tree leaves out is found."""
import os
import re

from conftest import ROOT

PY = re.compile(r'(?<![/\w])([A-Za-z_0-9]+)\.py\b')  # NAME.py, not a path's last part
CONTINUATION = 25  # a description's wrapped line starts at the description column


def _tree(text):
    block = text[text.index('```') + 3:]
    return block[block.index('\n') + 1:block.index('```')].splitlines()


def named(text):
    """({folder under chainermn_torus: module names written NAME.py}, {folder: every word
    of its lines}) from the tree in ``text``."""
    files, words, stack, current = {}, {}, [], ''
    for line in _tree(text):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(' '))
        if indent == 0 and not line.startswith('chainermn_torus/'):
            break  # examples/, scripts/, docs/, tests/: outside the package
        if indent < CONTINUATION:  # a new entry: the folders it opens
            lead = []
            for token in line.split():
                if not token.endswith(('/', '.py')):
                    break
                lead.append(token)
            del stack[indent // 2:]
            stack.extend(t.rstrip('/') for t in lead if t.endswith('/'))
            current = '/'.join(stack[1:])
        files.setdefault(current, set()).update(PY.findall(line))
        words.setdefault(current, set()).update(re.findall(r'[a-z_0-9]+', line))
    return files, words


def modules():
    out = {}
    package = os.path.join(ROOT, 'chainermn_torus')
    for path, dirs, names in os.walk(package):
        dirs[:] = [d for d in dirs if d != '__pycache__']
        rel = os.path.relpath(path, package)
        out['' if rel == '.' else rel] = {n[:-3] for n in names
                                          if n.endswith('.py') and n != '__init__.py'}
    return out


def differences(text, actual):
    files, words = named(text)
    missing = sorted(f'{d}/{m}' for d, ms in actual.items() for m in ms
                     if m not in files.get(d, ()) and
                     not (d == 'bench' and m in words.get(d, ())))
    extra = sorted(f'{d}/{m}' for d, ms in files.items()
                   for m in ms - actual.get(d, set()) - {'__init__'})
    return missing, extra


def _text():
    with open(os.path.join(ROOT, 'docs', 'layout.md')) as f:
        return f.read()


def test_the_layout_tree_names_every_module_and_no_other():
    assert differences(_text(), modules()) == ([], [])


def test_a_module_left_out_of_the_tree_is_found():
    actual = modules()
    actual['runtime'] = actual['runtime'] | {'brand_new'}
    actual['compute/onednn'] = actual['compute/onednn'] - {'conv'}
    assert differences(_text(), actual) == (['runtime/brand_new'], ['compute/onednn/conv'])


def test_a_module_name_occurs_twice_only_by_a_convention_docs_layout_states():
    # docs/layout.md: tools/NAME.py over the module NAME; compute's three vocabularies;
    # the rsap algorithm and its communicator; the checkpoint sweep over the file removal.
    # Names that meant two things were renamed (tools/job_nodes.py, tools/result_paths.py,
    # simulation/ranking.py).
    names = {}
    for base, _, files in os.walk(os.path.join(ROOT, 'chainermn_torus')):
        for name in files:
            if name.endswith('.py') and name != '__init__.py' and '__pycache__' not in base:
                names.setdefault(name[:-3], []).append(base)
    twice = {n for n, where in names.items() if len(where) > 1}
    assert twice == {'calibrate', 'simulate', 'timeline', 'topology', 'batchnorm', 'linear',
                     'pooling', 'relu', 'rsap', 'sweep'}, sorted(twice)
    text = open(os.path.join(ROOT, 'docs', 'layout.md')).read()
    assert '(calibrate, simulate, timeline, topology)' in text
