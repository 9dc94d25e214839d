"""``chainermn-torus topology``: this machine's CPU topology and one rank's placement plan."""
import argparse
import json
import sys

from chainermn_torus import command_line
from chainermn_torus.loader import (
    Topology, describe_plan, parse_cpulist, plan_placement)

__all__ = ['main']


def main(argv):
    """Print the machine's CPU topology and the placement plan for one rank."""
    p = argparse.ArgumentParser(prog='chainermn-torus topology', description=main.__doc__)
    command_line.add_option(p, 'affinity', '--policy', dest='policy')
    p.add_argument('--ranks-per-node', type=int, default=1)
    p.add_argument('--rank', type=int, default=0, help='this rank\'s index on its node')
    command_line.add_option(p, 'loader_processes', default=1)
    command_line.add_option(p, 'dedicated_cores')
    p.add_argument('--sysfs', default='/sys', help='root of a sysfs tree (default /sys)')
    p.add_argument('--allowed', default=None, metavar='CPULIST',
                   help="the CPUs the launcher allows this rank, e.g. '0-15' (default: this "
                        "process's affinity with /sys, every CPU of another --sysfs tree)")
    p.add_argument('--json', action='store_true')
    args = command_line.parse_args(p, argv)
    if not 0 <= args.rank < args.ranks_per_node:
        p.error(f'--rank must be in [0, --ranks-per-node), got {args.rank} '
                f'of {args.ranks_per_node}')
    try:
        topo = Topology.from_sysfs(args.sysfs)
    except ValueError as e:
        sys.stderr.write(f'chainermn-torus topology: {e}\n')
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
        sys.stderr.write(f'{e}\n')
        return 2
    if args.json:
        print(json.dumps(plan.as_dict(), indent=1))
    else:
        print(topo.describe())
        print(describe_plan(plan, args.rank))
    return 0
