"""The one entry of the watcher processes (``watchers.command``): ``rank ARGS`` or
``startup ARGS``."""
import sys

from . import rank_watch, startup_watch

WATCHERS = {'rank': rank_watch.main, 'startup': startup_watch.main}


def main(argv):
    if not argv or argv[0] not in WATCHERS:
        sys.stderr.write('chainermn_torus watchers: the first argument is one of {}, got {!r}\n'
                         .format(', '.join(WATCHERS), argv[:1]))
        return 2
    return WATCHERS[argv[0]](argv[1:])
