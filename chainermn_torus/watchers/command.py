"""How a watcher process is started: ``python -I -S`` with this package first on its path
(``watchers`` is then a package of its own, whose modules import each other as in the job's
processes), entering through ``__main__``. -I -S: no site packages, no environment
(PYTHONPATH, PYTHONSTARTUP), so nothing of the job's is imported."""
import os
import sys

__all__ = ['argv']

_ENTRY = ('import sys; sys.path[:0] = [{!r}]; from watchers.__main__ import main; '
          'sys.exit(main(sys.argv[1:]))')


def argv(kind, *args):
    """The command line that starts the watcher ``kind`` ('rank' or 'startup') with
    ``args``."""
    folder = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [sys.executable, '-I', '-S', '-c', _ENTRY.format(folder), kind] + [
        str(a) for a in args]
