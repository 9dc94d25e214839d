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

**On another rank count** (a job that lost a node, requeued on fewer; or on more): the
stored ranks' parameters and optimizer state must be identical (data-parallel replicas;
checked, the first difference named); new rank r loads stored rank r mod P (rank 0 keeps
rank 0's reports). The iteration, the epoch and each rank's place in it (as a fraction of
its shard) are kept; the data is re-sharded by the new job's ``scatter_dataset`` and each
iterator keeps its new shard and order. By default (``batch='keep'``) the global batch is
kept: the per-rank batch becomes global / P' (a SerialIterator is resized, said; other
iterators must be started with that batch), so the learning rate and its schedule stay
right; a global batch that does not split evenly is refused with the rank counts that
work. With ``batch='scale'`` (``--resume-batch scale``) each rank keeps the batch it was
started with, the global batch changes with P', and the stored learning rate is scaled by
the large-batch rule the caller gives (``lr_rule``: the examples give Goyal et al.'s
``linear_scaling``), said with both figures. A checkpoint of another model or another
optimizer is refused, naming both. The
decision is collective: no rank loads anything, and nothing says "resumed", until every
rank's file has passed. Each checkpoint keeps its own manifest
(``manifest_iter_<I>.json``, ``latest.json`` is the newest), so when the latest is damaged
(a truncated file after a disk filled up, a lost rank file) ``maybe_resume`` - what
``--auto-resume`` calls - falls back to the newest older checkpoint that passes, and says
so; ``resume`` (``--resume``) stops and names the damage.

Temporary files (``*.tmp.<host>.<pid>``) are removed when a write fails, and those a killed
job left are swept when the next checkpointer starts on the directory (this host's whose
process is gone; other hosts' untouched for ten minutes); ``chainermn-torus clean
--checkpoint-dir DIR`` does the same by hand.

With the same seed and deterministic communicators a killed-and-resumed run ends with the
same parameters, bit for bit, as an uninterrupted one (tested).

The parts, one job each: ``files`` (names, the manifest, integrity checks), ``writing``
(atomic rank files and manifests, the write probe, the refusal of a diverged state),
``room`` (free space before writing), ``sweep`` (what killed writers left), ``identity``
(the data and optimizer a checkpoint was trained on), ``rules`` (the batch and learning
rate on another rank count: one class per ``--resume-batch`` choice), ``resharding``
(loading at the same or another rank count), ``extension`` (the trainer extension) and
``cli`` (the examples' options).
"""
from chainermn_torus.extensions.checkpoint.cli import (add_arguments, attach,  # NOQA
                                                       check_arguments, check_output)
from chainermn_torus.extensions.checkpoint.extension import MultiNodeCheckpointer  # NOQA
from chainermn_torus.extensions.checkpoint.files import MANIFEST, CheckpointError  # NOQA
from chainermn_torus.extensions.checkpoint.sweep import sweep_temporary  # NOQA
from chainermn_torus.extensions.checkpoint.writing import check_writable  # NOQA

__all__ = ['MultiNodeCheckpointer', 'CheckpointError', 'check_writable', 'add_arguments',
           'check_arguments', 'attach', 'check_output', 'sweep_temporary', 'MANIFEST']
