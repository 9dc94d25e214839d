"""``import chainermn_torus`` and ChainerMN's own communicator change none of Chainer's
computations unless a setting asks (docs/compute.md: what ``auto`` means for whom); this
package's communicator applies compute's default. Each case is a new process (a singleton
MPI rank): compute is applied once per process."""
import json
import os
import subprocess
import sys


from conftest import ROOT

_SCRIPT = r'''
import json, sys
import chainermn_torus
import chainermn
from chainer.functions.connection import convolution_2d
from chainermn_torus import compute
from chainermn_torus.runtime.chainer_glue import patches
forward = convolution_2d.Convolution2DFunction.forward_cpu
patched_at_import = sorted({p.group for p in patches.applied()})
comm = chainermn.create_communicator(sys.argv[1])
print(json.dumps({'at_import': patched_at_import,
                  'patches': sorted({p.group for p in patches.applied()}),
                  'compute_patches': len(patches.applied('compute')),
                  'convolution_changed':
                      convolution_2d.Convolution2DFunction.forward_cpu is not forward,
                  'in_force': compute.in_force()}))
'''


def _run(name, **env_more):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith('CHAINERMN_TORUS_') or k == 'CHAINERMN_TORUS_THREADS'}
    env.update(env_more)
    proc = subprocess.run([sys.executable, '-c', _SCRIPT, name], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_chainermns_own_communicator_changes_nothing_unless_asked():
    got = _run('naive')
    # At import: ChainerMN's two factories, the names registered. With the communicator:
    # nothing more (the abort hook is opt-in for ChainerMN's: tests/test_process_changes.py).
    assert got['at_import'] == ['registry'], got
    assert got['patches'] == ['registry'], got
    assert got['compute_patches'] == 0 and not got['convolution_changed'], got
    assert got['in_force'] is None, got


def test_the_variable_asks_and_chainermns_communicator_then_applies_it():
    got = _run('naive', CHAINERMN_TORUS_COMPUTE='numpy')
    assert got['in_force'] == 'numpy', got  # asked for, applied (and said)


def test_this_packages_communicator_applies_the_default():
    got = _run('rsap')
    assert got['in_force'] in ('onednn', 'numpy'), got
    if got['in_force'] == 'onednn':
        assert got['convolution_changed'] and got['compute_patches'] > 0, got
