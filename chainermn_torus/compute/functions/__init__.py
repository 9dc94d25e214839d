"""The Chainer functions replaced, one module each: its replacement forwards (which hand back
to Chainer's code where it would not compute alike) beside its rows of ``REPLACEMENTS``
(``compute.replacements`` gathers them and applies them as patches)."""
