"""The machines the simulator plays schedules on, as SimGrid platforms, and where ranks sit.

Every platform is one SimGrid ``<cluster>`` (its builders: a flat cluster of private links
to a backbone, ``FAT_TREE`` or ``TORUS``), with one host per node:

  emulated  scripts/emulate_cluster.sh: K nodes, each with one full-duplex link (tbf both
            ways) to a bridge; the rates and latencies of ``calibrate`` on that cluster. The
            emulated nodes are namespaces of one machine, so they compute on the same cores:
            ``shared_cores`` puts every rank's local work on one host of that many cores.
  fattree   Oakforest-PACS-like: Omni-Path 12.5 GB/s, 2-level full-bisection fat tree
            (leaf switches of 16 nodes with 16 up-links; Tamura & Hanawa, section 4.1).
  torus     Tofu-like: a 3D torus of 5 GB/s links (K computer, Ajima et al. 2009), with
            the rank-to-node mapping as a choice (``MAPPINGS``).

Ranks on the same node talk through SimGrid's loopback (the intra-node rate and latency);
local work (sums, copies) runs on the node's cores at the calibrated rates.
"""
import collections
import math
import random

__all__ = ['Machine', 'MAPPINGS', 'emulated', 'fattree', 'torus', 'platform_xml',
           'node_of_ranks', 'torus_dims']

MAPPINGS = ('row-major', 'rows-along-z', 'random')


class Machine(collections.namedtuple('Machine', [
        'kind', 'nodes', 'ranks_per_node', 'link_Bps', 'link_lat', 'loop_Bps', 'loop_lat',
        'cores', 'reduce_s_per_B', 'copy_s_per_B', 'shared_cores', 'put_factor', 'fence_s',
        'flush_s', 'overhead_s', 'dims', 'mapping', 'seed'])):
    """A platform and a placement. Rates in bytes/s, latencies in s, work in s per byte;
    fence_s / flush_s: the wait of a fence closing a put round, of a flush, in a grid row
    that spans nodes (calibrate's fence_inter / flush_inter; 0 where not measured).

    Latency is split in two: ``link_lat`` per link crossed (SimGrid adds them up along the
    route) and ``overhead_s``, the software's share, paid once by a rank in a round where
    it talks to another node; together they give calibrate's alpha_inter on a typical route.
    """

    def describe(self):
        shape = {'emulated': 'emulated cluster', 'fattree': 'fat tree',
                 'torus': 'torus {}'.format('x'.join(map(str, self.dims or ())))}[self.kind]
        return '{} nodes x {} ranks, {}, links {:.3g} GB/s {:.3g} us{}'.format(
            self.nodes, self.ranks_per_node, shape, self.link_Bps / 1e9, self.link_lat * 1e6,
            '' if self.kind != 'torus' else ', mapping ' + self.mapping)


# Per link crossed: Omni-Path and Tofu switch/router hops are about 0.1 us (estimates; a
# 2-level fat tree route crosses 4 links, a torus neighbour 1).
HOP_S = 0.1e-6


def _machine(kind, nodes, R, net, cores, **kw):
    if nodes < 1 or R < 1:
        raise ValueError(f'chainermn_torus: nodes and ranks per node must be >= 1, got {nodes} and '
                         f'{R}')
    fields = dict(kind=kind, nodes=int(nodes), ranks_per_node=int(R),
                  link_Bps=1.0 / net.beta_inter, link_lat=net.alpha_inter,
                  loop_Bps=1.0 / net.beta_intra if net.beta_intra else 1e12,
                  loop_lat=net.alpha_intra, cores=int(cores), reduce_s_per_B=net.gamma,
                  copy_s_per_B=net.mem, shared_cores=0,
                  put_factor=net.beta_put / net.beta_inter if net.beta_inter else 1.0,
                  fence_s=getattr(net, 'fence_inter', None) or 0.0,
                  flush_s=getattr(net, 'flush_inter', None) or 0.0, overhead_s=0.0,
                  dims=None, mapping='row-major', seed=0)
    fields.update(kw)
    return Machine(**fields)


def emulated(nodes, R, net, shared_cores=2):
    """The emulated cluster with ``net`` from ``calibrate`` (network-KxR.json)."""
    # A route crosses the sender's link and the receiver's (the bridge is the backbone).
    return _machine('emulated', nodes, R, net, max(1, R), shared_cores=shared_cores,
                    link_lat=net.alpha_inter / 2)


def fattree(nodes, R, net, cores=64):
    return _machine('fattree', nodes, R, net, cores, link_lat=HOP_S,
                    overhead_s=max(0.0, net.alpha_inter - 4 * HOP_S))


def torus_dims(nodes):
    """A near-cubic 3D torus of exactly ``nodes`` nodes (powers of two: 8192 = 16x16x32)."""
    dims, left = [], nodes
    for k in (3, 2):
        d = int(round(left ** (1.0 / k)))
        while d > 1 and left % d:
            d -= 1
        dims.append(max(d, 1))
        left //= dims[-1]
    dims.append(left)
    return tuple(sorted(dims))


def torus(nodes, R, net, mapping='row-major', dims=None, cores=8, seed=0):
    if mapping not in MAPPINGS:
        raise ValueError('chainermn_torus: mapping must be one of {}, got {!r}'.format(
            ', '.join(MAPPINGS), mapping))
    dims = tuple(dims) if dims else torus_dims(nodes)
    if math.prod(dims) != nodes:
        raise ValueError('chainermn_torus: torus {} has {} nodes, not {}'.format(
            'x'.join(map(str, dims)), math.prod(dims), nodes))
    return _machine('torus', nodes, R, net, cores, dims=dims, mapping=mapping, seed=seed,
                    link_lat=HOP_S, overhead_s=max(0.0, net.alpha_inter - HOP_S))


def _fattree_params(nodes):
    # Leaves of 16 nodes (or all of them, below 16) and as many up-links: full bisection.
    leaf = 16 if nodes % 16 == 0 and nodes > 16 else nodes
    spines = nodes // leaf
    if spines == 1:
        return f'1;{leaf};1;1'
    return f'2;{leaf},{spines};1,{leaf};1,1'


def platform_xml(m):
    """The SimGrid platform (XML) of machine ``m``: hosts node0 .. node<K-1> (and cpu)."""
    topo = ''
    if m.kind == 'fattree':
        topo = f' topology="FAT_TREE" topo_parameters="{_fattree_params(m.nodes)}"'
    elif m.kind == 'torus':
        topo = ' topology="TORUS" topo_parameters="{}"'.format(','.join(map(str, m.dims)))
    backbone = f' bb_bw="{1e13:.6g}Bps" bb_lat="0s"' if m.kind == 'emulated' else ''
    cpu = ''
    if m.shared_cores:
        cpu = ('<zone id="cpu" routing="None"><host id="cpu" speed="1Gf" '
               f'core="{m.shared_cores}"/></zone>'
               )
    return f"""<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1"><zone id="world" routing="Full">
<cluster id="c" prefix="node" suffix="" radical="0-{m.nodes - 1}" speed="1Gf" core="{m.cores}"
 bw="{m.link_Bps:.9g}Bps" lat="{m.link_lat:.9g}s" sharing_policy="SPLITDUPLEX"
 loopback_bw="{m.loop_Bps:.9g}Bps" loopback_lat="{m.loop_lat:.9g}s"{backbone}{topo}/>
{cpu}
</zone></platform>
"""


def node_of_ranks(m):
    """node index of every rank: rank r is in node slot r // R, and slots map to nodes."""
    K, R = m.nodes, m.ranks_per_node
    if m.kind != 'torus' or m.mapping == 'row-major':
        slots = list(range(K))
    elif m.mapping == 'random':
        slots = list(range(K))
        random.Random(m.seed).shuffle(slots)
    else:
        # rows-along-z: slots enumerate the torus with the last axis fastest, so that
        # consecutive slots (a grid row when M <= R * dims[-1]) form a line along z.
        X, Y, Z = m.dims
        slots = []
        for x in range(X):
            for y in range(Y):
                for z in range(Z):
                    slots.append(x + X * (y + Y * z))  # SimGrid numbers x fastest
    return [slots[r // R] for r in range(K * R)]
