"""Benchmarks: programs that compare alternatives in the same run and report ratios."""
import os
import sys

from chainermn_torus import config

__all__ = ['mpiexec']


def mpiexec():
    """The mpiexec a benchmark starts its jobs with: ``CHAINERMN_TORUS_MPIEXEC``, else the
    venv's (the mpich wheel's)."""
    return config.current()['mpiexec'] or os.path.join(sys.prefix, 'bin', 'mpiexec')
