"""A SIGTERM (a batch system's time limit) at every step of a checkpoint's write: the next
job resumes from the newest complete checkpoint on disk, whether or not latest.json was
rewritten, and removes nothing newer. A real process gets the real signal at each step."""
import os
import subprocess
import sys

import pytest

from chainermn_torus.extensions.checkpoint import MultiNodeCheckpointer
from conftest import worker
from tests.extensions.checkpoint.support import comm, trainer

STEPS = 10   # tests/mpi_workers/checkpoint_sigterm.py
COMPLETE_FROM = 5  # after the rename of manifest_iter_6.json: checkpoint 6 is complete


# With the package's handler (SIGTERM an exception, as in a job), the steps around the
# manifests: the one before its rename, the one after, latest.json's.
HANDLED = (4, 5, 7)


@pytest.mark.slow  # full tier: every step of a checkpoint, one job each (test_checkpoint's
# resume tests are the fast tier's)
@pytest.mark.parametrize('how', ['default', 'handled'])
def test_sigterm_at_every_step_of_a_checkpoint_resumes_from_the_newest_complete(tmp_path,
                                                                                 how, capsys):
    for step in range(STEPS + 1) if how == 'default' else HANDLED:
        base = tmp_path / str(step)
        base.mkdir()
        proc = subprocess.run([sys.executable, worker('checkpoint_sigterm.py'), str(base),
                               str(step)] + ([how] if how == 'handled' else []),
                              capture_output=True, text=True, timeout=120)
        if step < STEPS:
            assert f'SIGTERM at step {step}' in proc.stdout, proc.stderr[-2000:]
            assert proc.returncode != 0 and 'COMPLETE' not in proc.stdout
        else:
            assert proc.returncode == 0 and 'COMPLETE' in proc.stdout, proc.stderr[-2000:]
        ck = base / 'ck'
        again = trainer(base / 'o2')
        checkpointer = MultiNodeCheckpointer(comm(), str(ck))  # sweeps the dead writer's files
        left = sorted(n for n in os.listdir(str(ck)) if '.tmp.' in n or '.writing_' in n)
        assert left == [], (step, left)
        expected = 6 if step >= COMPLETE_FROM else 3
        assert checkpointer.maybe_resume(again) == expected, step
        assert again.updater.iteration == expected
        out = capsys.readouterr().out
        if COMPLETE_FROM <= step < 8:  # latest.json still names 3: passed over, said
            assert 'latest.json names iteration 3, but a newer checkpoint is complete' in out
        names = set(os.listdir(str(ck)))
        assert 'snapshot_iter_3.rank0.npz' in names and 'manifest_iter_3.json' in names
        if step >= COMPLETE_FROM:
            assert 'snapshot_iter_6.rank0.npz' in names
