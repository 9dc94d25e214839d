"""Cost model and planner: predicted all-reduce time of each algorithm and grid shape.

An alpha-beta(-gamma) model with two levels, intra-node and inter-node, and nodes whose
network interface is shared by the ranks on them:

  alpha   latency of one message (s), intra / inter node;
  beta    seconds per byte of one rank's stream, intra / inter node (1 / bandwidth); when R
          ranks of a node send across the network in the same phase, each gets 1/R of the
          link, so the inter-node term is multiplied by the number of those ranks;
  gamma   seconds per byte of reduction arithmetic (read two, write one) in MPI's sum;
  mem     seconds per byte a rank copies in node memory (the shared-memory row phases).

Ranks are placed node by node (rank r on node r // R), grid rows are runs of M consecutive
ranks (so M = R puts each row in one node), columns the ranks at the same row position.
For a phase on a group of p ranks of which c share a node with a given member, the fraction
of traffic that leaves the node is (p - c) / (p - 1).

Algorithms, with n bytes (MPICH's choices for large messages):
  all-reduce      Rabenseifner: 2 log2 p steps, 2 (p-1)/p n bytes, (p-1)/p n reduced;
  reduce-scatter  pairwise exchange: p - 1 steps, (p-1)/p n bytes, (p-1)/p n reduced;
  all-gather      ring: p - 1 steps, (p-1)/p n bytes;
  put rounds      recursive doubling, the rounds of rsap's own schedule
                  (communicators._schedule.put_rounds: log2 p', plus 2 when p is not a
                  power of two, p' the largest power of two <= p), (p-1)/p n bytes at the
                  Put rate (beta_put), and each round closed by a fence, modelled as a
                  barrier (2 log2 p latencies), the per-step synchronisation cost;
  shm rows        reduce in turns + gather: M + 2 barriers, about 3 (M-1)/M n + 2 (M-1)/M n
                  bytes of node memory traffic per rank (see communicators._shm).
pure_allreduce appears twice: over all P ranks as one flat group ("flat"), and as the
node-aware composition MPICH uses by default (reduce in the node, all-reduce among one rank
per node, broadcast in the node: "node-aware MPI").
"""
import json
import math
import os

from chainermn_torus.communicators import variants
from chainermn_torus.communicators._schedule import ceil_log2, put_rounds

__all__ = ['Network', 'PRESETS', 'MODEL_BYTES', 'predict', 'plan', 'load_network',
           'model_bytes', 'format_plan', 'DEFAULT_NETWORK_FILE']

DEFAULT_NETWORK_FILE = os.path.join(os.path.expanduser('~'), '.config', 'chainermn-torus',
                                    'network.json')

# Gradient bytes of the models the benchmarks use (float32).
MODEL_BYTES = {'resnet50': 25557096 * 4, 'mlp': 1796010 * 4}


class Network(object):
    FIELDS = ('alpha_inter', 'beta_inter', 'alpha_intra', 'beta_intra', 'gamma', 'mem')

    def __init__(self, name, alpha_inter, beta_inter, alpha_intra, beta_intra, gamma, mem,
                 source='', beta_put=None, fence_inter=None, flush_inter=None):
        self.name, self.source = name, source
        # Seconds of a fence epoch and of a put + flush between nodes, where calibrate
        # measured them (None: unknown); the simulator uses them, this model does not.
        self.fence_inter = None if fence_inter is None else float(fence_inter)
        self.flush_inter = None if flush_inter is None else float(flush_inter)
        # MPI_Put between nodes can be slower than two-sided messages (MPICH over UCX/TCP
        # emulates RMA with active messages: measured 1.3-1.6x slower on the emulated
        # cluster); calibrate measures it, presets and --beta assume the message rate.
        self.beta_put = float(beta_inter if beta_put is None else beta_put)
        self.alpha_inter, self.beta_inter = float(alpha_inter), float(beta_inter)
        self.alpha_intra, self.beta_intra = float(alpha_intra), float(beta_intra)
        self.gamma, self.mem = float(gamma), float(mem)
        for f in self.FIELDS:
            v = getattr(self, f)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError('chainermn_torus: network {!r}: {} must be a finite number '
                                 '>= 0, got {!r}'.format(name, f, v))

    def to_dict(self):
        d = {f: getattr(self, f) for f in self.FIELDS}
        d.update(name=self.name, source=self.source, beta_put=self.beta_put,
                 fence_inter=self.fence_inter, flush_inter=self.flush_inter)
        return d

    @classmethod
    def from_dict(cls, d, where='network file'):
        missing = [f for f in cls.FIELDS if f not in d]
        if missing:
            raise ValueError('chainermn_torus: {} lacks {}; it needs {}'.format(
                where, ', '.join(missing), ', '.join(cls.FIELDS)))
        return cls(d.get('name', where), *[d[f] for f in cls.FIELDS], source=d.get('source', ''),
                   beta_put=d.get('beta_put'), fence_inter=d.get('fence_inter'),
                   flush_inter=d.get('flush_inter'))

    def describe(self):
        return ('{}: inter-node {:.2f} us, {:.2f} GB/s; intra-node {:.2f} us, {:.2f} GB/s; '
                'reduction {:.2f} GB/s; memory copy {:.2f} GB/s per rank'.format(
                    self.name, self.alpha_inter * 1e6, _gbps(self.beta_inter),
                    self.alpha_intra * 1e6, _gbps(self.beta_intra), _gbps(self.gamma),
                    _gbps(self.mem)))


def _gbps(beta):
    return float('inf') if beta == 0 else 1e-9 / beta


PRESETS = {
    # Oakforest-PACS: Intel Omni-Path 100 Gbit/s, full-bisection fat tree, 12.5 GB/s per
    # link (seed 003, section 4.1). Latency: Intel quotes about 1 us MPI latency for OPA on
    # Xeon; KNL's slower cores roughly double MPI software overheads, so 2 us is assumed
    # (an estimate: replace it with `chainermn-torus calibrate` on the machine). Node memory:
    # MCDRAM 490 GB/s (seed 003); one rank per node with 64 threads copies at about 100 GB/s
    # and MPI's single-threaded sum runs at about 4 GB/s on one KNL core (estimates).
    'ofp': Network('ofp', 2.0e-6, 1 / 12.5e9, 1.0e-6, 1 / 20e9, 1 / 4e9, 1 / 100e9,
                   source='seed 003 (12.5 GB/s, MCDRAM 490 GB/s); latencies and per-core '
                          'rates estimated'),
    # K computer: Tofu 6D mesh/torus, 5 GB/s per link and direction (Ajima et al., "Tofu: a
    # 6D mesh/torus interconnect for exascale computers", IEEE Computer 42(11), 2009); MPI
    # latency about 1.5 us (estimate; the hardware put latency is below 1 us). SPARC64
    # VIIIfx node: 64 GB/s memory, 8 cores (FlatMPI: 8 ranks per node).
    'k': Network('k', 1.5e-6, 1 / 5e9, 1.0e-6, 1 / 8e9, 1 / 2e9, 1 / 8e9,
                 source='Ajima et al. 2009 (5 GB/s links); node memory 64 GB/s; latencies '
                        'and per-core rates estimated'),
}


def load_network(name_or_path=None):
    """A preset by name, a JSON file written by ``calibrate``, or the default file."""
    if not name_or_path:
        from chainermn_torus import config
        name_or_path = config.env('network')[0] or DEFAULT_NETWORK_FILE
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    if not os.path.isfile(name_or_path):
        raise ValueError('chainermn_torus: network {!r} is neither a preset ({}) nor a file; '
                         'run `chainermn-torus calibrate` under mpiexec to measure one, or '
                         'give --alpha/--beta'.format(name_or_path, ', '.join(sorted(PRESETS))))
    with open(name_or_path) as f:
        try:
            data = json.load(f)
        except ValueError as e:
            raise ValueError('chainermn_torus: network file {} is not JSON: {}'.format(
                name_or_path, e))
    return Network.from_dict(data, where=name_or_path)


def model_bytes(model):
    """Gradient bytes of 'resnet50', 'mlp', an .npz snapshot (float arrays) or a byte count."""
    if model in MODEL_BYTES:
        return MODEL_BYTES[model]
    if isinstance(model, int) or (isinstance(model, str) and model.isdigit()):
        return int(model)
    if isinstance(model, str) and os.path.isfile(model):
        import numpy
        try:
            with numpy.load(model, allow_pickle=False) as z:
                total = sum(z[k].size * 4 for k in z.files if z[k].dtype.kind == 'f')
        except (ValueError, OSError, EOFError, AttributeError, TypeError) as e:
            raise ValueError('chainermn_torus: {} is not an .npz snapshot of a model (numpy '
                             'says: {}); give resnet50, mlp, a byte count or an .npz '
                             'file'.format(model, e)) from None
        if total == 0:
            raise ValueError('chainermn_torus: {} holds no float arrays'.format(model))
        return total
    raise ValueError('chainermn_torus: model must be {}, a byte count or an .npz file; got '
                     '{!r}'.format(', '.join(sorted(MODEL_BYTES)), model))


# --- the model ---------------------------------------------------------------------------
class _Group(object):
    """p ranks of which c share a node with each member; k ranks per node active at once."""

    def __init__(self, p, c, k):
        self.p, self.c, self.k = p, max(1, min(c, p)), k

    @property
    def off(self):
        return 0.0 if self.p <= 1 else (self.p - self.c) / float(self.p - 1)

    def alpha(self, net):
        return self.off * net.alpha_inter + (1 - self.off) * net.alpha_intra

    def beta(self, net, put=False):
        # Off-node bytes share the node's link with the k ranks sending at the same time.
        inter = net.beta_put if put else net.beta_inter
        return self.off * inter * self.k + (1 - self.off) * net.beta_intra


def _allreduce(g, n, net):
    p = g.p
    if p <= 1:
        return 0.0
    return (2 * ceil_log2(p) * g.alpha(net) + 2.0 * (p - 1) / p * n * g.beta(net)
            + (p - 1.0) / p * n * net.gamma)


def _reduce_scatter(g, n, net):
    p = g.p
    if p <= 1:
        return 0.0
    return (p - 1) * g.alpha(net) + (p - 1.0) / p * n * (g.beta(net) + net.gamma)


def _allgather(g, n, net):
    p = g.p
    if p <= 1:
        return 0.0
    return (p - 1) * g.alpha(net) + (p - 1.0) / p * n * g.beta(net)


def _put_rounds(g, n, net):
    p = g.p
    if p <= 1:
        return 0.0
    rounds = len(put_rounds(p))  # the schedule rsap runs, not a formula for it
    fence = 2 * ceil_log2(p) * g.alpha(net)  # a fence costs about a barrier over the row
    return rounds * (g.alpha(net) + fence) + (p - 1.0) / p * n * g.beta(net, put=True)


def _groups(nodes, R, M):
    """(row group, column group) for rows of M consecutive ranks."""
    P = nodes * R
    N = P // M
    row_c = M if (M <= R and R % M == 0) else min(M, R)
    col_c = 1 if M >= R else max(1, R // M)
    row_k = 0 if row_c == M else R  # rows inside nodes use no link
    col_k = 0 if col_c == N else R
    return _Group(M, row_c, row_k), _Group(N, col_c, col_k)


def _flat_allreduce(nodes, R, n, net, grid):
    t = _allreduce(_Group(nodes * R, R, R), n, net)
    return t, {'allreduce': t}


def _node_aware_allreduce(nodes, R, n, net, grid):
    reduce = (ceil_log2(R) * net.alpha_intra + n * (net.beta_intra + net.gamma)) if R > 1 else 0.0
    inter = _allreduce(_Group(nodes, 1, 1), n, net)
    bcast = (ceil_log2(R) * net.alpha_intra + n * net.beta_intra) if R > 1 else 0.0
    return reduce + inter + bcast, {'node reduce': reduce, 'allreduce': inter,
                                    'node bcast': bcast}


def _shm(nodes, R, n, net, grid):
    M = grid[0]
    row, col = _groups(nodes, R, M)
    if row.k != 0 and M > 1:
        return float('inf'), {'note': 'rows span nodes: no shared-memory path'}
    column = _allreduce(col, n / M, net)
    steps = (M + 2) * ceil_log2(M) * net.alpha_intra * 2
    reduce = 3.0 * (M - 1) / M * n * net.mem / 2 if M > 1 else 0.0
    gather = 2.0 * (M - 1) / M * n * net.mem / 2 if M > 1 else 0.0
    return steps + reduce + column + gather, {
        'reduce (shm)': steps + reduce, 'allreduce': column, 'gather (shm)': gather}


def _torus(last_name, last_phase):
    def cost(nodes, R, n, net, grid):
        M = grid[0]
        row, col = _groups(nodes, R, M)
        rs = _reduce_scatter(row, n, net)
        column = _allreduce(col, n / M, net)
        last = last_phase(row, n, net)
        return rs + column + last, {'reduce_scatter': rs, 'allreduce': column, last_name: last}
    return cost


# The cost functions the variants table (communicators.variants) names in its ``cost`` column.
COSTS = {
    'flat_allreduce': _flat_allreduce,
    'node_aware_allreduce': _node_aware_allreduce,
    'rsaa': _torus('allgather', _allgather),
    'rsap': _torus('put', _put_rounds),
    'shm': _shm,
}

ALGORITHMS = variants.planned()


def predict(algorithm, nodes, R, nbytes, net, grid=None):
    """Predicted seconds and per-phase breakdown for one all-reduce of ``nbytes``."""
    v = variants.get(algorithm)
    if v.cost is None:
        raise ValueError('chainermn_torus: the planner has no cost model for {!r}; it models '
                         '{}'.format(algorithm, ', '.join(ALGORITHMS)))
    P = nodes * R
    if v.grid:
        M, N = grid
        if M * N != P:
            raise ValueError('chainermn_torus: grid (M, N) = ({}, {}) does not fit {} nodes x '
                             '{} ranks = {} ranks'.format(M, N, nodes, R, P))
    return COSTS[v.cost](nodes, R, float(nbytes), net, grid if v.grid else None)


def shapes(P):
    return [(m, P // m) for m in range(1, P + 1) if P % m == 0]


def plan(nodes, R, nbytes, net, grids=None, algorithms=ALGORITHMS):
    """Every (algorithm, grid) with its prediction, fastest first."""
    if nodes < 1 or R < 1:
        raise ValueError('chainermn_torus: nodes and ranks per node must be >= 1, got {} and '
                         '{}'.format(nodes, R))
    P = nodes * R
    rows = []
    for algo in algorithms:
        if not variants.get(algo).grid:
            t, parts = predict(algo, nodes, R, nbytes, net)
            rows.append({'algorithm': algo, 'grid': None, 'seconds': t, 'phases': parts})
            continue
        for g in (grids or shapes(P)):
            if g[0] * g[1] != P:
                raise ValueError(
                    'chainermn_torus: grid {}x{} does not fit {} nodes x {} ranks = {} ranks; '
                    'shapes that fit: {}'.format(g[0], g[1], nodes, R, P, ', '.join(
                        '{}x{}'.format(*s) for s in shapes(P))))
            if g[0] == 1 and algo != 'rsap':
                continue  # M = 1 is a plain column all-reduce: listed once, as rsap
            t, parts = predict(algo, nodes, R, nbytes, net, g)
            if math.isfinite(t):
                rows.append({'algorithm': algo, 'grid': g, 'seconds': t, 'phases': parts})
    rows.sort(key=lambda r: r['seconds'])
    return rows


def format_plan(rows, nodes, R, nbytes, net, top=None):
    lines = ['{} nodes x {} ranks = {} ranks, {:.1f} MB of gradients; {}'.format(
        nodes, R, nodes * R, nbytes / 1e6, net.describe())]
    if net.source:
        lines.append('  figures: ' + net.source)
    lines.append('{:<28} {:>8} {:>12} {:>9}  {}'.format('algorithm', 'grid', 'predicted ms',
                                                        'x best', 'phases (ms)'))
    best = rows[0]['seconds'] if rows else 0
    simulated = any(r.get('source') == 'simulated' for r in rows)
    for i, r in enumerate(rows[:top]):
        if simulated and r.get('source') != 'simulated' and (
                i == 0 or rows[i - 1].get('source') == 'simulated'):
            lines.append('-- not simulated (alpha-beta model, not comparable with the rows '
                         'above):')
        grid = '' if r['grid'] is None else '{}x{}'.format(*r['grid'])
        phases = ', '.join('{} {:.2f}'.format(k, v * 1e3) for k, v in r['phases'].items()
                           if isinstance(v, float))
        lines.append('{:<28} {:>8} {:>12.2f} {:>9.2f}  {}'.format(
            r['algorithm'], grid, r['seconds'] * 1e3, r['seconds'] / best if best else 1,
            phases))
    if rows:
        r = rows[0]
        lines.append('recommended: {}{}'.format(
            r['algorithm'], '' if r['grid'] is None else ' with grid {}x{}'.format(*r['grid'])))
    return '\n'.join(lines)
