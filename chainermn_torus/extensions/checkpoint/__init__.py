"""Multi-node checkpoints: every rank's trainer state, written atomically, resumable.

    checkpointer = chainermn_torus.extensions.checkpoint.MultiNodeCheckpointer(comm, 'results/ckpt')
    checkpointer.maybe_resume(trainer)          # or resume(trainer) to insist
    trainer.extend(checkpointer, trigger=(1000, 'iteration'))

At each trigger every rank writes its whole trainer (model, optimizer state including the
multi-node wrapper's double-buffering gradients, updater and iterator position, and its
numpy random state, which Chainer's shuffling and dropout draw from) to
``snapshot_iter_<I>.rank<R>.npz``: into a temporary file, flushed to disk, then renamed, so a
file with that name is always complete. After every rank has finished, rank 0 writes
``latest.json`` the same way; it names the iteration, the rank count and the model's arrays.
A crash at any moment therefore leaves either the previous checkpoint or the new one as
``latest``, never a half-written one. Older checkpoints beyond ``keep`` are removed after
the new ``latest`` is in place.

Resuming checks, on every rank and with the same message everywhere: the directory and the
manifest exist, every file is there with the size and CRC-32 the manifest recorded and holds
no NaN/Inf, and the model has the same arrays (the first difference is named).

The parts, one job each: ``files`` (names, the manifest, integrity checks), ``writing``
(atomic rank files and manifests, the write probe, the refusal of a diverged state),
``room`` (free space before writing), ``sweep`` (what killed writers left), ``identity``
(the data and optimizer a checkpoint was trained on), ``rules`` (the batch and learning
rate on another rank count: one class per ``--resume-batch`` choice), ``resharding``
(loading at the same or another rank count), ``extension`` (the trainer extension),
``in_memory`` (snapshots in node memory, restored on the survivors of a lost node) and
``arguments`` (the examples' options).

Why it is built so: docs/internals.md (extensions/checkpoint/__init__.py).
"""
from chainermn_torus.extensions.checkpoint.arguments import (add_arguments, attach,  # NOQA
                                                       check_arguments, check_output)
from chainermn_torus.extensions.checkpoint.extension import MultiNodeCheckpointer  # NOQA
from chainermn_torus.extensions.checkpoint.files import MANIFEST, CheckpointError, hold  # NOQA
from chainermn_torus.extensions.checkpoint.sweep import sweep_temporary  # NOQA

__all__ = ['MultiNodeCheckpointer', 'CheckpointError', 'add_arguments',
           'check_arguments', 'attach', 'check_output', 'sweep_temporary', 'MANIFEST',
           'hold']
