"""Moved to ``chainermn_torus.extensions.checkpoint``; this documented path stays the same
module."""
import sys

from chainermn_torus.extensions import checkpoint as _checkpoint

sys.modules[__name__] = _checkpoint
