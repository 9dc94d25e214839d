"""Moved to ``chainermn_torus.tools.cli``; kept for ``python -m chainermn_torus.cli`` and the
``chainermn-torus`` entry point of installs made before the move."""
import sys

from chainermn_torus.tools.cli import main  # NOQA: F401

if __name__ == '__main__':
    sys.exit(main())
