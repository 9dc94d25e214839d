"""``chainermn-torus simulate``: the communicators' all-reduce on a simulated machine (SimGrid).

    chainermn-torus simulate --platform fattree --nodes 256 --network ofp \\
        --algorithm pure_allreduce rsap --grid 2x128 16x16 64x4
    chainermn-torus simulate validate docs/measurements/emulated   (against measurements)
    chainermn-torus simulate study [--nodes 256 1024 4096 8192]       (the shape study)

Every (algorithm, grid) is simulated from the schedules the communicators run
(``chainermn_torus.algorithms``); docs/simulation.md says what is modelled.
"""
import argparse
import json
import sys

from chainermn_torus import command_line
from chainermn_torus.algorithms import variants
from chainermn_torus.communicators._grid import parse_grid
from chainermn_torus.planning import planner
from chainermn_torus.simulation import platforms, schedules, study, validate
from chainermn_torus.simulation.ranking import machine_for, model_or_bytes
from chainermn_torus.simulation.simulate import SimulationError, simulate
from chainermn_torus.tools import result_paths

__all__ = ['main']

PLATFORMS = ('fattree', 'torus', 'emulated', 'star')


MAX_RANKS = 65536  # ranks in one simulation: beyond, building the platform alone took hours


def _grids(values, P):
    return [parse_grid(g, P, source='--grid') for g in values]


def _machine(args, net):
    if args.platform == 'torus':
        dims = None
        if args.dims:
            try:
                dims = tuple(int(x) for x in args.dims.split(','))
            except ValueError:
                raise ValueError('--dims must look like X,Y,Z (for example 16,16,32), got '
                                 f'{args.dims!r}') from None
        return platforms.torus(args.nodes, args.ranks_per_node, net, mapping=args.mapping,
                               dims=dims, seed=args.seed)
    if args.platform == 'emulated':
        return platforms.emulated(args.nodes, args.ranks_per_node, net)
    return machine_for(net, args.nodes, args.ranks_per_node, args.platform)


def run(argv):
    p = argparse.ArgumentParser(prog='chainermn-torus simulate', description=__doc__.split(
        '\n')[0])
    p.add_argument('--platform', choices=PLATFORMS, default='fattree',
                   help='fattree (Oakforest-PACS-like), torus (Tofu-like), emulated '
                        '(scripts/emulate_cluster.sh: shared cores), star (private links to '
                        'one switch); default %(default)s')
    p.add_argument('--nodes', type=command_line.arg_type('count'), required=True)
    p.add_argument('--ranks-per-node', type=command_line.arg_type('count'), default=1)
    command_line.add_option(p, 'network', default='ofp', help='preset ({}) or a calibrate '
                      'file'.format(', '.join(sorted(planner.PRESETS))))
    # Default: each registered communicator's first modelled variant (its plain form).
    p.add_argument('--algorithm', nargs='+', choices=variants.simulated(), default=[
        reg.variants[0].name for reg in variants.COMMUNICATORS.values()
        if reg.variants and reg.variants[0].algorithm is not None])
    command_line.add_option(p, 'grid', nargs='*',
                      help='grids for rsaa/rsap/shm (default: M = 2, 4, 16, 64 where they fit)')
    p.add_argument('--model', default='resnet50', help='resnet50, mlp or a byte count')
    p.add_argument('--fp16', action='store_true', help='float16 all-reduce')
    p.add_argument('--library', choices=schedules.LIBRARIES, default='halving',
                   help="stand-in for MPI's collectives (default %(default)s)")
    p.add_argument('--flat', action='store_true',
                   help="MPI's all-reduce without MPICH's node-aware composition")
    p.add_argument('--mapping', choices=platforms.MAPPINGS, default='row-major')
    p.add_argument('--dims', default=None, help='torus dimensions X,Y,Z')
    p.add_argument('--seed', type=command_line.arg_type('seed'), default=0,
                   help='random mapping seed')
    # 0 (one message for the whole buffer) or at least settings_table.MIN_SEGMENT_BYTES (the row's
    # check): -1 gave 0.00 ms for every algorithm
    command_line.add_option(p, 'segment_bytes')
    p.add_argument('--mode', choices=('actors', 'lockstep'), default=None,
                   help='default: actors up to 64 ranks, lock-step beyond')
    p.add_argument('--json', default=None)
    args = command_line.parse_args(p, argv)
    P = args.nodes * args.ranks_per_node
    if P > MAX_RANKS:  # 10**8 nodes ran for hours building the platform, printing nothing
        p.error(f'--nodes {args.nodes} x --ranks-per-node {args.ranks_per_node} is {P} ranks; the '
                f'simulator takes at most {MAX_RANKS} '
                '(the shape study goes to 8192 nodes)')
    try:
        result_paths.check_writable(args.json, '--json')  # before the simulation, not after it
        net = planner.load_network(args.network)
        machine = _machine(args, net)
        model = model_or_bytes(args.model)
        if args.grid:
            grids = _grids(args.grid, P)
        else:
            grids = [(m, P // m) for m in (2, 4, 16, 64) if P % m == 0 and m < P] or [(P, 1)]
        jobs = []
        for algo in args.algorithm:
            v = variants.get(algo)
            if not v.grid:
                jobs.append((algo, None))
                continue
            for g in grids:
                try:
                    v.algorithm.check_placement(g[0], args.ranks_per_node)
                except ValueError:
                    continue  # shm needs rows inside nodes
                jobs.append((algo, g))
        rows = []
        for algo, g in jobs:
            res = simulate(machine, algo, model, M=g[0] if g else 1,
                           itemsize=2 if args.fp16 else 4, library=args.library,
                           node_aware=not args.flat, segment_bytes=args.segment_bytes,
                           mode=args.mode)
            rows.append(dict(algorithm=algo, grid=g, **res))
            sys.stdout.write('.')
            sys.stdout.flush()
    except (ValueError, SimulationError) as e:
        sys.stderr.write(f'chainermn-torus simulate: {e}\n')
        return 2
    print('\n' + machine.describe())
    print('{:<16} {:>9} {:>12} {:>8} {:>10} {:>8}'.format(
        'algorithm', 'grid', 'simulated ms', 'x best', 'messages', 'wall s'))
    best = min(r['seconds'] for r in rows)
    for r in sorted(rows, key=lambda r: r['seconds']):
        print('{:<16} {:>9} {:>12.2f} {:>8.2f} {:>10} {:>8.1f}'.format(
            r['algorithm'], '' if r['grid'] is None else '{}x{}'.format(*r['grid']),
            r['seconds'] * 1e3, r['seconds'] / best, r['messages'], r['wall_s']))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'machine': machine._asdict(), 'library': args.library,
                       'model': args.model, 'rows': rows}, f, indent=2, default=str)
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == 'validate':
        return validate.main(argv[1:])
    if argv and argv[0] == 'study':
        return study.main(argv[1:])
    return run(argv)


if __name__ == '__main__':
    sys.exit(main())
