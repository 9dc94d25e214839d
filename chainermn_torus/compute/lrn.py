"""Local response normalization across channels on oneDNN, with Chainer's arithmetic:
y = x (k + alpha s)^-beta, s the sum of x^2 over the channels c - n//2 .. c + n//2, for
float32 (n, c, h, w) arrays; and its gradient.

oneDNN divides alpha by its window's size, so it is given alpha times that size (as
Chainer's iDeep path did); its window is centred and odd, ``2 (n // 2) + 1`` channels,
which is Chainer's window for an even ``n`` too. The forward keeps oneDNN's workspace (the
scale it computed) for the gradient, where one is made. Plain layout, no reorder.
"""
import numpy

from chainermn_torus.compute import dnnl, geometries

__all__ = ['Lrn', 'lrn', 'forward', 'backward', 'window']


def window(n):
    """The channels Chainer sums over for its ``n``."""
    return 2 * (n // 2) + 1


class Lrn(object):
    def __init__(self, shape, n, k, alpha, beta):
        self.shape = tuple(shape)
        self.md = dnnl.plain_md(self.shape)
        size = window(n)
        self.params = (size, float(alpha) * size, float(beta), float(k))
        self._hint = self._forward = self._backward = None
        self.workspace_bytes = 0

    def _forward_pd(self):
        pd = dnnl.P()
        dnnl.check(dnnl.lib().dnnl_lrn_forward_primitive_desc_create(
            dnnl.ctypes.byref(pd), dnnl.engine(), dnnl.PROP['forward_training'],
            dnnl.ALG['lrn_across_channels'], self.md.handle, self.md.handle, *self.params,
            dnnl.attr()), 'local response normalization forward')
        return pd

    def forward(self, x):
        """(y, workspace or None)."""
        if self._forward is None:
            pd = self._forward_pd()
            ws = dnnl.query_md(pd, 'workspace')
            self.workspace_bytes = dnnl.md_size(ws) if ws else 0
            extra = {'workspace': ws} if self.workspace_bytes else None
            self._forward = dnnl.Bound(pd, 'local response normalization forward', ['src'],
                                       ['dst'], {'src': self.md, 'dst': self.md}, extra)
        y = numpy.empty(self.shape, numpy.float32)
        args = {'src': x, 'dst': y}
        ws = None
        if self.workspace_bytes:
            ws = args['workspace'] = numpy.empty(self.workspace_bytes, numpy.uint8)
        self._forward(**args)
        return y, ws

    def backward(self, x, gy, workspace):
        if self._backward is None:
            if self._hint is None:
                self._hint = dnnl.Hint(self._forward_pd())
            pd = dnnl.P()
            dnnl.check(dnnl.lib().dnnl_lrn_backward_primitive_desc_create(
                dnnl.ctypes.byref(pd), dnnl.engine(), dnnl.ALG['lrn_across_channels'],
                self.md.handle, self.md.handle, self.md.handle, *self.params, self._hint.pd,
                dnnl.attr()), 'local response normalization backward')
            extra = {'workspace': dnnl.query_md(pd, 'workspace')} if self.workspace_bytes \
                else None
            self._backward = dnnl.Bound(pd, 'local response normalization backward',
                                        ['src', 'diff_dst'], ['diff_src'],
                                        {'src': self.md, 'diff_dst': self.md,
                                         'diff_src': self.md}, extra)
        gx = numpy.empty(self.shape, numpy.float32)
        args = {'src': x, 'diff_dst': gy, 'diff_src': gx}
        if self.workspace_bytes:
            args['workspace'] = workspace
        self._backward(**args)
        return gx



def lrn(shape, n, k, alpha, beta):
    return geometries.cached('lrn', (tuple(shape), int(n), float(k), float(alpha), float(beta)),
                       Lrn)


def _c(a):
    return numpy.ascontiguousarray(a, dtype=numpy.float32)


def forward(x, n=5, k=2, alpha=1e-4, beta=.75):
    """(y, workspace) of Chainer's local_response_normalization."""
    return lrn(x.shape, n, k, alpha, beta).forward(_c(x))


def backward(x, gy, workspace, n=5, k=2, alpha=1e-4, beta=.75):
    return lrn(x.shape, n, k, alpha, beta).backward(_c(x), _c(gy), workspace)
