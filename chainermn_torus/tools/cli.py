"""The `chainermn-torus` command: a table of subcommands, each a module's ``main(argv)``
with its own options (``chainermn-torus COMMAND --help``).

Subcommand modules are imported when their command runs, not here: ``chainermn-torus
jobscript`` on a login node must not load MPI or numba for ``run`` or ``bench``.
"""
import collections
import importlib
import sys

__all__ = ['main', 'COMMANDS']

# command -> (module, function, usage line)
COMMANDS = collections.OrderedDict([
    ('bench', ('chainermn_torus.tools.bench', 'main',
               'bench allreduce|update|mnist|compute|compute-memory|compute-semantics|'
               'double-buffering|overlap|overlap-report [...]')),
    ('run', ('chainermn_torus.run', 'main',
             'run [--communicator NAME] [--grid MxN] [...] script.py ARGS  (under mpiexec)')),
    ('topology', ('chainermn_torus.tools.topology', 'main',
                  'topology [--policy P] [--ranks-per-node R] [--rank r] [--sysfs ROOT] [...]')),
    ('plan', ('chainermn_torus.tools.plan', 'main',
              'plan --nodes N --ranks-per-node R [--model M] [--network ofp|k|FILE] [...]')),
    ('calibrate', ('chainermn_torus.tools.calibrate', 'main',
                   'calibrate [--output FILE]  (under mpiexec, 2+ nodes)')),
    ('simulate', ('chainermn_torus.tools.simulate', 'main',
                  'simulate --platform fattree|torus|emulated|star --nodes N [...] | '
                  'simulate validate DIR | simulate study [...]  (SimGrid)')),
    ('timeline', ('chainermn_torus.tools.timeline', 'main', 'timeline merge|plot ...')),
    ('jobscript', ('chainermn_torus.tools.jobscript', 'main',
                   'jobscript --system ofp|fugaku|slurm|pbs|local --nodes N [...] '
                   '-- python script.py ...')),
    ('config', ('chainermn_torus.tools.tables', 'config_main',
                'config  (the CHAINERMN_TORUS_* variables)')),
    ('names', ('chainermn_torus.tools.tables', 'names_main', 'names  (communicator names)')),
    ('variants', ('chainermn_torus.tools.tables', 'variants_main',
                  'variants  (algorithm variants: planner, simulator, bench, tests)')),
    ('kernels', ('chainermn_torus.tools.kernel_cache', 'main',
                 'kernels [--processes N] [--list]  (numba kernels into the cache, before a job)')),
    ('elastic', ('chainermn_torus.tools.elastic', 'main',
                 'elastic [--hosts H:R,...] [--min-nodes N] [...] -- python script.py ...  '
                 '(goes on when a node is lost)')),
    ('check', ('chainermn_torus.tools.check', 'main',
               'check [--json]  (what this install has and will use: MPI, oneDNN, numba, ...)')),
    ('clean', ('chainermn_torus.tools.clean', 'main',
               'clean [--dry-run] [--others] [--checkpoint-dir DIR]  (what dead jobs left)')),
])


def usage():
    return 'usage: chainermn-torus COMMAND [options]; COMMAND --help for its options\n\n' + \
        '\n'.join('    chainermn-torus ' + line for _, _, line in COMMANDS.values())


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ('-h', '--help'):
        print(usage())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        sys.stderr.write('chainermn-torus: unknown command {!r}; commands: {} (chainermn-torus '
                         '--help for their options)\n'.format(cmd, ', '.join(COMMANDS)))
        return 2
    module, function, _ = COMMANDS[cmd]
    return getattr(importlib.import_module(module), function)(rest)


if __name__ == '__main__':
    sys.exit(main())
