"""The docs hold together: every relative link and anchor resolves, and every file of
measurements is listed with the command that made it."""
import fnmatch
import glob
import itertools
import os
import re

from chainermn_torus.launch import options
from conftest import ROOT


def _anchors(path):
    found = set()
    for line in open(path):
        m = re.match(r'^#+ (.*)', line)
        if m:  # GitHub's rule: lower case, punctuation dropped, spaces to hyphens
            found.add(re.sub(r'[^\w\- ]', '', m.group(1).strip().lower()).replace(' ', '-'))
        found.update(re.findall(r'<a id="([^"]+)">', line))
    return found


def test_every_relative_link_and_anchor_resolves():
    pages = [os.path.join(ROOT, 'README.md')] + glob.glob(os.path.join(ROOT, 'docs', '**', '*.md'),
                                                          recursive=True)
    broken = []
    for page in pages:
        for link in re.findall(r'\]\(([^)\s]+)\)', open(page).read()):
            if link.startswith(('http://', 'https://')):
                continue
            path, _, anchor = link.partition('#')
            target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(target):
                broken.append((os.path.relpath(page, ROOT), link, 'no such file'))
            elif anchor and os.path.isfile(target) and anchor not in _anchors(target):
                broken.append((os.path.relpath(page, ROOT), link, 'no such heading'))
    assert not broken, broken


def _expand(pattern):
    """`a-{x,y}.json` -> ['a-x.json', 'a-y.json'] (shell brace expansion, one level)."""
    parts = re.split(r'\{([^}]*)\}', pattern)
    choices = [[p] if i % 2 == 0 else p.split(',') for i, p in enumerate(parts)]
    return [''.join(c) for c in itertools.product(*choices)]


def test_every_measurement_file_is_listed_with_its_command():
    folder = os.path.join(ROOT, 'docs', 'measurements')
    index = open(os.path.join(folder, 'README.md')).read()
    # data files (json, logs, compressed traces, the device scripts that made them), named
    # whole or with braces after a dot or a folder's slash
    patterns = [p for token in re.findall(
        r'`([^`]+(?:\.(?:jsonl|json|png|md|log|gz|sh)|[./]\{[^}`]*\}))`', index)
        for p in _expand(token)]
    unlisted = []
    for path in glob.glob(os.path.join(folder, '**', '*'), recursive=True):
        name = os.path.relpath(path, folder)
        if os.path.isfile(path) and name != 'README.md' and \
                not any(fnmatch.fnmatch(name, p) for p in patterns):
            unlisted.append(name)
    assert not unlisted, unlisted


def test_every_measurement_file_a_page_cites_exists():
    # A figure's source named in README.md or docs/ (`docs/measurements/...`, or
    # `measurements/...` from a page under docs/) must be there; brace forms and globs must
    # match at least one file.
    pages = [os.path.join(ROOT, 'README.md')] + glob.glob(os.path.join(ROOT, 'docs', '**', '*.md'),
                                                          recursive=True)
    cited, missing = 0, []
    for page in pages:
        for token in re.findall(r'`((?:docs/)?measurements/[^`\s]+)`', open(page).read()):
            base = ROOT if token.startswith('docs/') else os.path.join(ROOT, 'docs')
            for name in _expand(token):
                cited += 1
                if not glob.glob(os.path.join(base, name)):
                    missing.append((os.path.relpath(page, ROOT), name))
    assert cited >= 10  # the check sees the citations
    assert not missing, missing


def test_the_readmes_option_table_names_every_launcher_option():
    # The table is written by hand; every row of settings_table.SETTINGS with a launcher target must
    # be in it (three were missing once: --tune-dir, --keep-freed-memory, --gpu-to-cpu-paths).
    with open(os.path.join(ROOT, 'README.md')) as f:
        rows = '\n'.join(line for line in f.read().splitlines() if line.startswith('| `--'))
    named = set(re.findall(r'`(--[a-z0-9-]+)', rows))
    assert [options.option_of(k) for k in options.keys()
            if options.option_of(k) not in named] == []


def test_layout_names_the_compute_folders_as_they_are():
    # docs/layout.md says how compute/functions, onednn and kernels name their modules;
    # the lists it gives are the folders' modules, no more and no fewer.
    text = open(os.path.join(ROOT, 'docs', 'layout.md')).read()
    for folder, said in (('functions', 'after the Chainer function replaced'),
                         ('onednn', 'after the oneDNN primitive'),
                         ('kernels', "after numba's kernel")):
        start = text.index(f'`{folder}/` {said}')
        listed = set(re.findall(r'`(\w+)`', text[start:text.index(')', start)]))
        path = os.path.join(ROOT, 'chainermn_torus', 'compute', folder)
        modules = {n[:-3] for n in os.listdir(path) if n.endswith('.py')}
        helpers = {'__init__', 'common', 'binding', 'primitives', 'layer', 'geometries',
                   'copies'}  # the folders' shared pieces, not one layer's
        assert listed == modules - helpers, (folder, sorted(listed), sorted(modules - helpers))
