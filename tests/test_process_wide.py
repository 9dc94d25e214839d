"""Every module-level name the package changes after import is listed, with why it must be
one per process, in docs/development.md ("Process-wide state"); the rule that finds them is
scripts/structure_figures.py's, and it can fail."""
import ast
import os

from conftest import ROOT, script
import package_probes


def _figures():
    return script('structure_figures')


def _section():
    text = open(os.path.join(ROOT, 'docs', 'development.md')).read()
    start = text.index('## Process-wide state')
    return text[start:text.index('\n## ', start + 1)]


def _listed(section):
    names = set()
    for line in section.splitlines():
        if line.startswith('| `'):
            cell = line.split('|')[1]
            parts = [p.strip(' `') for p in cell.split(',')]
            path = parts[0].rsplit(':', 1)[0]
            names.update('{}:{}'.format(path, p.rsplit(':', 1)[-1]) for p in parts)
    return names


def test_every_process_wide_name_is_listed_with_why():
    figures = _figures()
    found = set()
    package = os.path.join(ROOT, 'chainermn_torus')
    for path in figures._py_files(package):
        rel = os.path.relpath(path, package)
        found.update(figures._mutable_names(ast.parse(open(path).read()), rel))
    listed = _listed(_section())
    assert sorted(found - listed) == []
    # the rule finds the ones it can see, and the table holds no name that is gone
    gone = [n for n in listed if not _defined(package, n)]
    assert gone == []
    assert {'algorithms/variants.py:VARIANTS', 'simulation/ranking.py:_CACHE',
            'compute/onednn/binding.py:_STATE'} <= found, found  # tables, caches, handles


def _defined(package, name):
    path, attr = name.rsplit(':', 1)
    return f'\n{attr} = ' in '\n' + open(os.path.join(package, path)).read()


def test_the_rule_finds_a_new_one():
    figures = _figures()
    tree = ast.parse('_SEEN = []\nTABLE = {}\n\ndef f(x):\n    _SEEN.append(x)\n'
                     'def g():\n    global _N\n    _N = 1\n')
    assert figures._mutable_names(tree, 'm.py') == ['m.py:_N', 'm.py:_SEEN']
    # in a tuple target, through a local alias, through a helper of the module
    tree = ast.parse('_MODE = {}\n_STATE = {}\n_KEPT = []\nQUIET = {}\n\n'
                     'def f(a, b):\n    _MODE["a"], _MODE["b"] = a, b\n'
                     'def g():\n    s = _STATE\n    s["x"] = 1\n'
                     'def _keep(where, x):\n    where.append(x)\n'
                     'def h(x):\n    _keep(_KEPT, x)\n    return QUIET.get(x)\n')
    assert figures._mutable_names(tree, 'm.py') == ['m.py:_KEPT', 'm.py:_MODE', 'm.py:_STATE']


def test_the_process_state_is_one_object_each_field_changed_by_its_owner():
    from chainermn_torus import _registry, process
    from chainermn_torus.compute import modes
    from chainermn_torus import config, process_setup
    from chainermn_torus.runtime import report
    from chainermn_torus.runtime.chainer_glue import patches
    from chainermn_torus.runtime.watch import watchdog
    from chainermn_torus.communicators import _window
    from chainermn_torus.datasets import draws
    from chainermn_torus.runtime import timeline
    from chainermn_torus.runtime.cpu import allocation, threads
    from chainermn_torus.runtime.files import devshm
    from chainermn_torus.runtime.watch import abort
    state = process.STATE
    assert patches.applied() == state.patches  # the one list of what is in force
    policy = _registry.Policy(defaults={'tune': 'off'})
    try:
        assert _registry.install(policy) is policy and state.policy is policy
    finally:
        _registry.install(None)
    assert state.policy is None and _registry.policy().defaults == {}
    was = modes.precision()
    try:
        modes.set_precision('bf16')
        assert state.compute['precision'] == 'bf16'
    finally:
        modes.set_precision(was)
    report.say('said once', 0, key='a key of this test')
    assert 'a key of this test' in state.said
    package_probes.forget_said()
    assert not state.said
    was = draws.epoch()
    try:
        draws.set_epoch(7)
        assert state.draw_epoch == 7
    finally:
        draws.set_epoch(was)
    assert threads.generation() == state.threads['generation']
    assert allocation.kept() == state.allocation.get('kept', False)
    assert timeline.active() is state.timeline
    assert config.installed() is state.settings  # installed once by an entry point
    assert process_setup.setup() is state.configured and process_setup.applied() == (
        state.configured.applied() if state.configured else {})
    # the owners keep no holder of their own
    for module, gone in ((patches, '_APPLIED'), (report, '_said'),
                         (watchdog, '_ACTIVE'), (watchdog, '_DEFAULTS'), (modes, '_MODE'),
                         (_registry, '_POLICY'), (threads, '_APPLIED'), (threads, '_GENERATION'),
                         (allocation, '_STATE'), (timeline, 'ACTIVE'), (devshm, '_UNLINKED'),
                         (devshm, '_MPI_STARTED'), (abort, '_HOOK'), (abort, '_EXIT'),
                         (abort, '_ON_DISK'), (_window, '_UNFREED'), (draws, '_EPOCH')):
        assert not hasattr(module, gone), (module.__name__, gone)
