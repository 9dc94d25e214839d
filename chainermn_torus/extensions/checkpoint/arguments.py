"""The examples' command-line options for checkpoints, and attaching a checkpointer as
they say (collective)."""
from chainermn_torus import command_line, config
from chainermn_torus.extensions.checkpoint import elastic_lines, in_memory, rules
from chainermn_torus.extensions.checkpoint.extension import MultiNodeCheckpointer
from chainermn_torus.extensions.checkpoint.in_memory import MemorySnapshot
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.extensions import outputs
from chainermn_torus.runtime import report

__all__ = ['add_arguments', 'check_arguments', 'attach', 'check_output',
           'snapshots_asked']


def add_arguments(parser):
    """--checkpoint-dir, --checkpoint-interval, --resume, --auto-resume, --resume-batch,
    --checkpoint-keep, --trust-checkpoint-dir, --trust-out-dir, --memory-snapshots,
    --memory-dir, --restore-from-memory."""
    # Settings, as the launcher's options of the same names for unchanged scripts.
    command_line.add_option(parser, 'checkpoint_dir', metavar='DIR',
                      help='write multi-node checkpoints here (atomically; see '
                           'chainermn_torus.extensions.checkpoint)')
    command_line.add_option(parser, 'checkpoint_interval', metavar='ITERATIONS',
                      help='checkpoint every this many iterations (default: every epoch)')
    parser.add_argument('--checkpoint-keep', type=int, default=2, metavar='N',
                        help='checkpoints kept in --checkpoint-dir; older ones go '
                             '(default %(default)s)')
    parser.add_argument('--resume', action='store_true',
                        help='continue from the latest checkpoint in --checkpoint-dir')
    command_line.add_option(parser, 'auto_resume',
                      help='continue from it if there is one (batch jobs that are requeued)')
    # These are settings too, declared from their rows (the flag, else the variable, else
    # the default: command_line.options fills them in after parsing).
    command_line.add_option(parser, 'trust_checkpoints', '--trust-checkpoint-dir',
                      dest='trust_checkpoint_dir',
                      help='resume even where another user owns or may write the checkpoint '
                           'directory or its files (refused by default)')
    command_line.add_option(parser, 'trust_out_dir',
                      help='write results where another user owns or may write a component '
                           'of --out (refused by default)')
    command_line.add_option(parser, 'memory_snapshots', nargs='?', const=in_memory.DEFAULT_K,
                      metavar='ITERATIONS',
                      help='keep a snapshot of the trainer in node memory every this many '
                           f'iterations (--memory-dir; default {in_memory.DEFAULT_K}: measured at '
                           'most 2%% of '
                           'the steps, docs/cluster.md), for the survivors of a lost node '
                           '(chainermn_torus.extensions.checkpoint.in_memory)')
    parser.add_argument('--memory-dir', default=None, metavar='DIR',
                        help="where each node keeps its runs' snapshots, each run in a "
                             'directory of its own named by a token only it knows; {host} in '
                             "it is the node's host name (default: /dev/shm/cmtorus-"
                             'snapshots-<uid>)')
    parser.add_argument('--restore-from-memory', action='store_true',
                        help='start from the newest snapshot in node memory that every rank '
                             "holds complete (on the survivors of a lost node), the run's "
                             "token read from --out's .chainermn-torus-snapshots; where there "
                             'is none, as --auto-resume')
    parser.add_argument('--resume-batch', choices=rules.choices(), default='keep',
                        help='resuming on another rank count: {}'.format('; '.join(
                            f'{r.name}: {r.help}' for r in rules.RULES.values())))


def snapshots_asked(argv):
    """The K a command line's own ``--memory-snapshots`` gives (the bare option:
    ``in_memory.DEFAULT_K``), or None where it gives none: what a job script and the
    supervisor leave as it is."""
    for i, word in enumerate(argv):
        if word.startswith('--memory-snapshots='):
            return word.split('=', 1)[1]
        if word == '--memory-snapshots':
            following = argv[i + 1] if i + 1 < len(argv) else ''
            return following if following.isdigit() else in_memory.DEFAULT_K
    return None


def check_arguments(parser, args):
    if (args.resume or args.auto_resume) and not args.checkpoint_dir:
        parser.error('--resume needs --checkpoint-dir DIR (where the checkpoints are)')
    if getattr(args, 'memory_snapshots', None) is not None and args.memory_snapshots < 1:
        parser.error('--memory-snapshots must be a count of iterations >= 1, '
                     f'got {args.memory_snapshots}')
    if getattr(args, 'checkpoint_keep', 2) < 1:
        parser.error(f'--checkpoint-keep must be a count >= 1, got {args.checkpoint_keep}')
    if getattr(args, 'restore_from_memory', False) and not args.memory_snapshots:
        parser.error('--restore-from-memory needs --memory-snapshots K (the snapshots it '
                     'restores from)')


def attach(comm, trainer, args, lr_rule=None, settings=None):
    """Extend ``trainer`` with a checkpointer and the in-memory snapshot, and resume, as
    the options say (collective). ``settings``: the process's, handed down by the entry
    point (the elastic step, the output directory's trust); None: the table's defaults.

    Returns the checkpointer, or None without --checkpoint-dir. Errors end every rank with a
    plain exit: every rank raises the same one, and MPI_Abort could lose the message when
    the launcher tears the job down.
    """
    checkpointer = None
    settings = config.defaults() if settings is None else settings
    elastic_step = settings['elastic_step']
    batch = getattr(args, 'resume_batch', 'keep')
    try:
        if args.checkpoint_dir:
            # Made before training so that an unwritable directory fails now, on every rank.
            checkpointer = MultiNodeCheckpointer(
                comm, args.checkpoint_dir, keep=getattr(args, 'checkpoint_keep', 2),
                batch=batch, lr_rule=lr_rule,
                trust=getattr(args, 'trust_checkpoint_dir', None))
            trainer.extend(checkpointer, trigger=(args.checkpoint_interval, 'iteration')
                           if args.checkpoint_interval else (1, 'epoch'))
        snapshot = None
        # A step of ``chainermn-torus elastic`` always goes on from its run's snapshots (the
        # supervisor may have asked for them through the setting, without the flag).
        from_memory = bool(getattr(args, 'memory_snapshots', None)) and (
            getattr(args, 'restore_from_memory', False) or elastic_step is not None)
        if getattr(args, 'memory_snapshots', None):
            snapshot = MemorySnapshot.for_trainer(
                comm, trainer, args.memory_dir, from_memory, elastic_step,
                settings['trust_out_dir'], batch=batch, lr_rule=lr_rule)
            trainer.extend(snapshot, trigger=(args.memory_snapshots, 'iteration'))
        restored = None
        if from_memory:
            restored = snapshot.restore(trainer, missing_ok=True)
        if restored is not None:
            if checkpointer is not None:
                checkpointer.resumed_at = restored
        elif args.resume and checkpointer is not None:
            checkpointer.resume(trainer)
        elif (args.auto_resume or from_memory) and \
                checkpointer is not None:
            if checkpointer.maybe_resume(trainer) is not None:
                elastic_lines.after_restore(trainer, comm.rank, elastic_step)
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
