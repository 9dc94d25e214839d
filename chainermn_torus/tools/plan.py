"""``chainermn-torus plan``: the planner's predictions for every variant and grid shape,
ranked (the best few simulated where SimGrid is installed), and a recommendation."""
import argparse
import json
import sys

from chainermn_torus import command_line
from chainermn_torus.communicators._grid import parse_grid
from chainermn_torus.planning import planner
from chainermn_torus.simulation import ranking, simulate
from chainermn_torus.tools import result_paths

__all__ = ['main', 'MAX_RANKS', 'SIMULATE_AUTO_NODES', 'SIMULATE_MAX_NODES']

COUNT = command_line.arg_type('count')
# Fugaku, the largest CPU machine: 158,976 nodes x 48 cores, 7.6 million ranks.
MAX_RANKS = 10_000_000
# Simulated wall time per candidate here (docs/measurements/simulation/study.jsonl): median
# 1.9 s at 256 nodes, 5.0 s at 1,024, 35 s at 4,096, 81 s at 8,192.
SIMULATE_AUTO_NODES = 1024
SIMULATE_MAX_NODES = 8192


def main(argv):
    """Predict pure all-reduce, rsaa, rsap and shm for every grid shape; recommend one."""
    p = argparse.ArgumentParser(prog='chainermn-torus plan', description=main.__doc__)
    p.add_argument('--nodes', type=COUNT, required=True)
    p.add_argument('--ranks-per-node', type=COUNT, default=1)
    p.add_argument('--model', default='resnet50',
                   help='resnet50, mlp, an .npz snapshot or a byte count')
    command_line.add_option(p, 'network', help='preset ({}) or a file from `calibrate` (default: '
                      '{})'.format(', '.join(sorted(planner.PRESETS)),
                                   planner.DEFAULT_NETWORK_FILE))
    p.add_argument('--alpha', type=command_line.arg_type('non-negative'), default=None,
                   help='latency, seconds (with --beta)')
    p.add_argument('--beta', type=command_line.arg_type('positive'), default=None,
                   help='bandwidth, bytes per second')
    command_line.add_option(p, 'grid', nargs='*', help='only these shapes')
    p.add_argument('--top', type=COUNT, default=None)
    command_line.add_option(p, 'simulate', help='rank the best candidates with the SimGrid '
                      'simulator: auto (where installed; default), on, off')
    p.add_argument('--topology', choices=('fattree', 'torus', 'star'), default=None,
                   help='simulated platform (default: fattree for ofp, torus for k, star '
                        'for a calibrated file)')
    p.add_argument('--json', default=None)
    args = command_line.parse_args(p, argv)
    ranks = args.nodes * args.ranks_per_node
    if ranks > MAX_RANKS:
        p.error(f'--nodes x --ranks-per-node = {ranks:,} ranks: the planner answers up '
                f'to {MAX_RANKS:,} '
                '(more than the largest machines run)')
    try:
        result_paths.check_writable(args.json, '--json')  # before the work, not after it
        nbytes = planner.model_bytes(args.model)  # a bad model is said before the network
        if (args.alpha is None) != (args.beta is None):
            raise ValueError('give --alpha and --beta together (latency in s, bandwidth in '
                             'bytes/s)')
        grids = None
        if args.grid:
            P = args.nodes * args.ranks_per_node
            grids = [parse_grid(g, P, source='--grid') for g in args.grid]
        if args.alpha is not None:
            if not (args.alpha >= 0 and args.beta > 0):
                raise ValueError(f'--alpha must be >= 0 and --beta > 0, got {args.alpha} '
                                 f'and {args.beta}')
            net = planner.Network('alpha-beta', args.alpha, 1.0 / args.beta, args.alpha / 2,
                                  1.0 / (4 * args.beta), 0.0, 0.0, source='--alpha/--beta')
        else:
            net = planner.load_network(args.network)
        rows = planner.plan(args.nodes, args.ranks_per_node, nbytes, net, grids)
        # auto, True or False
        mode = args.simulate
        if mode is True and not simulate.available():
            raise ValueError('--simulate on: ' + simulate.why_unavailable())
        if mode is True and args.nodes > SIMULATE_MAX_NODES:
            raise ValueError(f'--simulate on: {args.nodes} nodes; the simulator answers up '
                             f'to {SIMULATE_MAX_NODES} (8,192 '
                             'took 63-125 s per candidate here); leave --simulate off')
        if mode == 'auto' and simulate.available() and args.nodes > SIMULATE_AUTO_NODES:
            mode = False
            print(f'not simulated: {args.nodes} nodes is beyond the {SIMULATE_AUTO_NODES} '
                  'simulated by default (a '
                  'candidate takes about 5 s at 1,024 nodes, minutes at 8,192); '
                  f'--simulate on simulates up to {SIMULATE_MAX_NODES}')
        if mode is True or (mode == 'auto' and simulate.available()):
            rows = ranking.rank_rows(rows, args.nodes, args.ranks_per_node,
                                     ranking.model_or_bytes(args.model), net,
                                     topology=args.topology)
            print(f'simulated (SimGrid) the planner\'s best {ranking.TOP}; the other rows are the '
                  'alpha-beta model\'s')
    except (ValueError, RuntimeError) as e:
        sys.stderr.write(f'chainermn-torus plan: {e}\n')
        return 2
    print(planner.format_plan(rows, args.nodes, args.ranks_per_node, nbytes, net, args.top))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'nodes': args.nodes, 'ranks_per_node': args.ranks_per_node,
                       'bytes': nbytes, 'network': net.to_dict(), 'rows': rows}, f, indent=2)
    return 0
