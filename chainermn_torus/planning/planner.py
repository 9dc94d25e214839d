"""The planner: predicted all-reduce time of each algorithm variant and grid shape, and
the network figures it predicts with.

The cost of each algorithm is its own (``algorithms``: ``flat``, ``torus``, ``rsap``,
``shm``, built from the collectives' costs in ``algorithms.collectives``); this module
holds the network figures (``Network``, the presets, calibrate's files) and ranks every
planned variant of the table (``algorithms.variants``) on every grid shape that fits.

Figures of a network:
  alpha   latency of one message (s), intra / inter node;
  beta    seconds per byte of one rank's stream, intra / inter node (1 / bandwidth); when R
          ranks of a node send across the network in the same phase, each gets 1/R of the
          link;
  gamma   seconds per byte of reduction arithmetic (read two, write one) in MPI's sum;
  mem     seconds per byte a rank copies in node memory (the shared-memory row phases).
"""
import math
import os
import zipfile

import numpy

from chainermn_torus import settings_table
from chainermn_torus.errors import ConfigError, UnsafePath
from chainermn_torus.runtime.files import shared_paths
from chainermn_torus.algorithms import variants
from chainermn_torus.algorithms.gradient_sets import MODEL_BYTES

__all__ = ['Network', 'PRESETS', 'MODEL_BYTES', 'predict', 'plan', 'load_network',
           'model_bytes', 'format_plan', 'DEFAULT_NETWORK_FILE']

DEFAULT_NETWORK_FILE = os.path.join(os.path.expanduser('~'), '.config', 'chainermn-torus',
                                    'network.json')

class Network:
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
                raise ValueError(f'chainermn_torus: network {name!r}: {f} must be a finite number '
                                 f'>= 0, got {v!r}')

    def to_dict(self):
        d = {f: getattr(self, f) for f in self.FIELDS}
        d.update(name=self.name, source=self.source, beta_put=self.beta_put,
                 fence_inter=self.fence_inter, flush_inter=self.flush_inter)
        return d

    @classmethod
    def from_dict(cls, d, where='network file'):
        missing = [f for f in cls.FIELDS if f not in d]
        if missing:
            raise ConfigError('chainermn_torus: {} lacks {}; it needs {}'.format(
                where, ', '.join(missing), ', '.join(cls.FIELDS)))
        return cls(d.get('name', where), *[d[f] for f in cls.FIELDS], source=d.get('source', ''),
                   beta_put=d.get('beta_put'), fence_inter=d.get('fence_inter'),
                   flush_inter=d.get('flush_inter'))

    def describe(self):
        return (f'{self.name}: inter-node {self.alpha_inter * 1e6:.2f} '
                f'us, {_gbps(self.beta_inter):.2f} GB/s; intra-node {self.alpha_intra * 1e6:.2f} '
                f'us, {_gbps(self.beta_intra):.2f} GB/s; '
                f'reduction {_gbps(self.gamma):.2f} GB/s; memory copy {_gbps(self.mem):.2f} GB/s '
                'per rank')


def _gbps(beta):
    return float('inf') if beta == 0 else 1e-9 / beta


PRESETS = {
    # Oakforest-PACS: Intel Omni-Path 100 Gbit/s, full-bisection fat tree, 12.5 GB/s per
    # link (Tamura & Hanawa, section 4.1). Latency: Intel quotes about 1 us MPI latency for OPA on
    # Xeon; KNL's slower cores roughly double MPI software overheads, so 2 us is assumed
    # (an estimate: replace it with `chainermn-torus calibrate` on the machine). Node memory:
    # MCDRAM 490 GB/s (Tamura & Hanawa); one rank per node with 64 threads copies at about 100 GB/s
    # and MPI's single-threaded sum runs at about 4 GB/s on one KNL core (estimates).
    'ofp': Network('ofp', 2.0e-6, 1 / 12.5e9, 1.0e-6, 1 / 20e9, 1 / 4e9, 1 / 100e9,
                   source='Tamura & Hanawa (12.5 GB/s, MCDRAM 490 GB/s); latencies and per-core '
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
        name_or_path = DEFAULT_NETWORK_FILE
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    if not os.path.lexists(name_or_path):
        raise ConfigError('chainermn_torus: network {!r} is neither a preset ({}) nor a '
                          'file; run `chainermn-torus calibrate` under mpiexec to measure one, '
                          'or give --alpha/--beta'.format(name_or_path,
                                                          ', '.join(sorted(PRESETS))))
    # Under the rule for shared paths: a file another user wrote would choose for this job.
    try:
        data = shared_paths.read_json(
            name_or_path, 'the network file', settings_table.BOUNDS['network_file'],
            fix='Use a file of your own (copy it, or run `chainermn-torus calibrate`).')
    except ValueError as e:
        raise ConfigError(f'chainermn_torus: network file {name_or_path} is not '
                          f'JSON: {e}') from None
    except UnsafePath:
        raise
    except OSError as e:
        raise ConfigError('chainermn_torus: cannot read the network file {} ({}); give a '
                          'file this user can read, or a preset ({})'.format(
                              name_or_path, e.strerror or e, ', '.join(sorted(PRESETS)))) \
            from None
    return Network.from_dict(data, where=name_or_path)


def model_bytes(model):
    """Gradient bytes of 'resnet50', 'mlp', an .npz snapshot (float arrays) or a byte count."""
    if model in MODEL_BYTES:
        return MODEL_BYTES[model]
    if isinstance(model, int) or (isinstance(model, str) and model.isdigit()):
        if int(model) < 1:
            raise ConfigError(f'chainermn_torus: model of {model} bytes: give a byte count >= 1, '
                              'resnet50, mlp or an .npz file')
        return int(model)
    if isinstance(model, str) and os.path.isfile(model):
        try:
            with numpy.load(model, allow_pickle=False) as z:
                total = sum(z[k].size * 4 for k in z.files if z[k].dtype.kind == 'f')
        except (ValueError, OSError, EOFError, AttributeError, TypeError,
                zipfile.BadZipFile) as e:  # a truncated or damaged file
            raise ConfigError(f'chainermn_torus: {model} is not an .npz snapshot of a model (numpy '
                              f'says: {e}); give resnet50, mlp, a byte count or an .npz '
                              'file') from None
        if total == 0:
            raise ConfigError(f'chainermn_torus: {model} holds no float arrays')
        return total
    if isinstance(model, str) and (model.endswith('.npz') or os.sep in model):
        raise ConfigError('chainermn_torus: model file {} does not exist{}'.format(
            model, '' if os.path.exists(model) else
            f' (directory {os.path.dirname(os.path.abspath(model))} does not either)'
            if not os.path.isdir(os.path.dirname(os.path.abspath(model))) else ''))
    raise ConfigError('chainermn_torus: model must be {}, a byte count or an .npz file; got '
                      '{!r}'.format(', '.join(sorted(MODEL_BYTES)), model))


def predict(algorithm, nodes, R, nbytes, net, grid=None):
    """Predicted seconds and per-phase breakdown for one all-reduce of ``nbytes``."""
    v = variants.get(algorithm)
    if v.algorithm is None:
        raise ValueError('chainermn_torus: the planner has no cost model for {!r}; it models '
                         '{}'.format(algorithm, ', '.join(
                             n for n, w in variants.VARIANTS.items() if w.algorithm)))
    P = nodes * R
    if v.grid:
        M, N = grid
        if M * N != P:
            raise ValueError(f'chainermn_torus: grid (M, N) = ({M}, {N}) does not fit {nodes} '
                             'nodes x '
                             f'{R} ranks = {P} ranks')
    return v.algorithm.cost(nodes, R, float(nbytes), net, grid if v.grid else None)


def shapes(P):
    """Every grid (M, N) with M x N = P, by M (divisors up to sqrt(P): a million ranks in
    milliseconds)."""
    small = [m for m in range(1, math.isqrt(P) + 1) if P % m == 0]
    divisors = sorted(set(small + [P // m for m in small]))
    return [(m, P // m) for m in divisors]


def plan(nodes, R, nbytes, net, grids=None, algorithms=None):
    """Every (algorithm, grid) with its prediction, fastest first; ``algorithms``: the
    variants to rank (default: the table's planned ones)."""
    if nodes < 1 or R < 1:
        raise ValueError(f'chainermn_torus: nodes and ranks per node must be >= 1, got {nodes} and '
                         f'{R}')
    P = nodes * R
    rows = []
    for algo in algorithms or variants.planned():
        v = variants.get(algo)
        if not v.grid:
            t, parts = predict(algo, nodes, R, nbytes, net)
            rows.append({'algorithm': algo, 'grid': None, 'seconds': t, 'phases': parts})
            continue
        for g in (grids or shapes(P)):
            if g[0] * g[1] != P:
                raise ValueError(
                    'chainermn_torus: grid {}x{} does not fit {} nodes x {} ranks = {} ranks; '
                    'shapes that fit: {}'.format(g[0], g[1], nodes, R, P, ', '.join(
                        '{}x{}'.format(*s) for s in shapes(P))))
            if g[0] == 1 and not v.algorithm.row_of_one:
                continue  # M = 1 is a plain column all-reduce: listed once
            t, parts = predict(algo, nodes, R, nbytes, net, g)
            if math.isfinite(t):
                rows.append({'algorithm': algo, 'grid': g, 'seconds': t, 'phases': parts})
    rows.sort(key=lambda r: r['seconds'])
    return rows


def format_plan(rows, nodes, R, nbytes, net, top=None):
    lines = [f'{nodes} nodes x {R} ranks = {nodes * R} ranks, {nbytes / 1e6:.1f} MB of '
             f'gradients; {net.describe()}']
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
        phases = ', '.join(f'{k} {v * 1e3:.2f}' for k, v in r['phases'].items()
                           if isinstance(v, float))
        lines.append('{:<28} {:>8} {:>12.2f} {:>9.2f}  {}'.format(
            r['algorithm'], grid, r['seconds'] * 1e3, r['seconds'] / best if best else 1,
            phases))
    if rows:
        r = rows[0]
        lines.append('recommended: {}{}'.format(
            r['algorithm'], '' if r['grid'] is None else ' with grid {}x{}'.format(*r['grid'])))
    return '\n'.join(lines)
