"""Chainer's and ChainerMN's private names: every use in the package is found by parsing
it (``scripts/private_names.py``, ``ast``) and is in
``runtime.chainer_glue.chainer_private.REGISTRY`` with why and the public alternative checked; no
entry is stale; each is still where ``NAMES`` says in the Chainer installed (the version it was
checked against): an upgrade that moves one fails here, not in a job."""
import ast
import functools
import importlib
import os
import re

import chainer
import pytest

from chainermn_torus.runtime.chainer_glue import chainer_private
from conftest import ROOT, script


@functools.lru_cache(maxsize=None)
def _scanner():
    return script('private_names')


@functools.lru_cache(maxsize=None)
def _theirs():
    return _scanner().theirs()  # a pass over Chainer's installed source: once per session


def test_checked_against_the_chainer_installed():
    assert chainer.__version__ == chainer_private.CHECKED_WITH


@pytest.mark.parametrize('module, owner, name', chainer_private.NAMES,
                         ids=['{}.{}'.format(o or m.rsplit('.', 1)[-1], n)
                              for m, o, n in chainer_private.NAMES])
def test_each_private_name_is_where_it_is_listed(module, owner, name):
    mod = importlib.import_module(module)
    if owner is None:  # a module-level name, or one the module sets on an object
        assert hasattr(mod, name) or f'.{name} = ' in open(mod.__file__).read()
        return
    cls = getattr(mod, owner)
    source = importlib.import_module(cls.__module__)
    text = open(source.__file__).read()
    # an attribute set in __init__ or a method: on the class or assigned to self
    assert hasattr(cls, name) or re.search(rf'self\.{re.escape(name)}\s*=', text), \
        (owner, name)


def test_every_private_name_used_is_registered_with_why_and_none_is_stale():
    found = _scanner().scan(os.path.join(ROOT, 'chainermn_torus'), _theirs())
    registered, ours = chainer_private.REGISTRY, chainer_private.OURS_TOO
    missing = {name: places for name, places in found.items()
               if name not in registered and name not in ours}
    assert missing == {}, missing
    assert sorted(set(registered) | set(ours)) == sorted(found)  # nothing stale
    for name, (where, why, public) in registered.items():
        # why: said, or "as NAME" for a name of the same use (a module and its function)
        same_as = why.startswith('as ') and why[3:].split()[0] in registered
        assert where and public and (len(why) > 20 or same_as), name
    listed = {part for module, _, name in chainer_private.NAMES
              for part in module.split('.') + [name]}
    assert set(registered) - listed == set(), set(registered) - listed


@pytest.mark.parametrize('source, names', [
    ('def f(opt):\n    return opt._use_fp32_update\n', ['_use_fp32_update']),
    ('def f(x):\n    return getattr(x, "_iterators", None)\n', ['_iterators']),
    ('from chainer.training.extensions._snapshot import snapshot\n', ['_snapshot']),
    ('class A:\n    def f(self):\n        return self._mine\n', []),
])
def test_the_rule_finds_a_planted_read(source, names):
    found = _scanner().uses(ast.parse(source), _theirs(), {'_mine'})
    assert [name for name, _, _ in found] == names
