"""``chainermn-torus clean``: what dead jobs left on this node (/dev/shm, checkpoint
directories' unfinished files), never a live job's."""
import argparse
import os

from chainermn_torus.errors import UnsafePath
from chainermn_torus.extensions import checkpoint
from chainermn_torus.extensions.checkpoint import snapshot_place
from chainermn_torus.runtime import report
from chainermn_torus.runtime.files import devshm

__all__ = ['main']


def main(argv):
    """Remove what dead jobs left on this node: never a live job's files."""
    p = argparse.ArgumentParser(prog='chainermn-torus clean', description=main.__doc__)
    p.add_argument('--dry-run', action='store_true', help='list, remove nothing')
    p.add_argument('--others', action='store_true',
                   help="also MPICH's (mpich_shm_*), multiprocessing's (sem.mp-*) and Open "
                        "MPI's (sm_segment.*, vader_segment.*) files that no process on this "
                        'node maps or holds and that are older than '
                        f'{devshm.MIN_AGE_S:g} s')
    p.add_argument('--shm-dir', default=devshm.SHM_DIR, help='default %(default)s')
    p.add_argument('--checkpoint-dir', action='append', default=[], metavar='DIR',
                   help="also a checkpoint directory's unfinished temporary files "
                        '(repeatable)')
    p.add_argument('--snapshots', action='store_true',
                   help="also remove this user's snapshots in node memory that no running "
                        'job holds (/dev/shm/cmtorus-snapshots-<uid>; without it they are '
                        'listed)')
    args = p.parse_args(argv)
    for d in [args.shm_dir] + args.checkpoint_dir:
        if not os.path.isdir(d):
            p.error(f'{d!r} is not a directory')
    removed = devshm.sweep(args.shm_dir, others=args.others, dry_run=args.dry_run)
    for d in args.checkpoint_dir:
        try:  # judged as a job judges it: a link planted on the way removes nothing
            place = checkpoint.hold(d)
        except (UnsafePath, OSError) as e:
            p.error(str(e).replace('chainermn_torus: ', '', 1))
        with place:
            removed += checkpoint.sweep_temporary(place, dry_run=args.dry_run)
    verb = 'would remove' if args.dry_run else 'removed'
    for path, size, busy in snapshot_place.kept(args.shm_dir):
        if busy:
            print(f'kept {path} ({report.format_bytes(size)}; a running job holds it)')
        elif not args.snapshots:
            print(f'kept {path} ({report.format_bytes(size)}; snapshots of a run that is not '
                  'running: --snapshots removes '
                  'them)')
        else:
            if not args.dry_run:
                try:
                    snapshot_place.remove_run(path)
                except OSError as e:
                    print(f'left {path} ({e})')
                    continue
            removed.append((path, size, 'snapshots of a run that is not running'))
    for name, size, why in removed:
        print(f'{verb} {name} ({report.format_bytes(size)}; {why})')
    print(f'{verb} {len(removed)} file(s), {report.format_bytes(sum(r[1] for r in removed))}')
    return 0
