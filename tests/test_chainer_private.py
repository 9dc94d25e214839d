"""Chainer's private names the package uses are all listed in runtime.chainer_private, and
each is still where the list says in the Chainer installed (the version it was checked
against): an upgrade that moves one fails here, not in a job."""
import importlib
import os
import re

import chainer
import pytest

from chainermn_torus.runtime import chainer_private
from conftest import ROOT


def test_checked_against_the_chainer_installed():
    assert chainer.__version__ == chainer_private.CHECKED_WITH


@pytest.mark.parametrize('module, owner, name', chainer_private.NAMES,
                         ids=['{}.{}'.format(o or m.rsplit('.', 1)[1], n)
                              for m, o, n in chainer_private.NAMES])
def test_each_private_name_is_where_it_is_listed(module, owner, name):
    mod = importlib.import_module(module)
    if owner is None:
        assert hasattr(mod, name)
        return
    cls = getattr(mod, owner)
    source = importlib.import_module(cls.__module__)
    text = open(source.__file__).read()
    # an attribute set in __init__ or a method: on the class or assigned to self
    assert hasattr(cls, name) or re.search(r'self\.{}\s*='.format(re.escape(name)), text), \
        (owner, name)


# Outside chainer_private, the package may name these private attributes only where it
# replaces Chainer's function bodies (compute/onednn.py, listed in the module's doc).
_ACCESS = re.compile(r'\.(_iterators|_optimizers|_dataset|_order|_impl_selector|'
                     r'_BatchNormalizationImpl|_compute_axis|_compute_key_axis)\b')


def test_no_other_module_reads_them():
    found = []
    package = os.path.join(ROOT, 'chainermn_torus')
    for root, _, files in os.walk(package):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, package)
            if not name.endswith('.py') or rel in ('runtime/chainer_private.py',
                                                   'compute/onednn.py'):
                continue
            for i, line in enumerate(open(path), 1):
                if _ACCESS.search(line.split('#')[0]) and 'self._' not in line:
                    found.append('{}:{}: {}'.format(rel, i, line.strip()))
    assert found == []
