"""Did MPI start the ranks the batch job asked for? Checked by the launcher at start.

The classic first-job failure on a cluster: the job asks for N ranks, but the processes
are started by a launcher whose process-management interface (PMI) the MPI library does not
speak: ``srun --mpi=pmix`` for an MPICH build, another MPI's ``mpiexec``, no ``--mpi`` where
the site's default is wrong. Each process then initialises MPI alone, as a world of one,
and trains its own model from the same script, writing the same checkpoint directory, with
nothing to say it is wrong. The expectation comes from the job script
(``CHAINERMN_TORUS_EXPECT_RANKS``, nodes x ranks per node). Without it, a process that is
a world of one while ``srun`` started several tasks in its step (``SLURM_STEP_NUM_TASKS``)
is the same mismatch; srun's count is used for nothing else, because under an MPI's own
``mpiexec`` inside an allocation it counts the batch step or the MPI's node daemons, not
ranks.
"""
import argparse
import os
import sys
import time

from chainermn_torus import settings_table
# Where each launcher tells a process its rank before MPI starts: MPICH's and Intel MPI's
# hydra, Open MPI's prterun, PMIx, srun.
from chainermn_torus.watchers.processes import RANK_VARIABLES

__all__ = ['expected_ranks', 'mismatch', 'launcher_rank', 'ArgumentParser',
           'USAGE_ERROR_WAIT_S']

USAGE_ERROR_WAIT_S = 1.0  # a rank other than 0 waits this long before its usage-error exit


def expected_ranks(environ=None):
    """(ranks, where the number comes from), or (None, None) when nothing says."""
    environ = os.environ if environ is None else environ
    setting = settings_table.SETTINGS['expect_ranks']
    raw = environ.get(setting.env)
    value = settings_table.parse(setting.kind, raw, setting.env) if raw else None
    if value:
        return value, 'CHAINERMN_TORUS_EXPECT_RANKS (the job script: nodes x ranks per node)'
    steps = environ.get('SLURM_STEP_NUM_TASKS')
    if environ.get('SLURM_STEP_ID', 'batch') in ('batch', 'extern'):
        return None, None  # the batch script itself, not an srun step
    if steps and steps.isdigit() and int(steps) > 0:
        return int(steps), "SLURM_STEP_NUM_TASKS (srun's task count)"
    return None, None


def mismatch(size, library, environ=None):
    """The message for a world of ``size`` ranks that is not the one expected, or None."""
    expected, source = expected_ranks(environ)
    if source is not None and source.startswith('SLURM') and size != 1:
        return None  # srun's count is a rank count only when srun started the ranks
    if expected is None or expected == size:
        return None
    first = library.strip().splitlines()[0] if library.strip() else 'unknown MPI library'
    if size == 1:
        return (f'MPI started this process alone (a world of 1 rank) but {source} says {expected} '
                'ranks: a '
                'PMI/launcher mismatch. The processes were started by a launcher whose '
                f'process-management interface this MPI library ({first}) does not speak, so each '
                'one became a job of its own. Start the ranks with the mpiexec of the MPI '
                'library mpi4py loaded (inside a Slurm allocation too: chainermn-torus '
                'jobscript does this for MPICH), or give srun the PMI that library speaks: '
                'srun --mpi=pmi2 for Intel MPI (with I_MPI_PMI_LIBRARY=<Slurm\'s libpmi2.so>) '
                'and MPICH builds against Slurm\'s PMI, --mpi=pmix for Open MPI (srun '
                '--mpi=list shows what the site has).')
    return (f'MPI started {size} ranks but {source} says {expected}: the job script and the launch '
            'line '
            'disagree (nodes x ranks per node, -n, --ntasks-per-node); fix one of them so the '
            'grid and the data shards are the ones planned.')


def launcher_rank(environ=None):
    """This process's rank as its launcher set it, or None where no launcher did (before
    MPI starts: whom to let say a refusal the launcher finds in its options)."""
    environ = os.environ if environ is None else environ
    for name in RANK_VARIABLES:
        value = environ.get(name, '')
        if value.isdigit():
            return int(value)
    return None


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser for a script every rank runs: its usage, help and errors are
    printed by the launcher's rank 0 only (they printed once per rank: 8 usages for one
    typo at -n 8); every rank exits as argparse would, with its code."""

    def _quiet(self):
        rank = launcher_rank()
        return rank is not None and rank != 0

    def _print_message(self, message, file=None):
        if not self._quiet():
            super()._print_message(message, file)

    def exit(self, status=0, message=None):
        if message and not self._quiet():
            self._print_message(message, sys.stderr)
        if status and self._quiet():
            # Rank 0's exit ends the job with its line; a launcher that ends the job at the
            # first non-zero exit dropped that line when another rank got there first (seen
            # under Open MPI's prterun), as for a refusal (run.py).
            time.sleep(USAGE_ERROR_WAIT_S)
        sys.exit(status)
