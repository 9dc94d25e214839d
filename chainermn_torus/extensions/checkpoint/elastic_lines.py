"""What a step of ``chainermn-torus elastic`` tells its supervisor, and how it is read back:
one module for both sides, so the words are written once.

The supervisor runs on the batch host and sees a step only through the launcher, which
forwards the ranks' output: so the step says, on rank 0's standard output, one line each

* that it keeps snapshots in node memory (without it a lost node cannot be survived, and
  the supervisor says so instead of starting a step that would start from scratch);
* that the first step after a restore is done (the end of a recovery, for its timing);
* that training is complete. A launcher's exit code alone is not trusted: Open MPI's
  mpirun exits 0 after losing a node, and only this line tells a finished job from one
  whose snapshots the next step must go on from.

They are printed even under ``CHAINERMN_TORUS_QUIET``: the supervisor needs them. The
setting ``elastic_step`` (``CHAINERMN_TORUS_ELASTIC_STEP=RUN:STEP``), which the supervisor
sets, says a process is such a step.
"""
import re
import sys
import time

import chainer


__all__ = ['say', 'after_restore', 'KEEPING', 'FIRST_STEP', 'COMPLETE', 'RESTORED',
           'find']

PREFIX = 'chainermn_torus elastic: '
KEEPING = 'snapshots in node memory are kept in {directory}'
FIRST_STEP = 'the first step after the restore is done (iteration {iteration}) at {time:.3f}'
COMPLETE = 'training is complete at iteration {iteration}'
# in_memory.MemorySnapshot.restore's own line (through report.say), read, not written, here
RESTORED = 'resumed from node memory'

_PATTERNS = {
    'keeping': re.compile(re.escape(PREFIX) + r'snapshots in node memory are kept in (\S+)'),
    'first_step': re.compile(re.escape(PREFIX) + r'the first step after the restore is done '
                             r'\(iteration (\d+)\) at ([0-9.]+)'),
    'complete': re.compile(re.escape(PREFIX) + r'training is complete at iteration (\d+)'),
    'restored': re.compile(re.escape(RESTORED) + r' \((\S+)\) at iteration (\d+)'),
}


def say(template, rank, elastic_step, **fields):
    """One line for the supervisor, from rank 0 only, in a step of it (``elastic_step``:
    the settings' (run, step), handed down; None: not a step, nothing said); never
    silenced."""
    if rank == 0 and elastic_step is not None:
        sys.stdout.write(PREFIX + template.format(**fields) + '\n')
        sys.stdout.flush()


def now():
    return time.time()


def find(kind, line):
    """The groups of a ``kind`` line ('keeping', 'first_step', 'complete', 'restored')
    anywhere in ``line`` (ranks' lines may share one), or None."""
    m = _PATTERNS[kind].search(line)
    return m.groups() if m else None


def after_restore(trainer, rank, elastic_step):
    """In a supervisor's step (``elastic_step`` not None), once the trainer is restored
    (from node memory or from disk): say when its first step is done."""
    if elastic_step is not None:
        trainer.extend(_FirstStep(rank, elastic_step), trigger=(1, 'iteration'))


class _FirstStep(chainer.training.Extension):
    """Says, once, that the first step after a restore is done: where a recovery ends."""

    name = 'chainermn_torus_first_step_after_restore'
    priority = chainer.training.PRIORITY_WRITER

    def __init__(self, rank, elastic_step):
        self.rank, self.elastic_step, self.done = rank, elastic_step, False

    def __call__(self, trainer):
        if not self.done:
            self.done = True
            say(FIRST_STEP, self.rank, self.elastic_step, iteration=trainer.updater.iteration,
                time=now())
