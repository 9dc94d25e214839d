"""The watchdog's verdict: from every rank's row and process state, who the job waits for,
in one line; or nothing while no rank is past its limit. A pure function (no I/O, no clock):
the node watcher (``node_watch``) gives it this node's rows read from the board, the other
nodes' rows heard in their heartbeats, the limits and the time;
``tests/runtime/watch/test_node_watch.py`` checks it as a table of cases.

Who is named, once a rank of this node is past its phase's limit (start-up, to the end of
the first step: the start-up limit; a training step or an evaluation batch: the limit;
between steps and in a checkpoint: ``outside`` x the limit; after training: a wait in a
call that long), or its process has been stopped or gone for the limit:

* a node whose watcher fell silent: every process there stopped, or the node was lost;
* else a rank whose process is stopped (state T), a zombie or gone;
* else the ranks in no communication call while others wait in one (computing, or blocked
  in I/O, a lock, a sleep), furthest behind first;
* else, every rank in a call: one whose position or call count is behind the others' (the
  ranks' calls do not match);
* if none of these, every rank waits in the same call (a deadlock, or a message MPI lost),
  or none waits at all (the limit is shorter than the work).

Every rank stopped is a suspension of the whole job (``scontrol suspend``): no verdict.
"""
import collections

from chainermn_torus import settings_table
from chainermn_torus.runtime.watch import progress_board as pb
from chainermn_torus.watchers import board_layout

__all__ = ['Seen', 'BROKEN', 'SAID', 'summary', 'judge']

STARTUP_ENV = settings_table.SETTINGS['watchdog_startup'].env
# Stopped, a zombie, gone, or waiting for a stopped process it started (L: a loader
# process): never progress, whatever the phase.
BROKEN = 'TZXL'
SAID = {
    'T': 'stopped (process state T: SIGSTOP, a debugger, or a suspension of part of the job)',
    'L': 'waiting for a process it started (a loader process?), which is stopped (process '
         'state T: SIGSTOP, a debugger, or a suspension)',
    'Z': 'a zombie (its process exited without ending the job; not yet reaped)',
    'X': 'gone (its process no longer exists, and the job did not end)',
    'D': 'outside communication, in uninterruptible I/O (process state D: a file system or '
         'device that does not answer)',
    'S': 'outside communication, blocked (sleeping: I/O, a lock, a sleep)',
    'R': 'computing outside communication',
}

# One rank as the watchers see it (this node's from its board, the others' from heartbeats):
# position, phase, seconds since progress, process state, whether its main thread is in a
# communication call, which (a code of progress_board.CALLS), seconds since it entered or
# left it, the calls made since the phase's start, the same for the communication thread,
# and seconds the process has been seen stopped.
Seen = collections.namedtuple('Seen', 'rank pos phase age state inside call call_age calls '
                                      'bg_inside bg_call held')


def summary(rows, now, states=None, held=None):
    """This node's rows as ``Seen`` lists (JSON for the heartbeats). ``states``: pid ->
    process state; ``held``: pid -> seconds seen stopped."""
    states, held = states or {}, held or {}
    out = []
    for row in rows:
        pid = int(row[board_layout.PID])
        if pid == 0:
            continue
        progress = int(row[board_layout.PROGRESS_NS])
        call_ns = int(row[board_layout.CALL_NS])
        out.append(list(Seen(
            int(row[board_layout.RANK]), list(pb.position(row)), int(row[board_layout.PHASE]),
            (now - progress) / 1e9 if progress else None, states.get(pid, '?'),
            int(row[board_layout.INSIDE]), int(row[board_layout.CALL]),
            (now - call_ns) / 1e9 if call_ns else None,
            int(row[board_layout.CALLS_MADE]), int(row[board_layout.BG_INSIDE]),
            int(row[board_layout.BG_CALL]),
            held.get(pid, 0.0))))
    return out


def _seen(rows):
    return [Seen(*r) for r in rows]


def _where(phase, pos):
    finished, _, count = pos
    return board_layout.where(phase, finished, count)


def _first_step(seen):
    return seen.pos[0] <= 0


def _trigger(limits, seen):
    """(seconds, limit, why) when ``seen`` (a rank of this node) is past its limit, else
    None."""
    if seen.phase == board_layout.FINISHED:
        return None
    if seen.state in BROKEN and seen.held > limits.limit_s:
        return seen.held, limits.limit_s, 'stopped'
    limit = limits.limit(seen.phase, first_step=_first_step(seen))
    if limit is None:
        return None
    if board_layout.PHASE_OF[seen.phase].in_call_only:  # e.g. after training: only a wait in a call
        if seen.inside and seen.call_age is not None and seen.call_age > limit:
            return seen.call_age, limit, 'after'
        return None
    if seen.age is not None and seen.age > limit:
        return seen.age, limit, 'phase'
    return None


def _limit_text(limits, phase, seen, why):
    if why == 'stopped':
        return (f'a stopped or vanished process is a stall after the step limit, '
                f'{limits.limit_s:g} s, set by {limits.limit_from}')
    kind = board_layout.PHASE_OF[phase].limit_kind(_first_step(seen))
    if kind == 'startup':
        if limits.startup_from == board_layout.STARTUP_SOURCES[2]:
            return (f'start-up limit {limits.startup_s:g} s, {limits.startup_from} (set it '
                    f'with {STARTUP_ENV})')
        return (f'start-up limit {limits.startup_s:g} s, set by {limits.startup_from} '
                '(default: the larger of 900 s and the step limit)')
    if kind == 'step':
        return (f'limit {limits.limit_s:g} s per step or evaluation batch, set '
                f'by {limits.limit_from}')
    return (f'limit {limits.limit_s * limits.outside:g} s between steps, in checkpoints and after '
            f'training ({limits.outside} x {limits.limit_from})')


def _doing(seen):
    """What a rank is doing, in words: its state, and the call it is in or was last in."""
    if seen.state in BROKEN:
        text = SAID[seen.state]
        if seen.state in 'TL' and seen.held:
            text += f' for {seen.held:.0f} s'
    elif seen.inside:
        text = f'waiting in {pb.call_name(seen.call)}'
    else:
        text = SAID.get(seen.state, 'outside communication')
        if seen.call and seen.call_age is not None:
            text += f' for {seen.call_age:.0f} s since its last call ({pb.call_name(seen.call)})'
    if seen.state in BROKEN and seen.inside:
        text += f', inside {pb.call_name(seen.call)}'
    if seen.bg_inside and not seen.inside:
        text += f' (its communication thread in {pb.call_name(seen.bg_call)})'
    return text


def _name(entries):
    head = '; '.join('rank {} on {}, {}, {}'.format(s.rank, h, _doing(s), _where(s.phase,
                                                                                tuple(s.pos)))
                     for s, h in entries[:8])
    if len(entries) > 8:
        head += f'; and {len(entries) - 8} more rank(s) alike'
    return head


def _waiters(entries):
    """"ranks 0, 2 (vm) wait in multi_node_mean_grad" for up to 4 calls."""
    calls = collections.OrderedDict()
    for s, h in entries:
        calls.setdefault(pb.call_name(s.call), []).append((s, h))
    parts = []
    for call, who in list(calls.items())[:4]:
        hosts = sorted({h for _, h in who})
        ranks = _ranks([[s.rank] for s, _ in who])
        longest = max((s.call_age or 0.0) for s, _ in who)
        parts.append('{} {} ({}) wait{} in {} ({:.0f} s)'.format(
            'rank' if len(who) == 1 else 'ranks', ranks, ', '.join(hosts[:4]),
            's' if len(who) == 1 else '', call, longest))
    return '; '.join(parts)


def judge(limits, host, local, peers, now, silent_s):
    """The verdict line, or None while nothing is stalled.

    ``limits``: ``board_layout.Limits``; ``local``: this node's summary rows;
    ``peers``: {node: {'host', 'heard' (ns), 'rows', 'gone'}} for the nodes this one
    watches."""
    local = _seen(local)
    stalled = [(s, t) for s, t in ((s, _trigger(limits, s)) for s in local) if t]
    # Only a node heard from before can fall silent: one never heard is not reachable by
    # UDP from here (a firewall), which says nothing about its ranks (node_watch says so).
    silent = sorted(((n, p) for n, p in peers.items()
                     if not p['gone'] and p.get('seen', True)
                     and (now - p['heard']) / 1e9 > silent_s),
                    key=lambda item: item[0])
    running = any(s.phase != board_layout.FINISHED for s in local)
    # A node silent for the limit is a verdict by itself, whatever this node's ranks do:
    # they may be in a checkpoint, with its longer limit, waiting for that node.
    lost = running and any((now - p['heard']) / 1e9 > limits.limit_s for _, p in silent)
    if not stalled and not lost:
        return None
    everyone = [(s, host) for s in local]
    for p in peers.values():
        everyone += [(s, p['host']) for s in _seen(p['rows'])]
    active = [(s, h) for s, h in everyone if s.phase != board_layout.FINISHED]
    if not silent and active and all(s.state == 'T' for s, _ in active):
        return None  # every rank stopped: the job is suspended (scontrol suspend), not stuck
    if stalled:
        observer, (seconds, limit, why) = max(stalled, key=lambda st: st[1][0])
        rule = _limit_text(limits, observer.phase, observer, why)
    else:
        observer, why = None, 'silent'
        rule = (f'heartbeats missed for longer than the limit of {limits.limit_s:g} s, set '
                f'by {limits.limit_from}')
    if silent:
        cause = '; '.join(
            'node {} (ranks {}) silent for {:.0f} s: every process there stopped, or the node '
            'was lost'.format(p['host'], _ranks(p['rows']) or '?', (now - p['heard']) / 1e9)
            for _, p in silent[:8])
        if len(silent) > 8:
            cause += f'; and {len(silent) - 8} more node(s)'
        return _line(cause, rule, observer, host, None)
    culprits = _culprits(active, limits)
    if culprits is None:
        return _line(_no_culprit(active), rule, observer, host, None)
    waiting = [(s, h) for s, h in active if s.inside and (s, h) not in culprits]
    cause = _name(culprits)
    if waiting:
        cause += '; ' + _waiters(waiting) + ' for it'
    return _line(cause, rule, observer, host, culprits)


def _culprits(active, limits):
    """The ranks the others wait for, or None when no rank holds the others up."""
    broken = [e for e in active if e[0].state in BROKEN]
    if broken:
        return sorted(broken, key=lambda e: e[0].rank)
    outside = [e for e in active if not e[0].inside]
    waiting = [e for e in active if e[0].inside]
    if outside and waiting:  # the ranks in no call, furthest behind first
        return sorted(outside, key=lambda e: (tuple(e[0].pos), e[0].rank))
    if waiting:  # every rank in a call: one behind the others is in the wrong one
        low = min((tuple(s.pos), s.calls) for s, _ in waiting)
        behind = [e for e in waiting if (tuple(e[0].pos), e[0].calls) == low]
        if len(behind) < len(waiting):
            return sorted(behind, key=lambda e: e[0].rank)
        return None
    # No rank in a call: the ones past their own limit are stuck in their work, unless
    # every rank is (then no rank holds the others up).
    late = [e for e in active if _trigger(limits, e[0])]
    if late and len(late) < len(active):
        return sorted(late, key=lambda e: (tuple(e[0].pos), e[0].rank))
    return None


def _no_culprit(active):
    """When no rank holds the others up: every rank in the same call, or none in any."""
    s = active[0][0]
    if all(x.inside for x, _ in active):
        calls = sorted({pb.call_name(x.call) for x, _ in active})
        return ('none: every rank waits in {} {}, none behind another (a deadlock, or a '
                'message MPI lost)'.format(' / '.join(calls), _where(s.phase, tuple(s.pos))))
    return ('none: no rank waits for another; every rank has been outside communication '
            f'{_where(s.phase, tuple(s.pos))}, past the limit (the limit is shorter than this '
            'work, or every rank is stuck '
            'in it)')


def _line(cause, rule, observer, host, culprits):
    seen = ''
    if observer is not None and (culprits is None or
                                 all(observer.rank != s.rank for s, _ in culprits)):
        seen = '; noticed on {}: rank {} {} for {:.0f} s'.format(
            host, observer.rank, 'waited in ' + pb.call_name(observer.call)
            if observer.inside else 'made no progress', observer.call_age
            if observer.inside and observer.call_age is not None else (observer.age or 0.0))
    return (f'chainermn_torus watchdog: the job waits for {cause} ({rule}{seen}). Ending the job '
            'instead of '
            'waiting for the batch time limit.')


def _ranks(rows):
    ranks = sorted(r[0] for r in rows)
    if not ranks:
        return ''
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f'{ranks[0]}-{ranks[-1]}'
    return ', '.join(map(str, ranks))
