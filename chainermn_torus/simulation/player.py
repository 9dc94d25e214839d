"""Play schedules on a SimGrid platform: one actor per MPI rank.

Each rank's actor walks the schedule's rounds that concern it: it posts its sends and its
receives of the round (per-pair mailboxes, so messages between two ranks match in order, as
MPI's do), waits for all of them, then does the round's local work (sums, copies) on its
node's cores, or on the shared cores of an emulated cluster. A rank starts a round as soon
as its own previous round is done: nothing forces ranks into lock-step but the messages,
as in MPI. A round repeated k times is played once; the rank then waits k - 1 times what
the round took it (rings and pairwise exchanges of thousands of ranks stay playable).

Several *experiments* (segment sizes) run in one simulation, separated by a barrier; the
time of each is the simulated clock between the barriers. SimGrid allows one engine per
process, so ``simulate`` runs each simulation in a child process (``python -m
chainermn_torus.simulation.player`` with the request as JSON on stdin): the caller needs no
SimGrid, and a crash or a time limit stays in the child.

Network model: SimGrid's CM02 flow model (max-min sharing of every link on a flow's route,
no latency or bandwidth correction factors, no TCP window bound), so that the calibrated
latencies and rates are used as measured.
"""
import importlib
import json
import os
import sys
import tempfile
import time

from chainermn_torus.algorithms import schedule
from chainermn_torus.simulation import platforms, schedules

__all__ = ['run_request', 'main']


class _Built:
    """A request made concrete: the machine, the rounds of each experiment and their costs."""

    def __init__(self, request):
        self.machine = m = platforms.Machine(**request['machine'])
        self.setup = setup = schedule.Setup(request['algorithm'], m.nodes * m.ranks_per_node,
                                            request.get('M', 1), request.get('itemsize', 4),
                                            request.get('exact', False))
        setup.variant.algorithm.check_placement(setup.M, m.ranks_per_node)
        self.node_of = node_of = platforms.node_of_ranks(m)
        slot_of = [r // m.ranks_per_node for r in range(setup.P)]
        library = request.get('library', 'halving')
        expand = schedules.expand
        if request.get('node_aware', True):
            expand = schedules.node_aware(slot_of)
        self.work_cost = {'reduce': m.reduce_s_per_B, 'copy': m.copy_s_per_B}
        # One-sided synchronisation waits (no CPU), where the rank's grid row spans nodes.
        M = setup.M
        self.spans = [len({node_of[q] for q in range(r - r % M, r - r % M + M)}) > 1
                      for r in range(setup.P)]
        self.sync_cost = {'fence': m.fence_s, 'flush': m.flush_s}
        self.experiments = []
        for elems in request['sizes']:
            self.experiments.append(schedules.rounds_of_calls(
                schedule.segment_calls(setup, int(elems)), library, expand))
        # The last experiment: what a call does once, besides its segments.
        self.experiments.append(schedules.rounds_of_calls(
            schedule.begin_calls(setup, request.get('arrays', 0)) + schedule.end_calls(setup),
            library, expand))

    def message_bytes(self, rnd, src, dst, nbytes):
        if rnd.phase == 'put' and self.node_of[src] != self.node_of[dst]:
            return nbytes * self.machine.put_factor  # one-sided transfers between nodes
        return nbytes

    def local(self, rank, kind, nbytes):
        """(cpu seconds, wait seconds) of one local work item."""
        if kind in self.sync_cost:
            return 0.0, (self.sync_cost[kind] if self.spans[rank] else 0.0)
        return nbytes * self.work_cost[kind], 0.0

    def programs(self, rounds):
        """Per rank: (sends, receives, cpu seconds, wait seconds, repeat) steps."""
        progs = [[] for _ in range(self.setup.P)]
        for rnd in rounds:
            steps = {}
            for src, dst, nbytes in rnd.messages:
                steps.setdefault(src, [[], [], 0.0, 0.0])[0].append(
                    (dst, self.message_bytes(rnd, src, dst, nbytes)))
                steps.setdefault(dst, [[], [], 0.0, 0.0])[1].append(src)
            for rank, kind, nbytes in rnd.compute:
                step = steps.setdefault(rank, [[], [], 0.0, 0.0])
                cpu, wait = self.local(rank, kind, nbytes)
                step[2] += cpu
                step[3] += wait
            for rank, (snd, rcv, cpu, wait) in steps.items():
                if self.talks_off_node(rank, snd, rcv):
                    wait += self.machine.overhead_s
                progs[rank].append((snd, rcv, cpu, wait, rnd.repeat))
        return progs

    def talks_off_node(self, rank, sends, recvs):
        home = self.node_of[rank]
        return any(self.node_of[d] != home for d, _ in sends) or any(
            self.node_of[s] != home for s in recvs)

    def round_local(self, rnd):
        """Lock-step: the seconds of a round's local work, the busiest node's (its ranks
        share its cores; on an emulated cluster all ranks share the machine's cores)."""
        m = self.machine
        cpu_by, waits = {}, [0.0]
        for rank, kind, nbytes in rnd.compute:
            cpu, wait = self.local(rank, kind, nbytes)
            key = 'all' if m.shared_cores else self.node_of[rank]
            cpu_by.setdefault(key, []).append(cpu)
            waits.append(wait)
        cores = m.shared_cores or m.cores
        cpu = max([max(sum(v) / min(cores, len(v)), max(v)) for v in cpu_by.values()] or [0.0])
        off = m.overhead_s if any(self.node_of[s] != self.node_of[d]
                                  for s, d, _ in rnd.messages) else 0.0
        return cpu + max(waits) + off


def _engine(m):
    import simgrid as sg
    with tempfile.NamedTemporaryFile('w', suffix='.xml', delete=False) as f:
        f.write(platforms.platform_xml(m))
        xml = f.name
    # Cross-traffic (a flow also takes 5% of the reverse path, TCP's acknowledgements):
    # on for the emulated cluster's TCP links, off for the RDMA fabrics.
    e = sg.Engine(['chainermn-torus-simulate', '--cfg=network/model:CM02',
                   '--cfg=network/TCP-gamma:0', '--cfg=contexts/factory:thread',
                   '--cfg=network/crosstraffic:{}'.format(int(m.kind == 'emulated')),
                   '--log=root.thres:critical'])
    e.load_platform(xml)
    os.unlink(xml)
    hosts = [e.host_by_name(f'node{i}') for i in range(m.nodes)]
    cpu = e.host_by_name('cpu') if m.shared_cores else None
    return sg, e, hosts, cpu


def _play_actors(built):
    """One actor per rank (see the module docstring); returns seconds per experiment."""
    m, P = built.machine, built.setup.P
    sg, e, hosts, cpu = _engine(m)
    experiments = [built.programs(rounds) for rounds in built.experiments]
    barrier = sg.Barrier(P)
    marks, boxes = [], {}

    def box(s, d):
        b = boxes.get((s, d))
        if b is None:
            b = boxes[(s, d)] = sg.Mailbox.by_name(f'{s}>{d}')
        return b

    def rank(r):
        home = hosts[built.node_of[r]]
        for progs in experiments:
            barrier.wait()
            if r == 0:
                marks.append(e.clock)
            for sends, recvs, work, wait, repeat in progs[r]:
                start = e.clock
                out = [box(r, d).put_async(None, int(round(n))) for d, n in sends]
                # (comm, payload holder): the holder must live until the comm is done.
                ins = [box(s, r).get_async() for s in recvs]
                for comm, _ in ins:
                    comm.wait()
                for c in out:
                    c.wait()
                if work:
                    if cpu is not None:
                        sg.this_actor.set_host(cpu)
                        sg.this_actor.execute(work * 1e9)
                        sg.this_actor.set_host(home)
                    else:
                        sg.this_actor.execute(work * 1e9)
                if wait:
                    sg.this_actor.sleep_for(wait)
                if repeat > 1:
                    sg.this_actor.sleep_for((repeat - 1) * (e.clock - start))
        barrier.wait()
        if r == 0:
            marks.append(e.clock)

    for r in range(P):
        sg.Actor.create(f'rank{r}', hosts[built.node_of[r]], rank, r)
    e.run()
    return [b - a for a, b in zip(marks, marks[1:])]


def _play_lockstep(built):
    """Every round starts when the whole previous round is done: one actor starts all of
    a round's messages as host-to-host transfers and waits for them all, then adds the
    round's local work. Thousands of times faster per message than an actor per rank
    (no context switches), and the same where every rank runs the same pattern."""
    sg, e, hosts, _ = _engine(built.machine)
    node_of = built.node_of
    out = []

    def driver():
        for rounds in built.experiments:
            start = e.clock
            for rnd in rounds:
                t0 = e.clock
                # At least one byte: SimGrid 3.32 completed a batch of empty host-to-host
                # transfers one after another (1 ms for 256 where 1-byte ones took 8 us).
                comms = [sg.Comm.sendto_async(hosts[node_of[s]], hosts[node_of[d]], max(1, int(
                    round(built.message_bytes(rnd, s, d, n))))) for s, d, n in rnd.messages]
                if comms:
                    sg.Comm.wait_all(comms)
                local = built.round_local(rnd)
                if local:
                    sg.this_actor.sleep_for(local)
                if rnd.repeat > 1:
                    sg.this_actor.sleep_for((rnd.repeat - 1) * (e.clock - t0))
            out.append(e.clock - start)

    sg.Actor.create('driver', hosts[0], driver)
    e.run()
    return out


MODES = ('actors', 'lockstep')


def run_request(request):
    t0 = time.time()
    built = _Built(request)
    build_s = time.time() - t0
    mode = request.get('mode', 'actors')
    if mode not in MODES:
        raise ValueError('chainermn_torus: simulation mode must be one of {}, got {!r}'.format(
            ', '.join(MODES), mode))
    times = (_play_actors if mode == 'actors' else _play_lockstep)(built)
    nmsg = sum(len(r.messages) for rounds in built.experiments for r in rounds)
    return {'seconds': dict(zip([str(x) for x in request['sizes']], times[:-1])),
            'per_call': times[-1],
            'messages': nmsg, 'wall_s': time.time() - t0, 'build_s': build_s, 'mode': mode}


def main():
    request = json.load(sys.stdin)
    path = request.get('simgrid_path')  # chosen by simulate.simgrid_env, handed down
    if path:
        sys.path.append(path)  # after the venv's packages (see simgrid_env)
    for module in request.get('modules', ()):  # a plugin's variants register on import
        importlib.import_module(module)
    try:
        result = run_request(request)
    except ValueError as e:
        json.dump({'error': str(e)}, sys.stdout)
        return 2
    json.dump(result, sys.stdout)
    return 0


if __name__ == '__main__':
    sys.exit(main())
