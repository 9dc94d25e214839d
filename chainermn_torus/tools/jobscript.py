"""`chainermn-torus jobscript`: batch-job scripts for the systems this runs on, from one set.

    chainermn-torus jobscript --system ofp --nodes 256 --ranks-per-node 1 --hours 2 \\
        --communicator rsap -- python examples/imagenet/train_imagenet.py train.txt val.txt

writes ``job-<system>.sh`` (``--output`` to choose) or, with ``--dry-run``, prints only the
launch line. Every script: ``set -euo pipefail``; the thread and affinity variables of its
MPI; raised limits where the site allows (open files, stack; see docs/cluster.md,
"Troubleshooting");
the watchdog (``--watchdog``, 900 s by default: a rank that stops ends the job);
the communicator and grid through ``python -m chainermn_torus.run`` so that the training
script itself stays unchanged; a line saying where it runs. Systems:

  ofp    Oakforest-PACS: Fujitsu PJM, Intel MPI, KNL (68 cores). One rank per node by
         default, 64 compute threads, the loader on the remaining cores (seed 000);
         the memory mode comes from the resource group (flat / cache).
  k      K computer and successors: PJM with a node shape, rank map, FlatMPI (several
         single-threaded ranks per node, seed 002), stage-in of the dataset and stage-out of
         the results.
  slurm  sbatch / srun with core binding.
  pbs    qsub (PBS Pro select syntax) / mpiexec.
  local  this machine: the virtualenv's mpiexec; one node.
"""
import argparse
import os
import shlex
import string
import sys

from chainermn_torus import config

__all__ = ['SYSTEMS', 'generate', 'launch_line', 'main']

CORES = {'ofp': 68, 'k': 8}  # cores per node where the system fixes it

_HEADERS = {
    'ofp': '''#PJM -L rscgrp=${queue}
#PJM -L node=${nodes}
#PJM --mpi proc=${procs}
#PJM -L elapse=${elapse}
#PJM -g ${group}
#PJM -N ${name}
#PJM -j
# Oakforest-PACS (KNL, 68 cores). Memory mode = the resource group: regular-flat puts
# MCDRAM beside DDR4 as its own NUMA node (numactl --preferred=1 keeps arrays there),
# regular-cache uses it as a cache; the cluster mode is quadrant.
module load impi
# One rank per node: the whole node is its pinning domain; compute threads on the first
# ${threads} cores, one per core; the loader processes take the cores left (--affinity).
export I_MPI_PIN_DOMAIN=${pin_domain}
export OMP_NUM_THREADS=${threads} KMP_HW_SUBSET=${threads}c,1t
export KMP_AFFINITY=granularity=fine,compact
export CHAINERMN_TORUS_THREADS=${threads}
''',
    'k': '''#PJM --rsc-list "node=${node_shape}"
#PJM --rsc-list "elapse=${elapse}"
#PJM --rsc-list "rscgrp=${queue}"
#PJM --mpi "proc=${procs}"
#PJM --mpi "${rank_map}"
#PJM --stg-transfiles all
#PJM --stgin "rank=* ${stage_in} %r:./data/"
#PJM --stgout "rank=0 %r:./results/* ${stage_out}"
#PJM -s
# K computer: ${ranks_per_node} rank(s) per node (FlatMPI when 8: one single-threaded rank
# per core); the dataset is staged in to every rank's local disk as ./data/.
. /work/system/Env_base
export OMP_NUM_THREADS=${threads} PARALLEL=${threads}
export CHAINERMN_TORUS_THREADS=${threads}
mkdir -p results
''',
    'slurm': '''#SBATCH --job-name=${name}
#SBATCH --nodes=${nodes}
#SBATCH --ntasks-per-node=${ranks_per_node}
#SBATCH --cpus-per-task=${threads}
#SBATCH --time=${elapse}
${queue_line}
export OMP_NUM_THREADS=${threads}
export CHAINERMN_TORUS_THREADS=${threads}
''',
    'pbs': '''#PBS -N ${name}
#PBS -l select=${nodes}:ncpus=${cores}:mpiprocs=${ranks_per_node}
#PBS -l walltime=${elapse}
${queue_line}
cd "$${PBS_O_WORKDIR:-.}"
export OMP_NUM_THREADS=${threads}
export CHAINERMN_TORUS_THREADS=${threads}
''',
    'local': '''# This machine, ${procs} ranks (oversubscribed if it has fewer cores).
cd ${workdir}
''',
}

_LAUNCH = {
    'ofp': 'mpiexec.hydra -n ${procs} -ppn ${ranks_per_node}',
    'k': 'mpiexec -n ${procs} -of-proc results/output.%r',
    'slurm': 'srun --cpu-bind=cores',
    'pbs': 'mpiexec -n ${procs} -ppn ${ranks_per_node}',
    'local': '${mpiexec} -n ${procs}',
}

SYSTEMS = tuple(_HEADERS)

_TEMPLATE = '''#!/bin/bash
${header}
set -euo pipefail
# Crash... crash...: raise what the site lets a job raise (open files for many ranks'
# connections, stack for deep recursion); a hard limit below stays as it is.
ulimit -n "$$(ulimit -Hn)" 2>/dev/null || true
ulimit -s unlimited 2>/dev/null || true
${grid_line}${watchdog_line}echo "chainermn-torus job ${name}: ${nodes} node(s) x ${ranks_per_node} rank(s), communicator ${communicator}, on $$(hostname) at $$(date)"
${launch}
'''


def _elapse(hours):
    seconds = int(round(hours * 3600))
    return '{:02d}:{:02d}:{:02d}'.format(seconds // 3600, seconds // 60 % 60, seconds % 60)


def _wrap_command(command, communicator, system, venv_bin=None, grid=None):
    """python script.py ARGS -> python -m chainermn_torus.run --communicator C [--grid G]
    script.py ARGS."""
    if not command:
        raise ValueError('the training command is missing: put it after "--", e.g. -- python '
                         'examples/mnist/train_mnist.py --epoch 1')
    exe, rest = command[0], command[1:]
    if os.path.basename(exe).startswith('python') and rest and rest[0] not in ('-m', '-c'):
        if system == 'local' and exe == 'python':
            exe = os.path.join(venv_bin or _venv_bin(), 'python')
        return ([exe, '-m', 'chainermn_torus.run', '--communicator', communicator] +
                (['--grid', grid] if grid else []) + rest)
    return list(command)  # not a python script: run as given (it chooses its communicator)


def _venv_bin():
    return os.path.dirname(sys.executable)


def _check_node_shape(shape, nodes):
    """K/Fugaku node shapes: 1 to 3 dimensions "A", "AxB", "AxBxC" whose product is --nodes."""
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
    cores = CORES.get(args.system)
    if cores and args.ranks_per_node > cores:
        raise ValueError('{} nodes have {} cores: --ranks-per-node {} does not fit'.format(
            args.system, cores, args.ranks_per_node))
    if args.node_shape is not None:
        _check_node_shape(args.node_shape, args.nodes)
    if args.system == 'ofp' and not args.group:
        raise ValueError('--group is required for ofp: PJM charges the job to a project '
                         'group (pjstat --rsc / your account page names it)')
    if args.grid:
        from chainermn_torus.communicators.variants import check_grid_option
        check_grid_option(args.communicator, args.grid)
        from chainermn_torus.communicators._grid import parse_grid
        parse_grid(args.grid, args.nodes * args.ranks_per_node,
                   source='--grid for {} nodes x {} ranks per node'.format(
                       args.nodes, args.ranks_per_node))


def _values(args):
    procs = args.nodes * args.ranks_per_node
    if args.system == 'ofp':
        # 64 of the 68 cores compute (seed 000); the OS and the loader get the rest.
        threads = args.threads or max(1, 64 // args.ranks_per_node)
    elif args.system == 'k':
        threads = args.threads or max(1, 8 // args.ranks_per_node)
    else:
        threads = args.threads or 1
    queue = args.queue or {'ofp': 'regular-cache', 'k': 'small'}.get(args.system, '')
    queue_line = {'slurm': '#SBATCH --partition={}', 'pbs': '#PBS -q {}'}.get(
        args.system, '{}').format(queue) if queue else '# (default queue)'
    return {
        'name': args.name, 'nodes': args.nodes, 'ranks_per_node': args.ranks_per_node,
        'procs': procs, 'elapse': _elapse(args.hours), 'threads': threads,
        'cores': threads * args.ranks_per_node, 'queue': queue, 'queue_line': queue_line,
        'group': args.group,
        'pin_domain': 'node' if args.ranks_per_node == 1 else 'omp',
        'node_shape': args.node_shape or str(args.nodes),
        'rank_map': 'rank-map-bynode' if args.ranks_per_node == 1 else 'rank-map-bychip',
        'stage_in': args.stage_in or './data/*', 'stage_out': args.stage_out or './results/',
        'communicator': args.communicator,
        'workdir': shlex.quote(args.workdir or os.getcwd()),
        'mpiexec': shlex.quote(os.path.join(args.venv or _venv_bin(), 'mpiexec')),
    }


def launch_line(args, values=None):
    values = values or _values(args)
    launcher = string.Template(_LAUNCH[args.system]).substitute(values)
    command = _wrap_command(args.command, args.communicator, args.system, args.venv, args.grid)
    return launcher + ' ' + ' '.join(shlex.quote(c) for c in command)


def generate(args):
    _check(args)
    values = _values(args)
    values['header'] = string.Template(_HEADERS[args.system]).substitute(values).rstrip('\n')
    values['launch'] = launch_line(args, values)
    # The grid goes to the launcher as --grid; a command that is not a Python script (it
    # chooses its own communicator) can only be reached through the environment.
    wrapped = '-m chainermn_torus.run' in values['launch']
    values['grid_line'] = ('export CHAINERMN_TORUS_GRID={}\n'.format(args.grid)
                           if args.grid and not wrapped else '')
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
    p.add_argument('--queue', default=None, help='resource group / partition / queue')
    p.add_argument('--group', default=None, help='PJM project group (ofp)')
    p.add_argument('--node-shape', default=None, help='K: node shape, e.g. 4x4x4')
    p.add_argument('--stage-in', default=None, help='K: files staged to every rank')
    p.add_argument('--stage-out', default=None, help='K: where rank 0 results go')
    p.add_argument('--watchdog', type=float, default=900, metavar='SECONDS',
                   help='abort the job when no training step finishes for this long '
                        '(default %(default)s; 0: off; chainermn_torus.runtime.watchdog)')
    p.add_argument('--workdir', default=None,
                   help='local: directory the job runs in (default: the current one)')
    p.add_argument('--venv', default=None, metavar='BIN',
                   help="local: the virtualenv's bin directory (default: this Python's)")
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
        if args.dry_run:
            _check(args)
            print(launch_line(args))
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
