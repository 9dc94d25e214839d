"""Runs a training script unchanged, except that once iteration AT is done (its extensions,
a checkpoint among them, have run) rank 0 SIGKILLs the whole job: its process group, the
launcher and every rank (tests/launch/test_unchanged_checkpoints.py starts the job in a
session of its own).

    python -m chainermn_torus.run OPTIONS killed_at.py AT script.py ARGS...
    mpiexec ... python killed_at.py AT script.py ARGS...

With ``KILLED_AT_AFTER=PATH`` in the environment, rank 0 waits at iteration AT until PATH
exists (another job's end, tests/extensions/checkpoint/test_two_jobs.py), then kills.
"""
import os
import runpy
import signal
import sys
import time

import chainermn_torus  # noqa: F401 first (Chainer imports after it on 3.12)
import chainer
from chainer import training


class _Kill(training.Extension):
    trigger = (1, 'iteration')
    priority = training.PRIORITY_READER - 100  # after the checkpoint's write

    def __init__(self, at, rank):
        self.at, self.rank = at, rank

    def __call__(self, trainer):
        if trainer.updater.iteration >= self.at and self.rank == 0:
            after = os.environ.get('KILLED_AT_AFTER')
            while after and not os.path.exists(after):
                time.sleep(0.05)
            os.killpg(os.getpgid(0), signal.SIGKILL)


def main():
    at, script = int(sys.argv[1]), sys.argv[2]
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.rank
    original = training.Trainer.run

    def run(trainer, *args, **kwargs):
        trainer.extend(_Kill(at, rank))
        return original(trainer, *args, **kwargs)

    training.Trainer.run = run
    sys.argv = [script] + sys.argv[3:]
    runpy.run_path(script, run_name='__main__')


if __name__ == '__main__':
    assert chainer
    main()
