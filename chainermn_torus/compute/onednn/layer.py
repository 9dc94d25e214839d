"""One geometry of a layer on oneDNN: its primitives, made once and kept. Every layer module
(``conv``, ``pooling``, ``lrn``, ``batchnorm``) is a ``Layer``; ``geometries`` keeps them.

A layer names its steps (``STEPS``: the step's name -> its input and output arguments, the
arrays the caller passes in numpy's layout), describes each (``describe``: oneDNN's
primitive descriptor, from the forward's own descriptor, the hint, for a backward step),
and gives the plain layout of every argument (``plain``) and of the arguments that are
never reordered (``extra``: a bias, batch normalization's statistics). A step is made at
its first call (a geometry only evaluated never makes its backward) and then reused: its
primitive, its memory objects, the reorders to and from the layouts oneDNN chose
(``primitives.Bound``). The hint is made once per geometry, when the first backward step is.

A step whose descriptor asks for a workspace (what a forward records for its backward: max
pooling's choice per window, LRN's scales) gets one bound, read from that step's own
descriptor: a backward made after its geometry left the cache and came back (a new
``Layer``, which never ran its forward) still takes the forward's workspace.
"""
import numpy

from chainermn_torus.compute.onednn import binding, primitives

__all__ = ['Layer']


class Layer:
    what = 'layer'  # the primitives' name in errors: "<what> <step>"
    STEPS = {}      # step -> (inputs, outputs)
    HINT = 'forward'  # the step whose descriptor the backward steps are made from
    BACKWARD = ('backward',)  # those steps

    def __init__(self):
        self._made = {}
        self._hint = None

    def describe(self, step, hint):
        """oneDNN's primitive descriptor of ``step`` (a new handle, owned by the caller);
        ``hint``: the forward's descriptor for the ``BACKWARD`` steps, else None."""
        raise NotImplementedError

    def plain(self, step):
        """{argument: memory descriptor in numpy's layout} of ``step``'s inputs and outputs."""
        raise NotImplementedError

    def extra(self, step):
        """{argument: memory descriptor} of the arguments taken as they are."""
        return {}

    def hint(self):
        if self._hint is None:
            self._hint = primitives.Hint(self.describe(self.HINT, None))
        return self._hint.pd

    def step(self, name):
        made = self._made.get(name)
        if made is None:
            inputs, outputs = self.STEPS[name]
            pd = self.describe(name, self.hint() if name in self.BACKWARD else None)
            extra = dict(self.extra(name))
            workspace = binding.query_md(pd, 'workspace')
            if workspace and binding.md_size(workspace):
                extra['workspace'] = workspace
            made = self._made[name] = primitives.Bound(
                pd, '{} {}'.format(self.what, name.replace('_', ' ')), list(inputs),
                list(outputs), self.plain(name), extra or None)
        return made

    def workspace(self, name):
        """A new workspace for step ``name`` (uint8), or None where it has none."""
        md = self.step(name).extra.get('workspace')
        return None if md is None else numpy.empty(binding.md_size(md.md), numpy.uint8)

    def run(self, name, workspace=None, copies=None, **arrays):
        """Step ``name`` on ``arrays`` (a None is an argument the step does not take), with
        the forward's ``workspace`` where this step's descriptor asks for one (oneDNN's LRN
        backward may recompute instead: then it is not passed)."""
        step = self.step(name)
        if workspace is not None and 'workspace' in step.extra:
            arrays['workspace'] = workspace
        step(copies, **{k: v for k, v in arrays.items() if v is not None})
