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
through ``python -m chainermn_torus.run``. The systems (``jobscripts.systems``, one
description each; docs/cluster.md, "Job scripts", has the table of every directive and its
source) are listed by ``--help``.
"""
import argparse
import os
import sys
import textwrap

from chainermn_torus import command_line
from chainermn_torus.extensions.checkpoint import in_memory
from chainermn_torus.tools import result_paths
from chainermn_torus.tools.jobscripts import render, systems
from chainermn_torus.tools.jobscripts.job import AS_MANY, Job

__all__ = ['build_parser', 'main']

def _output(value):
    if not value.strip():
        raise argparse.ArgumentTypeError(f'must name a file, got {value!r}')
    return value


def build_parser():
    p = argparse.ArgumentParser(
        prog='chainermn-torus jobscript', description=__doc__.split('\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='systems:\n' + '\n'.join(textwrap.fill(
            ' '.join(s.__doc__.split()), 88, initial_indent=f'  {name:8}',
            subsequent_indent=' ' * 10) for name, s in systems.SYSTEMS.items()))
    p.add_argument('--system', required=True, help=', '.join(systems.SYSTEMS))
    p.add_argument('--nodes', type=int, required=True)
    p.add_argument('--ranks-per-node', type=int, default=1)
    p.add_argument('--hours', type=float, default=1.0)
    command_line.add_arguments(p, communicator='rsap')
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
    p.add_argument('--no-venv-check', dest='venv_unchecked', action='store_true',
                   help='write the script even where --venv is no virtualenv on this machine '
                        '(a path that exists only on the compute nodes)')
    p.add_argument('--module', action='append', default=[], metavar='NAME',
                   help='a module to load before the virtualenv (repeatable)')
    p.add_argument('--queue', default=None,
                   help='resource group / partition / queue')
    p.add_argument('--group', default=None, help='PJM project group (ofp, fugaku)')
    p.add_argument('--node-shape', default=None,
                   help='fugaku: node shape, e.g. 4x6x16')
    p.add_argument('--llio-volumes', default='/vol0004',
                   help='fugaku: the volumes the job reads, cached by LLIO (colon-separated; '
                        'default %(default)s)')
    p.add_argument('--watchdog', type=float, default=900, metavar='SECONDS',
                   help='abort the job when no training step finishes for this long '
                        '(default %(default)s; 0: off; chainermn_torus.runtime.watch.watchdog)')
    p.add_argument('--elastic', action='store_true',
                   help='slurm: the job goes on on the nodes left when one is lost '
                        '(sbatch --no-kill, chainermn-torus elastic starts each step; the '
                        'script keeps snapshots in node memory: docs/cluster.md, "When a node '
                        'is lost")')
    p.add_argument('--memory-snapshots', type=int, default=None, metavar='K',
                   help='with --elastic: the steps keep a snapshot in node memory every K '
                        'iterations, what the nodes left go on from '
                        f'(default {in_memory.DEFAULT_K}; a command '
                        'that gives its own --memory-snapshots keeps it)')
    p.add_argument('--virtual-ranks', type=int, nargs='?', const=AS_MANY, default=None,
                   metavar='V', help='the job computes as V virtual ranks (bare: its ranks): '
                   'the same bits on any number of ranks; with --elastic a lost node leaves '
                   'no trace (docs/cluster.md, "The same bits on any number of nodes")')
    p.add_argument('--min-nodes', type=int, default=1, metavar='N',
                   help='with --elastic: end the job where fewer nodes are left (default 1)')
    p.add_argument('--workdir', default=None,
                   help='local: directory the job runs in (default: the current one)')
    p.add_argument('--name', default='chainermn-torus')
    p.add_argument('--output', default=None, type=_output, help='default job-<system>.sh')
    p.add_argument('--dry-run', action='store_true', help='print only the launch line')
    p.add_argument('command', nargs=argparse.REMAINDER)
    return p


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    job = Job.from_args(args)
    try:
        if args.dry_run:  # the line as it runs on the --nodes asked for
            system = render.check(job)
            values = render.values(job, system)
            values['procs'] = job.procs
            print(render.launch_line(job, values, system))
            return 0
        text = render.generate(job)
        out = args.output or f'job-{args.system}.sh'
        result_paths.check_writable(out, '--output')
    except ValueError as e:
        sys.stderr.write(f'chainermn-torus jobscript: {e}\n')
        return 2
    with open(out, 'w') as f:
        f.write(text)
    os.chmod(out, 0o755)
    print(f'wrote {out} ({render.launch_line(job)})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
