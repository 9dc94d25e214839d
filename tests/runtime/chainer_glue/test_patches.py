"""Every change to Chainer's and ChainerMN's objects goes through runtime.chainer_glue.patches
and can be undone: after ``uninstall()`` each one is the very original object again. In a
fresh interpreter, where nothing was patched before."""
import os
import subprocess
import sys

from conftest import ROOT, pythonpath
import package_probes

CHECK = r'''
import chainer, chainermn, chainermn.communicators, chainermn.optimizers
from chainer import optimizer as optimizer_module, training
from chainer.training.extensions import Evaluator
from chainer.training.updaters import standard_updater

def snapshot(places=None):
    places = places or [(chainermn, 'create_communicator'),
              (chainermn.communicators, 'create_communicator'),
              (chainermn, 'create_multi_node_optimizer'),
              (chainermn.optimizers, 'create_multi_node_optimizer'),
              (standard_updater.StandardUpdater, '__init__'), (training.Trainer, 'extend'),
              (training.Trainer, 'run'), (optimizer_module.GradientMethod, 'update'),
              (chainer.optimizers.Adam, 'update'), (Evaluator, '__call__')]
    return {(id(o), n): (o, n, o.__dict__.get(n, 'inherited')) for o, n in places}

before = snapshot()
import chainermn_torus  # the registry's patches: ChainerMN's factories
from chainermn_torus import compute
from chainermn_torus.compute import replacements
from chainermn_torus.compute.onednn import binding
compute_places = [(cls, name) for cls, name, _ in replacements._REPLACEMENTS] + [
    (cls, 'backward') for cls in replacements._BACKWARDS]
before.update(snapshot(compute_places))  # nothing of Chainer's layers is patched on import
from chainermn_torus.launch import hooks
from chainermn_torus.runtime.chainer_glue import patches
from chainermn_torus.runtime.watch import abort, watchdog

class Launch(object):  # what the hooks keep; nothing of it runs here
    updaters = 0
    def get(self, key):
        return None

launch = Launch()
hooks.patch_updater(launch)
hooks.patch_trainer(launch)
hooks.patch_plain_update(launch)
patches.apply(chainermn.optimizers, 'create_multi_node_optimizer',
              chainermn_torus.create_multi_node_optimizer, 'launcher', 'the test')
abort._trainer_says_no_refusal()
watchdog._mark_evaluations()
if binding.available():
    compute.replacements.enable()
groups = sorted(set(p.group for p in patches.applied()))
print('groups', ' '.join(groups))
print('patched', len(patches.applied()))
changed = [n for k, (o, n, v) in before.items() if o.__dict__.get(n, 'inherited') is not v]
print('changed', len(changed))
assert chainermn.create_communicator is chainermn_torus.create_communicator
# Adam inherits GradientMethod.update: the patch shows through, and goes with the undo
assert chainer.optimizers.Adam.update is optimizer_module.GradientMethod.update
patches.uninstall()
after = snapshot()
after.update(snapshot(compute_places))
wrong = [n for k, (o, n, v) in before.items() if after[k][2] is not v]
print('unrestored', wrong)
print('left', len(patches.applied()))
import chainermn.communicators as c
assert c.create_communicator is before[(id(c), 'create_communicator')][2]
'''


def test_every_patch_is_recorded_and_undone():
    proc = subprocess.run([sys.executable, '-c', CHECK], capture_output=True, text=True,
                          cwd=ROOT, timeout=120,
                          env=dict(os.environ, PYTHONPATH=pythonpath(), CHAINERMN_TORUS_QUIET='1'))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = dict(line.split(' ', 1) for line in proc.stdout.splitlines())
    groups = set(out['groups'].split())
    assert {'registry', 'launcher', 'watchdog', 'abort'} <= groups, out
    # each patched place really changed, and each is the original object again
    assert int(out['changed']) == int(out['patched']) >= 10, out
    assert out['unrestored'] == '[]' and out['left'] == '0', out


def test_apply_and_undo_keep_inheritance():
    from chainermn_torus.runtime.chainer_glue import patches

    class Base:
        def f(self):
            return 'base'

    class Child(Base):
        pass

    p = patches.apply(Child, 'f', lambda self: 'ours', 'compute', 'the test')
    assert Child().f() == 'ours' and Base().f() == 'base'
    patches.undo(p)
    assert 'f' not in vars(Child) and Child().f() == 'base'
    q = patches.apply(Base, 'f', lambda self: 'ours', 'compute', 'the test')
    original = vars(q.owner)['f']
    assert package_probes.original_of(Base, 'f') is q.original
    patches.undo(q)
    assert vars(Base)['f'] is q.original is not original
