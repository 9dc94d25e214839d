"""The examples' command-line options for checkpoints, and attaching a checkpointer as
they say (collective)."""
from chainermn_torus.extensions.checkpoint import rules
from chainermn_torus.extensions.checkpoint.extension import MultiNodeCheckpointer
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.extensions import outputs
from chainermn_torus.runtime import report

__all__ = ['add_arguments', 'check_arguments', 'attach', 'check_output']


def add_arguments(parser):
    """--checkpoint-dir, --checkpoint-interval, --resume, --auto-resume, --resume-batch,
    --trust-checkpoint-dir, --trust-out-dir."""
    parser.add_argument('--checkpoint-dir', default=None, metavar='DIR',
                        help='write multi-node checkpoints here (atomically; see '
                             'chainermn_torus.extensions.checkpoint)')
    parser.add_argument('--checkpoint-interval', type=int, default=None, metavar='ITERATIONS',
                        help='checkpoint every this many iterations (default: every epoch)')
    parser.add_argument('--resume', action='store_true',
                        help='continue from the latest checkpoint in --checkpoint-dir')
    parser.add_argument('--auto-resume', action='store_true',
                        help='continue from it if there is one (batch jobs that are requeued)')
    parser.add_argument('--trust-checkpoint-dir', action='store_true', default=None,
                        help='resume even where another user owns or may write the '
                             'checkpoint directory or its files (refused by default)')
    parser.add_argument('--trust-out-dir', action='store_true', default=None,
                        help='write results where another user owns or may write a '
                             'component of --out (refused by default)')
    parser.add_argument('--resume-batch', choices=rules.choices(), default='keep',
                        help='resuming on another rank count: {}'.format('; '.join(
                            '{}: {}'.format(r.name, r.help) for r in rules.RULES.values())))


def check_arguments(parser, args):
    if (args.resume or args.auto_resume) and not args.checkpoint_dir:
        parser.error('--resume needs --checkpoint-dir DIR (where the checkpoints are)')
    if args.checkpoint_interval is not None and args.checkpoint_interval < 1:
        parser.error('--checkpoint-interval must be >= 1, got {}'.format(
            args.checkpoint_interval))


def attach(comm, trainer, args, lr_rule=None):
    """Extend ``trainer`` with a checkpointer and resume as the options say (collective).

    Returns the checkpointer, or None without --checkpoint-dir. Errors end every rank with a
    plain exit: every rank raises the same one, and MPI_Abort could lose the message when
    the launcher tears the job down.
    """
    if not args.checkpoint_dir:
        return None
    try:
        # Made before training so that an unwritable directory fails now, on every rank.
        checkpointer = MultiNodeCheckpointer(
            comm, args.checkpoint_dir, batch=getattr(args, 'resume_batch', 'keep'),
            lr_rule=lr_rule, trust=getattr(args, 'trust_checkpoint_dir', None))
        trainer.extend(checkpointer, trigger=(args.checkpoint_interval, 'iteration')
                       if args.checkpoint_interval else (1, 'epoch'))
        if args.resume:
            checkpointer.resume(trainer)
        elif args.auto_resume:
            checkpointer.maybe_resume(trainer)
    except CheckpointError as e:  # raised alike on every rank (the checks are collective)
        report.stop(str(e), comm.rank)
    return checkpointer


def check_output(comm, directory, names=(), trusted=None):
    """The job's output directory, walked, judged and held on every rank at start, with
    ``names`` (the files the job will write there) holding nothing of another user's
    (``extensions.outputs``); the Held is returned. A refusal ends every rank in one
    line, before training."""
    try:
        return outputs.hold_everywhere(comm, directory, names, trusted)
    except OSError as e:  # raised alike on every rank (hold_everywhere is collective)
        report.stop(str(e), comm.rank)
