"""`chainermn-torus jobscript`: batch-job scripts for the systems this runs on, from one set.

    chainermn-torus jobscript --system ofp --nodes 256 --group GROUP --venv ~/venv \\
        --communicator rsap -- python examples/imagenet/train_imagenet.py train.txt val.txt

writes ``job-<system>.sh`` (``--output`` to choose) or, with ``--dry-run``, prints only the
launch line. Every script loads the modules (``--module``, repeatable) and activates the
virtualenv (``--venv``; default: the one this command runs from) before anything else, and
prints the Python the job really uses; then ``set -euo pipefail``, raised limits where the
site allows, the thread and pinning settings of its MPI (``--mpi``), the number of ranks it
expects (the launcher stops at once, naming a PMI/launcher mismatch, when MPI started
another number), the watchdog, and the launch line: the training script runs unchanged
through ``python -m chainermn_torus.run``. Systems (docs/cluster.md, "Job scripts", has the
table of every directive and its source):

  ofp     Oakforest-PACS: Fujitsu PJM, Intel MPI over Omni-Path, KNL (68 cores, 4 threads
          each). Cores 0-1 (and their hyper-threads) are left to the OS, as the centre's
          own scripts do; PSM2's own pinning is turned off (HFI_NO_CPUAFFINITY=1) so Intel
          MPI's domains hold; regular-flat runs under numactl --preferred=1 (MCDRAM).
  fugaku  Fugaku (A64FX, 48 cores in 4 CMGs): PJM with a node shape, resource group by
          size (small up to 384 nodes), max-proc-per-node, LLIO cache of the volumes the job
          reads, each rank's output in its own file. (The K computer is retired; its
          SPARC64 VIIIfx cannot run numba or Python >= 3.6, so there is no k target.)
  slurm   sbatch + srun: srun is given --cpus-per-task itself (Slurm 22.05-23.02 no longer
          passes the allocation's on), --mpi= for the MPI library (pmi2 / pmix), one
          hardware thread per core; or (--launcher mpiexec, MPICH's default) the MPI's own
          mpiexec inside the allocation, which binds the ranks itself.
  pbs     qsub (PBS Pro select syntax, place=scatter:excl) + the MPI's mpiexec (Hydra's
          -ppn, Open MPI's --map-by ppr).
  local   this machine: the virtualenv's mpiexec; one node.
"""
import argparse
import os
import shlex
import string
import sys

from chainermn_torus import config
from chainermn_torus.algorithms.variants import check_grid_option
from chainermn_torus.communicators._grid import parse_grid
from chainermn_torus.tools import oversubscribe

__all__ = ['SYSTEMS', 'generate', 'launch_line', 'main']

SYSTEMS = ('ofp', 'fugaku', 'slurm', 'pbs', 'local')
RETIRED = {
    'k': 'the K computer was shut down in 2019, and its SPARC64 VIIIfx (Python <= 3.5, no '
         'numba, no LLVM) cannot run this package; --system fugaku writes a job for its '
         'successor',
}

# Nodes whose shape the system fixes: cores, hardware threads per core, and the cores left
# to the operating system (OFP's scripts keep cores 0 and 1 out of every pinning domain).
NODES = {
    'ofp': dict(cores=68, smt=4, os_cores=2),
    'fugaku': dict(cores=48, smt=1, os_cores=0),  # + 2-4 assistant cores the OS already has
}

# The MPI libraries each system's scripts know; the first is the default.
MPIS = {
    'ofp': ('impi',),
    'fugaku': ('fujitsu',),
    'slurm': ('mpich', 'impi', 'openmpi'),
    'pbs': ('mpich', 'impi', 'openmpi'),
    'local': ('mpich',),
}

# srun --mpi= for each MPI library: MPICH and Intel MPI speak PMI-2 (Intel MPI through
# Slurm's libpmi2, I_MPI_PMI_LIBRARY), Open MPI 5 needs PMIx. A mismatch starts every rank
# as a singleton: the launcher's rank-count check names it (runtime.world).
SRUN_PMI = {'mpich': 'pmi2', 'impi': 'pmi2', 'openmpi': 'pmix'}

FUGAKU_SMALL_MAX = 384  # nodes: 'small' up to here, 'large' above (Fugaku's resource groups)

_HEADERS = {
    'ofp': '''#PJM -L rscgrp=${queue}
#PJM -L node=${nodes}
#PJM --mpi proc=${procs}
#PJM -L elapse=${elapse}
#PJM -g ${group}
#PJM -N ${name}
#PJM -j
# Oakforest-PACS: KNL, 68 cores x 4 hardware threads, quadrant mode; the resource group
# chooses the memory mode (regular-flat: MCDRAM is NUMA node 1, used through numactl in the
# launch line; regular-cache: MCDRAM caches DDR4).''',
    'fugaku': '''#PJM -L "node=${node_shape}"
#PJM -L "rscgrp=${queue}"
#PJM -L "elapse=${elapse}"
#PJM --mpi "max-proc-per-node=${ranks_per_node}"
#PJM -g ${group}
#PJM -N ${name}
#PJM -x PJM_LLIO_GFSCACHE=${llio_volumes}
#PJM -s
# Fugaku: A64FX, 48 compute cores in 4 CMGs (NUMA nodes of 12 cores); ${ranks_per_node}
# rank(s) per node. Each rank's stdout and stderr go to files of their own under
# ./${name}.<job id>/ (Fujitsu MPI's -stdout-proc/-stderr-proc, grouped by rank / 1000).''',
    'slurm': '''#SBATCH --job-name=${name}
#SBATCH --nodes=${nodes}
#SBATCH --ntasks-per-node=${ranks_per_node}
#SBATCH --cpus-per-task=${cpus}
#SBATCH --hint=nomultithread
#SBATCH --time=${elapse}
${queue_line}''',
    'pbs': '''#PBS -N ${name}
#PBS -l select=${nodes}:ncpus=${node_cpus}:mpiprocs=${ranks_per_node}:ompthreads=${threads}
#PBS -l place=scatter:excl
#PBS -l walltime=${elapse}
${queue_line}''',
    'local': '''# This machine, ${procs} ranks (oversubscribed if it has fewer cores).''',
}

# Thread and pinning settings, after the environment is set up.
_SETTINGS = {
    'ofp': '''# PSM2 (Omni-Path) pins each process to one CPU at MPI_Init unless told not to; then
# Intel MPI's domains decide: cores 0-1 and their hyper-threads stay with the OS, each rank
# gets ${cpus} cores (${pin_cpus} logical CPUs, 4 per KNL core).
export HFI_NO_CPUAFFINITY=1
export I_MPI_PIN_PROCESSOR_EXCLUDE_LIST=${exclude_cpus}
export I_MPI_PIN_DOMAIN=${pin_domain}
export I_MPI_FABRICS=shm:ofi FI_PROVIDER=psm2
export OMP_NUM_THREADS=${threads} KMP_AFFINITY=granularity=fine,compact,1,0
''',
    'fugaku': '''export OMP_NUM_THREADS=${threads}
export PLE_MPI_STD_EMPTYFILE=off
''',
    'slurm': '''export OMP_NUM_THREADS=${threads}
${pmi_settings}''',
    'pbs': '''export OMP_NUM_THREADS=${threads}
''',
    'local': '${oversubscribed}',
}

_LAUNCH = {
    'ofp': 'mpiexec.hydra -n ${procs} -ppn ${ranks_per_node}${numactl}',
    'fugaku': 'mpiexec -n ${procs} -stdout-proc ./${name}.%j/%/1000r/stdout '
              '-stderr-proc ./${name}.%j/%/1000r/stderr',
    'slurm': {'srun': 'srun --mpi=${pmi} --cpus-per-task=${cpus} --threads-per-core=1 '
                      '--cpu-bind=cores',
              # MPICH's Hydra starts its proxies with srun (-launcher slurm) and serves PMI
              # itself; it binds the ranks.
              'mpich': 'mpiexec -launcher slurm -n ${procs} -ppn ${ranks_per_node} '
                       '-bind-to core:${cpus}',
              'impi': 'mpiexec.hydra -n ${procs} -ppn ${ranks_per_node} '
                      '-genv I_MPI_PIN_DOMAIN=${cpus}',
              'openmpi': 'mpiexec -n ${procs} --map-by ppr:${ranks_per_node}:node:PE=${cpus} '
                         '--bind-to core${forward}'},
    'pbs': {'mpich': 'mpiexec -n ${procs} -ppn ${ranks_per_node} -bind-to core:${cpus}',
            'impi': 'mpiexec -n ${procs} -ppn ${ranks_per_node} -genv I_MPI_PIN_DOMAIN=${cpus}',
            'openmpi': 'mpiexec -n ${procs} --map-by ppr:${ranks_per_node}:node:PE=${cpus} '
                       '--bind-to core${forward}'},
    'local': '${mpiexec} -n ${procs}',
}

_TEMPLATE = '''#!/bin/bash
${header}
${workdir_line}${environment}set -euo pipefail
# Raise what the site lets a job raise (open files for many ranks' connections, stack
# for deep recursion); a hard limit below stays as it is.
ulimit -n "$$(ulimit -Hn)" 2>/dev/null || true
ulimit -s unlimited 2>/dev/null || true
${settings}${nodes_lines}# What the ranks apply (chainermn-torus config): compute threads, loader cores, the rank
# count MPI must start (the launcher stops on another: a PMI/launcher mismatch).
export CHAINERMN_TORUS_THREADS=${threads}
${dedicated_line}export CHAINERMN_TORUS_EXPECT_RANKS=${procs}
${grid_line}${watchdog_line}echo "chainermn-torus job ${name}: ${nodes_now} node(s) x ${ranks_per_node} rank(s), ${threads} compute thread(s) per rank, communicator ${communicator}, ${mpi} MPI, on $$(hostname) at $$(date)"
echo "python: $$(command -v python) ($$(python -c 'import sys; print(sys.version.split()[0], sys.prefix)'))"
${launch}
'''


def _elapse(hours):
    seconds = int(round(hours * 3600))
    return '{:02d}:{:02d}:{:02d}'.format(seconds // 3600, seconds // 60 % 60, seconds % 60)


def _venv_root(path):
    """The virtualenv's root from its root or its bin directory (as given: the path is the
    cluster's, it need not exist here). ``~/x`` and ``$HOME/x`` stay relative to the home
    directory of whoever runs the job."""
    home = None
    for prefix in ('~/', '$HOME/', '${HOME}/'):
        if path.startswith(prefix):
            home, path = True, path[len(prefix):].rstrip('/')
    if not home:  # a relative path stays relative to the job's directory (local's --workdir)
        path = os.path.normpath(os.path.expanduser(path))
    if os.path.basename(path) == 'bin' or (not home and
                                           os.path.exists(os.path.join(path, 'activate'))):
        path = os.path.dirname(path)
    return '$HOME/' + path if home else path


def _shell_path(path):
    """A path for the script: quoted, with a leading $HOME left to the shell."""
    if path.startswith('$HOME/'):
        return '"$HOME"/' + shlex.quote(path[len('$HOME/'):])
    return shlex.quote(path)


def _default_venv():
    """This Python's virtualenv (the usual case: generated on a login node that shares the
    file system), or None outside one."""
    return sys.prefix if sys.prefix != getattr(sys, 'base_prefix', sys.prefix) else None


def _wrap_command(command, communicator, system, venv=None, grid=None):
    """python script.py ARGS -> python -m chainermn_torus.run --communicator C [--grid G]
    script.py ARGS."""
    if not command:
        raise ValueError('the training command is missing: put it after "--", e.g. -- python '
                         'examples/mnist/train_mnist.py --epoch 1')
    exe, rest = command[0], command[1:]
    if os.path.basename(exe).startswith('python') and rest and rest[0] not in ('-m', '-c'):
        if system == 'local' and exe == 'python':
            exe = os.path.join(venv or _default_venv() or sys.prefix, 'bin', 'python')
        return ([exe, '-m', 'chainermn_torus.run', '--communicator', communicator] +
                (['--grid', grid] if grid else []) + rest)
    return list(command)  # not a python script: run as given (it chooses its communicator)


def _check_node_shape(shape, nodes):
    """Fugaku node shapes: 1 to 3 dimensions "A", "AxB", "AxBxC" whose product is --nodes."""
    parts = shape.lower().split('x')
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError('--node-shape must be 1 to 3 positive integers joined by "x" (e.g. '
                         '4x4x4), got {!r}'.format(shape))
    product = 1
    for p in parts:
        product *= int(p)
    if product != nodes:
        raise ValueError('--node-shape {} holds {} nodes but --nodes is {}'.format(
            shape, product, nodes))


def _check(args):
    if args.system in RETIRED:
        raise ValueError('--system {}: {}'.format(args.system, RETIRED[args.system]))
    if args.system not in SYSTEMS:
        raise ValueError('unknown system {!r}; choose from {}'.format(args.system,
                                                                    ', '.join(SYSTEMS)))
    if args.nodes < 1 or args.ranks_per_node < 1:
        raise ValueError('--nodes and --ranks-per-node must be >= 1, got {} and {}'.format(
            args.nodes, args.ranks_per_node))
    if args.watchdog < 0:
        raise ValueError('--watchdog must be >= 0 seconds (0: off), got {}'.format(
            args.watchdog))
    if not args.hours > 0:
        raise ValueError('--hours must be > 0, got {}'.format(args.hours))
    if args.system == 'local' and args.nodes != 1:
        raise ValueError('--system local runs on this machine: --nodes must be 1, got {}'
                         .format(args.nodes))
    mpi = args.mpi or MPIS[args.system][0]
    if mpi not in MPIS[args.system]:
        raise ValueError('--mpi {} on {}: its scripts know {}'.format(
            mpi, args.system, ', '.join(MPIS[args.system])))
    if args.loader_cores is not None and args.loader_cores < 0:
        raise ValueError('--loader-cores must be >= 0, got {}'.format(args.loader_cores))
    node = NODES.get(args.system)
    if node:
        usable = node['cores'] - node['os_cores']
        if args.ranks_per_node > usable:
            raise ValueError('{} nodes have {} cores for ranks ({} in all, {} kept for the '
                             'OS): --ranks-per-node {} does not fit'.format(
                                 args.system, usable, node['cores'], node['os_cores'],
                                 args.ranks_per_node))
    if args.node_shape is not None:
        if args.system != 'fugaku':
            raise ValueError('--node-shape is for fugaku (a Tofu job shape), not {}'.format(
                args.system))
        _check_node_shape(args.node_shape, args.nodes)
    if args.system in ('ofp', 'fugaku') and not args.group:
        raise ValueError('--group is required for {}: PJM charges the job to a project group '
                         '(your account page names it)'.format(args.system))
    if args.grid:
        check_grid_option(args.communicator, args.grid)
        parse_grid(args.grid, args.nodes * args.ranks_per_node,
                   source='--grid for {} nodes x {} ranks per node'.format(
                       args.nodes, args.ranks_per_node))
    _cores(args)  # the per-rank split must leave a compute core


def _cores(args):
    """(cores per rank, compute threads per rank, loader cores per rank)."""
    node = NODES.get(args.system)
    if node:
        per_rank = (node['cores'] - node['os_cores']) // args.ranks_per_node
        loader = args.loader_cores
        if loader is None:  # OFP with one rank: 64 compute + 2 loader cores (seed 000)
            loader = 0 if per_rank == 1 else (2 if per_rank >= 32 else 1)
        threads = args.threads or per_rank - loader
    else:
        loader = args.loader_cores or 0
        threads = args.threads or 1
        per_rank = threads + loader
    if threads < 1 or threads + loader > per_rank:
        raise ValueError('{} cores per rank cannot hold {} compute thread(s) and {} loader '
                         'core(s); lower --threads or --loader-cores, or use fewer ranks per '
                         'node'.format(per_rank, threads, loader))
    return per_rank, threads, loader


# Slurm: srun, or the MPI's own mpiexec inside the allocation. MPICH's default is mpiexec:
# under a real Slurm 22.05 (tests/test_slurm.py), srun --mpi=pmi2 with the MPICH wheel failed
# now and then in MPI_Init (slurmstepd: "mpi/pmi2: value not properly terminated" on the
# network-address exchange) and the ranks then hung there; Hydra's own PMI never did.
SLURM_LAUNCHER = {'mpich': 'mpiexec', 'impi': 'srun', 'openmpi': 'srun'}


def _launcher(args, mpi):
    if args.system != 'slurm':
        return 'mpiexec'
    return args.launcher or SLURM_LAUNCHER[mpi]


# Where the rank count follows the allocation: the shell expression of its node count. A
# job that lost a node is resubmitted on fewer with the same script (sbatch --nodes=3, or a
# requeue onto a smaller allocation), starts that many ranks, and --auto-resume continues
# its checkpoint on them (extensions.checkpoint: another rank count). A --grid pins P, and
# PJM's scripts name their node count in the resource line: those stay fixed.
_ALLOCATED_NODES = {
    'slurm': '$${SLURM_JOB_NUM_NODES:-${nodes}}',
    'pbs': '$$(sort -u "$${PBS_NODEFILE:-/dev/null}" | wc -l)',
}


def _follows_allocation(args):
    return args.system in _ALLOCATED_NODES and not args.grid


def _values(args):
    procs = args.nodes * args.ranks_per_node
    mpi = args.mpi or MPIS[args.system][0]
    per_rank, threads, loader = _cores(args)
    queue = args.queue or {'ofp': 'regular-cache',
                           'fugaku': 'small' if args.nodes <= FUGAKU_SMALL_MAX else 'large'
                           }.get(args.system, '')
    queue_line = {'slurm': '#SBATCH --partition={}', 'pbs': '#PBS -q {}'}.get(
        args.system, '{}').format(queue) if queue else '# (the default queue)'
    exclude = ''
    if args.system == 'ofp':  # cores 0-1 and their hyper-threads (CPU c + 68 k)
        exclude = ','.join(str(c + 68 * k) for k in range(4) for c in range(2))
    # Open MPI's mpiexec passes no variable it is not told to (Hydra and srun pass all).
    exported = ['OMP_NUM_THREADS', 'CHAINERMN_TORUS_THREADS', 'CHAINERMN_TORUS_EXPECT_RANKS']
    exported += ['CHAINERMN_TORUS_WATCHDOG'] if args.watchdog else []
    exported += ['CHAINERMN_TORUS_DEDICATED_CORES'] if loader else []
    exported += ['CHAINERMN_TORUS_GRID'] if args.grid else []
    forward = ''.join(' -x {}'.format(v) for v in exported)
    venv = _venv_root(args.venv) if args.venv else _default_venv()
    nodes_now, nodes_lines = args.nodes, ''
    if _follows_allocation(args):
        nodes_lines = ('# The ranks follow the allocation: resubmitted on another number of '
                       'nodes, the same\n# script starts that many ranks (--auto-resume '
                       'continues a checkpoint on them).\nNODES={}\n'
                       '[ "$NODES" -ge 1 ] || NODES={}\nPROCS=$((NODES * {}))\n').format(
                           string.Template(_ALLOCATED_NODES[args.system]).safe_substitute(
                               nodes=args.nodes), args.nodes, args.ranks_per_node)
        procs, nodes_now = '$PROCS', '$NODES'
    return {
        'name': args.name, 'nodes': args.nodes, 'ranks_per_node': args.ranks_per_node,
        'nodes_lines': nodes_lines, 'nodes_now': nodes_now,
        'procs': procs, 'elapse': _elapse(args.hours), 'threads': threads, 'cpus': per_rank,
        'node_cpus': per_rank * args.ranks_per_node,
        'loader_cores': loader, 'queue': queue, 'queue_line': queue_line,
        'group': args.group, 'mpi': mpi, 'pmi': args.pmi or SRUN_PMI.get(mpi, 'pmi2'),
        'launcher': _launcher(args, mpi),
        'pin_domain': 'node' if args.ranks_per_node == 1 else '{}:compact'.format(4 * per_rank),
        'pin_cpus': 4 * per_rank, 'exclude_cpus': exclude,
        'numactl': ' numactl --preferred=1' if args.system == 'ofp' and 'flat' in queue else '',
        'node_shape': args.node_shape or str(args.nodes),
        'llio_volumes': args.llio_volumes, 'forward': forward,
        'communicator': args.communicator, 'venv': venv,
        'workdir': shlex.quote(args.workdir or os.getcwd()),
        'mpiexec': shlex.quote(os.path.join(venv or sys.prefix, 'bin', 'mpiexec')),
    }


def _environment(args, values):
    """Modules, then the virtualenv: the python every rank runs must be the venv's."""
    lines = []
    if args.module:
        lines.append('# Modules first: the virtualenv was built against them.')
        lines.append('if ! command -v module >/dev/null 2>&1; then')
        lines.append('    . /etc/profile.d/modules.sh 2>/dev/null || true')
        lines.append('fi')
        lines.extend('module load {}'.format(shlex.quote(m)) for m in args.module)
    if values['venv']:
        lines.append('# The virtualenv (chainer, mpi4py, chainermn_torus): batch jobs do not '
                     'inherit an activated one.')
        lines.append('. {}'.format(_shell_path(os.path.join(values['venv'], 'bin', 'activate'))))
    else:
        lines.append('# No --venv: the python on PATH after the modules runs the job.')
    return '\n'.join(lines) + '\n'


def _oversubscribed(args, values):
    """local: more ranks than this machine's cores make waiting ranks sleep instead of
    spinning, with the MPI's own setting (tools/oversubscribe.py)."""
    found = oversubscribe.SETTINGS.get(values['mpi'])
    if args.system != 'local' or not found:
        return ''
    # Decided where the script runs (the machine it was written on may have other cores).
    return ('# More ranks than cores here: a waiting rank gives its core up instead of spinning.\n'
            'if [ "$(nproc)" -lt {} ]; then\n    export {}\nfi\n'.format(
                values['procs'],
                ' '.join('{}={}'.format(k, v) for k, v in sorted(found.items()))))


def _pmi_settings(values):
    """What the MPI library needs to speak srun's PMI (MPICH's client speaks Slurm's pmi2 as
    it is: tests/test_slurm.py)."""
    if values['launcher'] != 'srun':
        return ''
    if values['mpi'] == 'impi' and values['pmi'] == 'pmi2':
        return ('# Intel MPI under srun --mpi=pmi2 loads Slurm\'s PMI-2 library: set its path if '
                'the site has not\nexport I_MPI_PMI_LIBRARY=$${I_MPI_PMI_LIBRARY:-/usr/lib64/'
                'libpmi2.so}\n')
    return ''


def launch_line(args, values=None):
    values = values or _values(args)
    launcher = _LAUNCH[args.system]
    if isinstance(launcher, dict):
        launcher = launcher['srun' if values['launcher'] == 'srun' else values['mpi']]
    launcher = string.Template(launcher).substitute(values)
    command = _wrap_command(args.command, args.communicator, args.system, values['venv'],
                            args.grid)
    return launcher + ' ' + ' '.join(shlex.quote(c) for c in command)


def generate(args):
    _check(args)
    values = _values(args)
    values['header'] = string.Template(_HEADERS[args.system]).substitute(values).rstrip('\n')
    values['environment'] = _environment(args, values)
    values['pmi_settings'] = _pmi_settings(values)
    values['oversubscribed'] = _oversubscribed(args, values)
    values['settings'] = string.Template(_SETTINGS[args.system]).substitute(values)
    values['launch'] = launch_line(args, values)
    values['workdir_line'] = {
        'local': 'cd {}\n'.format(values['workdir']),
        'pbs': 'cd "$${PBS_O_WORKDIR:-.}"\n'.replace('$$', '$'),
    }.get(args.system, '')
    # The grid goes to the launcher as --grid; a command that is not a Python script (it
    # chooses its own communicator) can only be reached through the environment.
    wrapped = '-m chainermn_torus.run' in values['launch']
    values['grid_line'] = ('export CHAINERMN_TORUS_GRID={}\n'.format(args.grid)
                           if args.grid and not wrapped else '')
    values['dedicated_line'] = ('export CHAINERMN_TORUS_DEDICATED_CORES={}\n'.format(
        values['loader_cores']) if values['loader_cores'] else '')
    values['watchdog_line'] = (
        '# A rank that stops (a frozen peer) ends the job instead of the time limit.\n'
        'export CHAINERMN_TORUS_WATCHDOG={:g}\n'.format(args.watchdog) if args.watchdog else '')
    return string.Template(_TEMPLATE).substitute(values)


def build_parser():
    p = argparse.ArgumentParser(prog='chainermn-torus jobscript',
                                description=__doc__.split('\n')[0])
    p.add_argument('--system', required=True, help=', '.join(SYSTEMS))
    p.add_argument('--nodes', type=int, required=True)
    p.add_argument('--ranks-per-node', type=int, default=1)
    p.add_argument('--hours', type=float, default=1.0)
    config.add_arguments(p, communicator='rsap')
    p.add_argument('--loader-cores', type=int, default=None, metavar='L',
                   help='cores per rank for the loader processes (ofp/fugaku: the cores a '
                        "rank's share leaves after --threads; elsewhere added to "
                        '--cpus-per-task; default: 2 with one rank per node on ofp, else 1 '
                        'on ofp/fugaku, 0 elsewhere)')
    p.add_argument('--mpi', default=None,
                   help='the MPI library of the job: ofp impi, fugaku fujitsu, slurm and pbs '
                        'mpich (default), impi or openmpi')
    p.add_argument('--launcher', choices=('srun', 'mpiexec'), default=None,
                   help="slurm: start the ranks with srun, or with the MPI's own mpiexec in "
                        'the allocation (default: mpiexec for mpich, srun for impi and openmpi)')
    p.add_argument('--pmi', default=None,
                   help="slurm: srun --mpi= (default: the MPI library's: pmi2, or pmix for "
                        'openmpi)')
    p.add_argument('--venv', default=None, metavar='DIR',
                   help="the virtualenv the job runs (its root or bin directory; default: "
                        "the one this command runs from)")
    p.add_argument('--module', action='append', default=[], metavar='NAME',
                   help='a module to load before the virtualenv (repeatable)')
    p.add_argument('--queue', default=None, help='resource group / partition / queue')
    p.add_argument('--group', default=None, help='PJM project group (ofp, fugaku)')
    p.add_argument('--node-shape', default=None, help='fugaku: node shape, e.g. 4x6x16')
    p.add_argument('--llio-volumes', default='/vol0004',
                   help='fugaku: the volumes the job reads, cached by LLIO (colon-separated; '
                        'default %(default)s)')
    p.add_argument('--watchdog', type=float, default=900, metavar='SECONDS',
                   help='abort the job when no training step finishes for this long '
                        '(default %(default)s; 0: off; chainermn_torus.runtime.watchdog)')
    p.add_argument('--workdir', default=None,
                   help='local: directory the job runs in (default: the current one)')
    p.add_argument('--name', default='chainermn-torus')
    p.add_argument('--output', default=None, help='default job-<system>.sh')
    p.add_argument('--dry-run', action='store_true', help='print only the launch line')
    p.add_argument('command', nargs=argparse.REMAINDER)
    return p


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    if args.command[:1] == ['--']:
        args.command = args.command[1:]
    try:
        if args.dry_run:  # the line as it runs on the --nodes asked for
            _check(args)
            values = _values(args)
            values['procs'] = args.nodes * args.ranks_per_node
            print(launch_line(args, values))
            return 0
        text = generate(args)
        out = args.output or 'job-{}.sh'.format(args.system)
        directory = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
            raise ValueError('cannot write {}: directory {} does not exist or is not '
                             'writable'.format(out, directory))
    except ValueError as e:
        sys.stderr.write('chainermn-torus jobscript: {}\n'.format(e))
        return 2
    with open(out, 'w') as f:
        f.write(text)
    os.chmod(out, 0o755)
    print('wrote {} ({})'.format(out, launch_line(args)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
