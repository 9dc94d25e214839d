"""The `chainermn-torus` command.

    chainermn-torus bench allreduce [options]         (under mpiexec)
    chainermn-torus bench update [options]            (one process)
    chainermn-torus bench mnist [options]             (under mpiexec)
    chainermn-torus bench double-buffering [options]  (under mpiexec)
    chainermn-torus bench overlap [options]           (under mpiexec: real training, every
                                                       way of averaging, one job)
    chainermn-torus bench overlap-report DIR          (tables and plots of those runs)
    chainermn-torus run [--communicator NAME] [--grid MxN] script.py ARGS
    chainermn-torus topology [--policy P] [--ranks-per-node R] [--rank r]
                             [--loader-processes N] [--dedicated-cores K] [--sysfs ROOT]
    chainermn-torus plan --nodes N --ranks-per-node R [--model resnet50|mlp|PATH|BYTES]
                         [--network ofp|k|FILE | --alpha A --beta B] [--grid MxN ...]
    chainermn-torus calibrate [--output FILE]           (under mpiexec, 2+ nodes)
    chainermn-torus simulate --platform fattree|torus|emulated|star --nodes N [...]
    chainermn-torus simulate validate DIR | study [...]   (SimGrid: docs/simulation.md)
    chainermn-torus timeline merge|plot ...
    chainermn-torus jobscript --system ofp|k|slurm|pbs|local --nodes N [--ranks-per-node R]
                              [--hours H] [--communicator C] [--dry-run] -- python script.py ...
    chainermn-torus config                              (the environment variables)
    chainermn-torus clean [--dry-run] [--others] [--checkpoint-dir DIR]
                          (what dead jobs left in /dev/shm and checkpoint directories)
    chainermn-torus names                               (communicator names)
    chainermn-torus variants                            (algorithm variants: planner, bench)
"""
import sys

USAGE = __doc__
BENCHMARKS = {'allreduce': 'allreduce', 'update': 'optimizer_update', 'mnist': 'mnist_iteration',
              'double-buffering': 'double_buffering', 'overlap': 'overlap_training',
              'overlap-report': 'overlap_report'}
COMMANDS = ('bench', 'run', 'topology', 'plan', 'calibrate', 'simulate', 'timeline',
            'jobscript', 'config', 'names', 'variants', 'clean')


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ('-h', '--help'):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == 'bench':
        return bench(rest)
    if cmd == 'run':
        from chainermn_torus import run
        return run.main(rest)
    if cmd == 'topology':
        return topology(rest)
    if cmd == 'plan':
        return plan(rest)
    if cmd == 'calibrate':
        from chainermn_torus.tools import calibrate
        return calibrate.main(rest)
    if cmd == 'simulate':
        from chainermn_torus.tools import simulate
        return simulate.main(rest)
    if cmd == 'jobscript':
        from chainermn_torus.tools import jobscript
        return jobscript.main(rest)
    if cmd == 'timeline':
        from chainermn_torus.tools import timeline
        return timeline.main(rest)
    if cmd == 'config':
        from chainermn_torus import config
        print(config.table())
        return 0
    if cmd == 'names':
        from chainermn_torus import valid_names
        print('\n'.join(valid_names()))
        return 0
    if cmd == 'clean':
        return clean(rest)
    if cmd == 'variants':
        print(variants_table())
        return 0
    sys.stderr.write('chainermn-torus: unknown command {!r}; commands: {} (chainermn-torus '
                     '--help for their options)\n'.format(cmd, ', '.join(COMMANDS)))
    return 2


def clean(argv):
    """Remove what dead jobs left on this node: never a live job's files."""
    import argparse
    from chainermn_torus.runtime import devshm
    p = argparse.ArgumentParser(prog='chainermn-torus clean', description=clean.__doc__)
    p.add_argument('--dry-run', action='store_true', help='list, remove nothing')
    p.add_argument('--others', action='store_true',
                   help="also MPICH's (mpich_shm_*) and multiprocessing's (sem.mp-*) files "
                        'that no process on this node maps or holds and that are older than '
                        '{:g} s'.format(devshm.MIN_AGE_S))
    p.add_argument('--shm-dir', default=devshm.SHM_DIR, help='default %(default)s')
    p.add_argument('--checkpoint-dir', action='append', default=[], metavar='DIR',
                   help="also a checkpoint directory's unfinished temporary files "
                        '(repeatable)')
    args = p.parse_args(argv)
    removed = devshm.sweep(args.shm_dir, others=args.others, dry_run=args.dry_run)
    if args.checkpoint_dir:
        from chainermn_torus.extensions import checkpoint
        for d in args.checkpoint_dir:
            removed += checkpoint.sweep_temporary(d, dry_run=args.dry_run)
    verb = 'would remove' if args.dry_run else 'removed'
    for name, size, why in removed:
        print('{} {} ({}; {})'.format(verb, name, devshm.format_bytes(size), why))
    print('{} {} file(s), {}'.format(verb, len(removed),
                                     devshm.format_bytes(sum(r[1] for r in removed))))
    return 0


def variants_table():
    from chainermn_torus.algorithms.variants import VARIANTS
    lines = ['{:<26} {:<38} {:<21} {:<8} {:<14} {}'.format(
        'variant', 'communicator(options)', 'model (algorithms)', 'bench', 'tested on P',
        'what')]
    for v in VARIANTS.values():
        model = '-' if v.algorithm is None else type(v.algorithm).__name__ + (
            ', planned' if v.plan else '')
        lines.append('{:<26} {:<38} {:<21} {:<8} {:<14} {}'.format(
            v.name, v.describe(), model, v.bench or '-',
            ','.join(map(str, v.test_ranks)) or '-', v.note))
    return '\n'.join(lines)


def bench(argv):
    if not argv or argv[0] in ('-h', '--help'):
        print('chainermn-torus bench NAME [options]; NAME is one of {}; '
              'chainermn-torus bench NAME --help for its options'.format(', '.join(BENCHMARKS)))
        return 0 if argv else 2
    if argv[0] not in BENCHMARKS:
        sys.stderr.write('chainermn-torus bench: unknown benchmark {!r}; choose from {}\n'.format(
            argv[0], ', '.join(BENCHMARKS)))
        return 2
    import importlib
    module = importlib.import_module('chainermn_torus.bench.' + BENCHMARKS[argv[0]])
    return module.main(argv[1:])


def plan(argv):
    """Predict pure all-reduce, rsaa, rsap and shm for every grid shape; recommend one."""
    import argparse
    import json
    from chainermn_torus.planning import planner
    p = argparse.ArgumentParser(prog='chainermn-torus plan', description=plan.__doc__)
    p.add_argument('--nodes', type=int, required=True)
    p.add_argument('--ranks-per-node', type=int, default=1)
    p.add_argument('--model', default='resnet50',
                   help='resnet50, mlp, an .npz snapshot or a byte count')
    p.add_argument('--network', default=None,
                   help='preset ({}) or a file from `calibrate` (default: $CHAINERMN_TORUS_'
                        'NETWORK or {})'.format(', '.join(sorted(planner.PRESETS)),
                                                planner.DEFAULT_NETWORK_FILE))
    p.add_argument('--alpha', type=float, default=None, help='latency, seconds (with --beta)')
    p.add_argument('--beta', type=float, default=None, help='bandwidth, bytes per second')
    p.add_argument('--grid', nargs='*', default=None, metavar='MxN', help='only these shapes')
    p.add_argument('--top', type=int, default=None)
    p.add_argument('--simulate', choices=('auto', 'on', 'off'), default=None,
                   help='rank the best candidates with the SimGrid simulator: auto (where '
                        'installed; default, or $CHAINERMN_TORUS_SIMULATE), on, off')
    p.add_argument('--topology', choices=('fattree', 'torus', 'star'), default=None,
                   help='simulated platform (default: fattree for ofp, torus for k, star '
                        'for a calibrated file)')
    p.add_argument('--json', default=None)
    args = p.parse_args(argv)
    try:
        if (args.alpha is None) != (args.beta is None):
            raise ValueError('give --alpha and --beta together (latency in s, bandwidth in '
                             'bytes/s)')
        grids = None
        if args.grid:
            from chainermn_torus.communicators._grid import parse_grid
            P = args.nodes * args.ranks_per_node
            grids = [parse_grid(g, P, source='--grid') for g in args.grid]
        if args.alpha is not None:
            if not (args.alpha >= 0 and args.beta > 0):
                raise ValueError('--alpha must be >= 0 and --beta > 0, got {} and {}'.format(
                    args.alpha, args.beta))
            net = planner.Network('alpha-beta', args.alpha, 1.0 / args.beta, args.alpha / 2,
                                  1.0 / (4 * args.beta), 0.0, 0.0, source='--alpha/--beta')
        else:
            net = planner.load_network(args.network)
        nbytes = planner.model_bytes(args.model)
        rows = planner.plan(args.nodes, args.ranks_per_node, nbytes, net, grids)
        from chainermn_torus import config
        from chainermn_torus.simulation import simulate
        mode = config.value('simulate', args.simulate, '--simulate')[0]  # auto, True, False
        if mode is True and not simulate.available():
            raise ValueError('--simulate on: ' + simulate.why_unavailable())
        if mode is True or (mode == 'auto' and simulate.available()):
            from chainermn_torus.simulation import plan as simplan
            rows = simplan.rank_rows(rows, args.nodes, args.ranks_per_node,
                                     simplan.model_or_bytes(args.model), net,
                                     topology=args.topology)
            print('simulated (SimGrid) the planner\'s best {}; the other rows are the '
                  'alpha-beta model\'s'.format(simplan.TOP))
    except (ValueError, RuntimeError) as e:
        sys.stderr.write('chainermn-torus plan: {}\n'.format(e))
        return 2
    print(planner.format_plan(rows, args.nodes, args.ranks_per_node, nbytes, net, args.top))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'nodes': args.nodes, 'ranks_per_node': args.ranks_per_node,
                       'bytes': nbytes, 'network': net.to_dict(), 'rows': rows}, f, indent=2)
    return 0


def topology(argv):
    """Print the machine's CPU topology and the placement plan for one rank."""
    import argparse
    import json
    from chainermn_torus.loader import POLICIES, Topology, describe_plan, plan_placement
    p = argparse.ArgumentParser(prog='chainermn-torus topology', description=topology.__doc__)
    p.add_argument('--policy', default='auto', choices=POLICIES)
    p.add_argument('--ranks-per-node', type=int, default=1)
    p.add_argument('--rank', type=int, default=0, help='this rank\'s index on its node')
    p.add_argument('--loader-processes', type=int, default=1)
    p.add_argument('--dedicated-cores', type=int, default=None)
    p.add_argument('--sysfs', default='/sys', help='root of a sysfs tree (default /sys)')
    p.add_argument('--allowed', default=None, metavar='CPULIST',
                   help="the CPUs the launcher allows this rank, e.g. '0-15' (default: this "
                        "process's affinity with /sys, every CPU of another --sysfs tree)")
    p.add_argument('--json', action='store_true')
    args = p.parse_args(argv)
    if not 0 <= args.rank < args.ranks_per_node:
        p.error('--rank must be in [0, --ranks-per-node), got {} of {}'.format(
            args.rank, args.ranks_per_node))
    from chainermn_torus.loader import parse_cpulist
    try:
        topo = Topology.from_sysfs(args.sysfs)
    except ValueError as e:
        sys.stderr.write('chainermn-torus topology: {}\n'.format(e))
        return 2
    if args.allowed is not None:
        allowed = parse_cpulist(args.allowed)
    else:
        allowed = None if args.sysfs == '/sys' else sorted(topo.cpus)
    try:
        plan = plan_placement(args.policy, args.rank, args.ranks_per_node,
                              args.loader_processes, args.dedicated_cores, topology=topo,
                              allowed=allowed)
    except ValueError as e:
        sys.stderr.write('{}\n'.format(e))
        return 2
    if args.json:
        print(json.dumps(plan.as_dict(), indent=1))
    else:
        print(topo.describe())
        print(describe_plan(plan, args.rank))
    return 0


if __name__ == '__main__':
    sys.exit(main())
