"""Where the compute process and its loader processes run (Hanawa & Tamura's 1HT / 2HT placements).

On a CPU-only node the same cores decode images and compute. Hanawa & Tamura placed a separate
loader process either on the same core as the compute (1HT) or on the other hardware thread
of the same physical core (2HT), and kept 64 of a KNL's 68 cores for compute. Policies:

* ``same-core`` (1HT): compute on one hardware thread of each core of this rank's share; the
  loader processes run on those same CPUs (the OS interleaves them);
* ``sibling`` (2HT): compute on the first hardware thread of each core; loaders on the other
  threads of the same cores (needs SMT);
* ``dedicated``: the last ``dedicated_cores`` cores of the share (default 1) run the loaders,
  the others compute;
* ``none``: nothing is pinned;
* ``auto``: ``sibling`` where the cores have SMT siblings, else ``same-core``.

This rank's share: the CPUs the launcher allowed (its affinity mask) when it bound the rank;
otherwise the node's cores split evenly among the ranks of the node (``intra_size``), in NUMA
order, rank ``intra_rank`` taking its contiguous part.
"""
import os

from chainermn_torus import settings_table
from chainermn_torus.errors import ConfigError
from chainermn_torus.loader.topology import Topology, format_cpulist
from chainermn_torus.runtime.cpu import threads as thread_budget

__all__ = ['POLICIES', 'Plan', 'plan_placement', 'apply_placement', 'describe_plan']

POLICIES = settings_table.KINDS['affinity'].names


class Plan:
    def __init__(self, policy, compute_cpus, loader_cpus, share, topology, reason):
        self.policy = policy
        self.compute_cpus = compute_cpus  # sorted list, or None: do not pin
        self.loader_cpus = loader_cpus
        self.share = share                # this rank's cores (lists of sibling CPUs)
        self.topology = topology
        self.reason = reason

    def as_dict(self):
        return {'policy': self.policy, 'compute_cpus': self.compute_cpus,
                'loader_cpus': self.loader_cpus, 'share': self.share, 'reason': self.reason,
                'topology': self.topology.describe()}


def _allowed():
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:
        return None


def plan_placement(policy='sibling', intra_rank=0, intra_size=1, loader_processes=1,
                   dedicated_cores=None, topology=None, allowed=None):
    """The placement of this rank's compute and loader processes; ValueError if impossible."""
    if policy not in POLICIES:
        raise ConfigError('chainermn_torus: unknown affinity policy {!r}; choose from {}'.format(
            policy, ', '.join(POLICIES)))
    if loader_processes < 1:
        raise ConfigError('chainermn_torus: loader_processes must be >= 1, '
                          f'got {loader_processes!r}')
    topology = topology or Topology.from_sysfs()
    if allowed is None:
        allowed = _allowed()
    allowed = set(topology.cpus) if allowed is None else set(allowed)
    cores = topology.cores(allowed)
    if not cores:
        raise ConfigError(f'chainermn_torus: none of the allowed CPUs {format_cpulist(allowed)} is '
                          f'online ({topology.describe()})')
    share, how = _rank_share(topology, allowed, cores, intra_rank, intra_size)
    if policy == 'none':
        return Plan(policy, None, None, share, topology, 'no pinning; share would be ' + how)
    if policy == 'auto':
        policy = 'sibling' if any(len(core) > 1 for core in share) else 'same-core'
        how += f'; auto chose {policy}'
    compute, loader = _split(policy, share, topology, dedicated_cores)
    if loader_processes > len(loader):
        raise ConfigError(
            f'chainermn_torus: {loader_processes} loader processes but the {policy!r} policy gives '
            f'them {len(loader)} CPU(s) '
            f'({format_cpulist(loader)}): use at most {len(loader)} (or another policy).')
    return Plan(policy, sorted(compute), sorted(loader), share, topology, how)


def _rank_share(topology, allowed, cores, intra_rank, intra_size):
    """(the cores this rank may use, how they were chosen)."""
    if not (allowed >= set(topology.cpus) and intra_size > 1):
        how = f'the {len(allowed)} CPUs the launcher allowed' \
            if not allowed >= set(topology.cpus) else f'the whole node ({intra_size} rank)'
        return cores, how
    # Not bound by the launcher: split the node's cores among its ranks.
    if intra_size <= len(cores):
        per, extra = divmod(len(cores), intra_size)
        start = intra_rank * per + min(intra_rank, extra)
        share = cores[start:start + per + (1 if intra_rank < extra else 0)]
        return share, (f'cores {start}-{start + len(share) - 1} of {len(cores)}, split '
                       f'among {intra_size} ranks on this node')
    shared = intra_rank % len(cores)
    return [cores[shared]], \
        f'oversubscribed: {intra_size} ranks on {len(cores)} cores, this rank shares core {shared}'


def _split(policy, share, topology, dedicated_cores):
    """(compute CPUs, loader CPUs) of ``share`` under ``policy`` (same-core, sibling or
    dedicated); ConfigError where the cores cannot give it."""
    first = [core[0] for core in share]
    share_cpus = sorted(c for core in share for c in core)
    if policy == 'same-core':
        return first, first
    if policy == 'sibling':
        loader = sorted(c for core in share for c in core[1:])
        if not loader:
            raise ConfigError(
                "chainermn_torus: affinity policy 'sibling' cannot be satisfied: this rank's "
                f'{len(share)} core(s) ({format_cpulist(share_cpus)}) have one hardware thread '
                f'each ({topology.describe()}). Use --affinity same-core '
                'or dedicated.')
        return first, loader
    k = 1 if dedicated_cores is None else int(dedicated_cores)  # dedicated
    if k < 1 or len(share) <= k:
        raise ConfigError(
            f"chainermn_torus: affinity policy 'dedicated' needs more cores than the {k} set "
            f'aside for loading, but this rank has {len(share)} core(s) '
            f'({format_cpulist(share_cpus)}; {topology.describe()}). Use --affinity '
            'same-core or sibling, or fewer ranks per node.')
    return [core[0] for core in share[:-k]], sorted(c for core in share[-k:] for c in core)


def apply_placement(plan, threads=None, comm=None):
    """Pin this (compute) process to the plan's compute CPUs and size its BLAS threads to
    them (or to ``threads``); ``comm`` says who prints the budget (see runtime.cpu.threads)."""
    if plan.compute_cpus is None:
        return None
    os.sched_setaffinity(0, plan.compute_cpus)
    return thread_budget.ensure(comm, threads or len(plan.compute_cpus))


def describe_plan(plan, rank=None):
    who = '' if rank is None else f'rank {rank}: '
    if plan.compute_cpus is None:
        return f'{who}affinity none ({plan.reason}); {plan.topology.describe()}'
    return (f'{who}affinity {plan.policy}: compute on CPUs {format_cpulist(plan.compute_cpus)}, '
            f'loader on CPUs {format_cpulist(plan.loader_cpus)} '
            f'({plan.reason}; {plan.topology.describe()})')
