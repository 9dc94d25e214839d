"""Freed memory kept (runtime.cpu.allocation): an array made again faults no page in; off with
CHAINERMN_TORUS_KEEP_FREED_MEMORY=0; applied by process_setup.init's malloc step; a bad
value refused. In child processes: malloc's options are process-wide."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, pythonpath

CHILD = textwrap.dedent('''
    import resource, numpy
    from chainermn_torus.runtime.cpu import allocation
    allocation.keep(rank=1)  # what process_setup.init's malloc step applies
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = numpy.ones(10 << 20, numpy.float32); del a  # 40 MiB, once
    before = faults()
    for _ in range(5):
        a = numpy.ones(10 << 20, numpy.float32); del a
    print(allocation.kept(), (faults() - before) // 5)
''')


def _run(env):
    proc = subprocess.run([sys.executable, '-c', CHILD], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=pythonpath(),
                                                          **env))
    assert proc.returncode == 0, proc.stderr
    kept, faults = proc.stdout.split()
    return kept == 'True', int(faults)


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='glibc: Linux only')
def test_an_array_made_again_faults_no_page_in_unless_turned_off():
    # 40 MiB is 10,240 pages of 4 KiB, or at least 20 of 2 MiB where numpy's arrays get
    # transparent huge pages (532 faults here, where the kernel gives them on request).
    kept, faults = _run({})
    assert kept and faults < 10, faults
    kept, faults = _run({'CHAINERMN_TORUS_KEEP_FREED_MEMORY': '0'})
    assert not kept and faults >= 20, faults


def test_a_bad_value_is_refused_in_one_line():
    proc = subprocess.run([sys.executable, '-c', CHILD], capture_output=True, text=True,
                          timeout=120, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=pythonpath(),
                                   CHAINERMN_TORUS_KEEP_FREED_MEMORY='sometimes'))
    assert proc.returncode != 0
    assert ("CHAINERMN_TORUS_KEEP_FREED_MEMORY must be on or off (1/0, true/false, yes/no), "
            "got 'sometimes'") in proc.stderr
