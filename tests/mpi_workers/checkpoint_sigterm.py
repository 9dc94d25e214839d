"""One process (MPI_COMM_SELF) that checkpoints iteration 3, then is sent SIGTERM at step K
of writing checkpoint 6 (tests/extensions/checkpoint/test_sigterm_steps.py). The steps: for each of
the rank file, the checkpoint's manifest and latest.json, before its temporary file is written,
before its rename and after it (0-8); 9 after the in-progress marker is removed.

    python checkpoint_sigterm.py DIR K [handled]

``handled``: the package's handler turns SIGTERM into an exception, as in a job; without
it the default action ends the process at once, as a SIGKILL would.
"""
import os
import signal
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import chainermn_torus  # noqa: E402,F401  before Chainer (Python 3.12)
from chainer.training import triggers  # noqa: E402

from chainermn_torus.extensions.checkpoint import files, writing  # noqa: E402
from chainermn_torus.runtime.watch import abort  # noqa: E402
from tests.extensions.checkpoint.support import checkpointed  # noqa: E402

directory, step = sys.argv[1], int(sys.argv[2])
if sys.argv[3:] == ['handled']:
    signal.signal(signal.SIGTERM, abort._on_sigterm)
count = [0]


def point():
    if count[0] == step:
        print(f'SIGTERM at step {step}', flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
        sys.exit('the signal did not end the process')
    count[0] += 1


tr, ck = checkpointed(__import__('pathlib').Path(directory))
tr.stop_trigger = triggers.IntervalTrigger(3, 'iteration')
tr.run()
for _ in range(3):
    tr.updater.update()
write, remove = writing.atomic_write, files.remove


def stopping(place, name, writer, *args, **kwargs):
    point()
    write(place, name, writer, before_rename=point)
    point()


def marker_removed(place, name):
    remove(place, name)
    if '.writing_iter_' in name:
        point()


writing.atomic_write, files.remove = stopping, marker_removed
ck.save(tr)
print('COMPLETE', flush=True)
