"""Run an unchanged Chainer/ChainerMN script with chainermn-torus registered.

    mpiexec -n 4 python -m chainermn_torus.run --communicator rsap [--grid 2x2] \\
        [--loader ours --affinity auto --double-buffering ...] train_mnist.py --epoch 2

The script runs as ``__main__`` with its own argv. With ``--communicator``, every
``create_communicator`` call in it returns that communicator whatever name it asked for
(ChainerMN's CPU examples hard-code ``naive``); the other options change what its optimizer
and training iterator become (``chainermn_torus.launch``), and rank 0 says what was
replaced. Its exit code and exceptions are its own.
"""
import argparse
import os
import runpy
import sys
import time
import traceback

import chainermn_torus  # noqa: F401 registered with ChainerMN before the script runs
from chainermn_torus import command_line, config, launch
from chainermn_torus.algorithms.variants import check_grid_option
from chainermn_torus.errors import ConfigError, Refusal, Unsupported
from chainermn_torus.launch import gpu_to_cpu
from chainermn_torus.runtime import report
from chainermn_torus.runtime import world
from chainermn_torus.runtime.watch.abort import ABORT_DELAY_S


def build_parser():
    parser = world.ArgumentParser(  # its errors said by rank 0 only (they were by each)
        prog='python -m chainermn_torus.run',
        # Everything after the script is the script's: an abbreviation would take the
        # script's own --gpu as the launcher's --gpu-to-cpu ("ambiguous option").
        allow_abbrev=False,
        description='Run a Chainer/ChainerMN script with the chainermn-torus communicators '
                    'registered (and optionally forced).')
    command_line.add_arguments(parser, communicator=None, threads=True, segment_size=True)
    launch.add_arguments(parser)
    parser.add_argument('--gpu-calls', action='store_true',
                        help='list the GPU calls the script makes (its source, and the modules '
                             'it imports from its directory), what each becomes under '
                             '--gpu-to-cpu or why it is refused; then exit without running it')
    parser.add_argument('script', help='the Python script to run')
    parser.add_argument('args', nargs=argparse.REMAINDER, help="the script's own arguments")
    return parser


def main(argv=None):
    parser = build_parser()
    opts = parser.parse_args(argv)
    try:
        if not os.path.isfile(opts.script):
            raise ConfigError(f'script not found: {opts.script}')
        if opts.gpu_calls:  # a reading of its source: nothing starts
            known = config.resolve(command_line.flags(parser, opts))
            extra, source = known['gpu_to_cpu_paths'], known.source('gpu_to_cpu_paths')
            trusted = known['trust_gpu_to_cpu_paths']
            print('\n'.join(gpu_to_cpu.listing(opts.script, gpu_to_cpu.paths(
                extra, source or 'CHAINERMN_TORUS_GPU_TO_CPU_PATHS', trusted))))
            return
        job = prepare(opts, parser)
    except Refusal as e:  # a bad option or variable: one line, from the job's first rank
        if config.alone('debug'):  # CHAINERMN_TORUS_DEBUG=1: its traceback too
            traceback.print_exc()
        if world.launcher_rank() in (None, 0):
            report.line(PREFIX + str(e).replace(report.PREFIX, '', 1))
        else:
            # Every rank refuses the same options; rank 0 says it. Its exit ends the job:
            # the others wait for that, since a launcher that ends the job at the first
            # non-zero exit may drop rank 0's line still on its way (seen under Open MPI).
            time.sleep(ABORT_DELAY_S)
        sys.exit(1)
    sys.argv = [opts.script] + list(opts.args)
    # As `python script.py` would: the script's directory first on the path.
    sys.path.insert(0, os.path.dirname(os.path.abspath(opts.script)))
    try:
        # refusals: runtime.watch.abort's hook; under --gpu-to-cpu, the script's builtins
        runpy.run_path(opts.script, run_name='__main__',
                       init_globals=gpu_to_cpu.globals_for_script(job.gpu))
    except (Exception, SystemExit) as e:
        # A script written for GPUs, run without --gpu-to-cpu, that stopped itself (its own
        # CUDA check, import cupy): one line that names the option, not its traceback.
        line = gpu_to_cpu.explain(job.gpu, e)
        if line is None:
            raise
        raise Unsupported(line) from None


PREFIX = 'chainermn_torus.run: '


def prepare(opts, parser=None):
    """Everything before the script runs (the Launch); a Refusal for what cannot start."""
    kwargs = {}
    check_grid_option(opts.communicator, opts.grid)
    if opts.grid is not None:
        kwargs['grid'] = opts.grid
    if opts.segment_size is not None:
        kwargs['segment_size'] = opts.segment_size
    # --communicator forces a name; without it the options still reach every communicator
    # of ours the script makes (the policy's defaults, not the environment).
    forced = None
    if opts.communicator is not None:
        forced, kwargs = (opts.communicator, kwargs), {}
    # Only when the job says how many ranks it expects: otherwise MPI starts with the
    # script's first communicator, as it would without the launcher.
    if world.expected_ranks()[0] is not None:
        from mpi4py import MPI  # starts MPI: the check needs the world's size
        problem = world.mismatch(MPI.COMM_WORLD.size, MPI.Get_library_version())
        if problem:
            # A world of one per process: every process says it (each is its own job's
            # rank 0), so the first lines of the job's output name the cause; in a world
            # of several, its rank 0.
            if MPI.COMM_WORLD.rank == 0:
                report.line(PREFIX + problem)
            sys.exit(1)
    job = launch.Launch(opts, forced=forced, defaults=kwargs)
    job.install()  # the process configured too (process_setup), as for a communicator
    return job


if __name__ == '__main__':
    main()
