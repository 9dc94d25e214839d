"""What setup.py declares: every folder of the package that holds modules is in the wheel's
packages (two have no __init__.py, and a wheel once left them out), and the extras of a
cluster install name the oneDNN build that works (docs/cluster.md)."""
import os

import setuptools  # noqa: F401  (first: its distutils, as pip builds with)

from conftest import ROOT


def _declared():
    import distutils.core
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return distutils.core.run_setup(os.path.join(ROOT, 'setup.py'), stop_after='init')
    finally:
        os.chdir(cwd)


def test_every_folder_with_modules_is_a_package_of_the_wheel():
    dist = _declared()
    holding = set()
    for folder, dirs, files in os.walk(os.path.join(ROOT, 'chainermn_torus')):
        dirs[:] = [d for d in dirs if d != '__pycache__']
        if any(f.endswith('.py') for f in files):
            holding.add(os.path.relpath(folder, ROOT).replace(os.sep, '.'))
    assert 'chainermn_torus.compute.kernels' in holding  # a folder with no __init__.py
    assert set(dist.packages) == holding, sorted(set(dist.packages) ^ holding)


def _extra(extras, name):
    # setuptools files a requirement with a marker under 'name:marker'
    return {(req, key.partition(':')[2]) for key, reqs in extras.items()
            if key.partition(':')[0] == name for req in reqs}


def test_the_extras_name_onednns_x86_64_gomp_build_and_the_whole_cpu_stack():
    extras = _declared().extras_require
    onednn = ('onednn-cpu-gomp==2023.2.0', 'platform_machine == "x86_64"')
    assert _extra(extras, 'onednn') == {onednn}
    assert _extra(extras, 'cpu') == {onednn, ('numba', ''), ('pillow', ''), ('matplotlib', '')}
    with open(os.path.join(ROOT, 'docs', 'cluster.md')) as f:
        assert 'pip install ".[cpu]"' in f.read()
