"""``chainermn-torus timeline merge|plot``: the ranks' timeline files as one Chrome trace, or
a Gantt chart of a few iterations (the recorder is ``chainermn_torus.runtime.timeline``)."""
import argparse
import glob
import json
import os
import sys
import time

from chainermn_torus import command_line
from chainermn_torus.runtime.timeline import STREAM_S, TIMELINE_ENV, trace_events
from chainermn_torus.tools import result_paths

__all__ = ['rank_files', 'merge', 'plot', 'main']


def _rank_of(path):
    return int(path.rsplit('.rank', 1)[1].split('.')[0])


def rank_files(prefix):
    """{rank: path}: each rank's complete .json, else the log it streamed (.events)."""
    found = {}
    for pattern in ('.rank*.events', '.rank*.json'):  # a .json replaces its log
        for path in glob.glob(glob.escape(prefix) + pattern):
            try:
                found[_rank_of(path)] = path
            except ValueError:
                continue
    if not found:
        unfinished = glob.glob(glob.escape(prefix) + '.rank*.json.tmp')
        if unfinished:
            raise ValueError(f'chainermn_torus: no timeline files {prefix}.rank*.json, '
                             f'only {len(unfinished)} '
                             f'unfinished one(s) ({sorted(unfinished)[0]}): the job was killed '
                             'while writing them '
                             '(kill -9 or a node failure; SIGTERM and aborts write them '
                             'whole)')
        raise ValueError(f'chainermn_torus: no timeline files {prefix}.rank*.json; was the run '
                         f'started with {TIMELINE_ENV}={prefix}?')
    return dict(sorted(found.items()))


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)['traceEvents']
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f'chainermn_torus: {path} is not a timeline file written by '
                         f'chainermn-torus ({type(e).__name__}: {e}); remove it or write it '
                         'again') from None


def _load_log(path):
    """(events, header, note) from a streamed log; a last line cut by the kill is dropped."""
    with open(path, errors='replace') as f:  # a garbled line is dropped below, not fatal
        lines = f.read().split('\n')
    try:
        header = json.loads(lines[0])
        header['rank']
    except (ValueError, KeyError, TypeError, IndexError):
        raise ValueError(f'chainermn_torus: {path} is not a timeline log written by '
                         'chainermn-torus '
                         '(its first line is no header); remove it') from None
    rank = header['rank']
    spans, dropped = [], 0
    for line in lines[1:]:
        if not line.strip():
            continue
        try:
            name, ts, dur, tid, it = json.loads(line)
        except (ValueError, TypeError):
            dropped += 1
            continue
        spans.append((name, ts, dur, tid, it))
    last = (spans[-1][1] + spans[-1][2], spans[-1][4]) if spans else None
    events = trace_events(rank, header.get('host', '?'), [s[3] for s in spans], spans)
    if last is None:
        note = 'rank {} ({}): cut short, no event recorded before the process ended ' \
               '(only its log {})'.format(rank, header.get('host', '?'), path)
    else:
        note = 'rank {} ({}): cut short at iteration {}, {} (only its log {}: the process ' \
               'ended without writing its timeline, as MPI_Abort\'s peers and kill -9 do; ' \
               'up to the last {:g} s are missing{})'.format(
                   rank, header.get('host', '?'), last[1],
                   time.strftime('%H:%M:%S', time.localtime(last[0] / 1e6)), path, STREAM_S,
                   f'; {dropped} damaged line(s) skipped' if dropped else '')
    return events, header, note


def merge(prefix, notes=None):
    """One Chrome trace of every rank's events; ``notes`` (a list) receives a line per rank
    whose file is missing or cut short."""
    notes = [] if notes is None else notes
    events, expected, found = [], set(), []
    skipped = []
    for rank, path in rank_files(prefix).items():
        found.append(rank)
        try:
            if path.endswith('.events'):
                part, header, note = _load_log(path)
                notes.append(note)
                if header.get('ranks'):
                    expected.update(range(int(header['ranks'])))
            else:
                part = _load(path)
        except (ValueError, OSError) as e:  # one bad file: named, the others merged
            skipped.append('rank {}: skipped: {}'.format(rank, str(e).replace(
                'chainermn_torus: ', '')))
            continue
        events.extend(part)
    if skipped and len(skipped) == len(found):
        raise ValueError('no timeline file under {} could be read: {}'.format(
            prefix, '; '.join(skipped)))
    notes.extend(skipped)
    missing = sorted(expected - set(found))
    if missing:
        notes.insert(0, 'rank(s) {} of {} have no timeline file under {} (killed before their '
                        'first {:g} s of recording, or their node\'s files are elsewhere)'.format(
                            ', '.join(map(str, missing)), len(expected), prefix, STREAM_S))
    return {'traceEvents': events, 'displayTimeUnit': 'ms'}


COLORS = {'forward_backward': '#4c72b0', 'update': '#55a868', 'wait': '#c44e52',
          'pack': '#8172b2', 'reduce_scatter': '#ccb974', 'allreduce': '#64b5cd',
          'allgather': '#dd8452', 'put': '#dd8452', 'reduce (shm)': '#ccb974',
          'gather (shm)': '#dd8452', 'tail': '#999999'}


def plot(prefix, out, first=None, count=3, notes=None):
    """A Gantt chart of ``count`` iterations (from ``first``, default the middle) per rank."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    trace = merge(prefix, notes)['traceEvents']
    spans = [e for e in trace if e.get('ph') == 'X']
    names = {e['pid']: e['args']['name'] for e in trace if e.get('name') == 'process_name'}
    iters = sorted({e['args']['iteration'] for e in spans})
    if first is None:
        first = iters[len(iters) // 2] if iters else 0
    keep = [e for e in spans if first <= e['args']['iteration'] < first + count]
    if not keep:
        raise ValueError('chainermn_torus: no recorded phases in iterations {}..{} (the run has '
                         '{} .. {})'.format(first, first + count - 1, iters[0] if iters else '-',
                                            iters[-1] if iters else '-'))
    t0 = min(e['ts'] for e in keep)
    rows = sorted({(e['pid'], e['tid']) for e in keep})
    fig, ax = plt.subplots(figsize=(12, 1.6 + 0.45 * len(rows)))
    seen = set()
    for y, (pid, tid) in enumerate(rows):
        for e in keep:
            if (e['pid'], e['tid']) != (pid, tid):
                continue
            label = e['name'] if e['name'] not in seen else None
            seen.add(e['name'])
            ax.barh(y, e['dur'] / 1e3, left=(e['ts'] - t0) / 1e3, height=0.7,
                    color=COLORS.get(e['name'], '#777777'), label=label, edgecolor='none')
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(['{}{}'.format(names.get(p, f'rank {p}'),
                                      '' if t == 0 else ' comm') for p, t in rows])
    ax.invert_yaxis()
    ax.set_xlabel('ms')
    ax.set_title(f'{os.path.basename(prefix)}: iterations {first}-{first + count - 1}', pad=24)
    ax.legend(loc='lower left', bbox_to_anchor=(0, 1.0), ncol=8, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog='chainermn-torus timeline', description=__doc__.split(
        '\n')[0])
    sub = p.add_subparsers(dest='cmd')
    m = sub.add_parser('merge', help='one Chrome trace from the ranks\' files')
    m.add_argument('prefix')
    m.add_argument('-o', '--output', required=True)
    q = sub.add_parser('plot', help='PNG Gantt chart of a few iterations')
    q.add_argument('prefix')
    q.add_argument('-o', '--output', required=True)
    q.add_argument('--first', type=command_line.arg_type('seed'), default=None,
                   help='the first iteration drawn (default: the middle of the run)')
    q.add_argument('--count', type=command_line.arg_type('count'), default=3,
                   help='iterations drawn (default %(default)s)')
    args = p.parse_args(argv)
    notes = []
    try:
        if args.cmd in ('merge', 'plot'):
            result_paths.check_writable(args.output, '-o')  # before reading every rank's file
        if args.cmd == 'merge':
            trace = merge(args.prefix, notes)
            with open(args.output, 'w') as f:
                json.dump(trace, f)
        elif args.cmd == 'plot':
            plot(args.prefix, args.output, args.first, args.count, notes)
        else:
            p.print_help()
            return 2
    except ValueError as e:
        sys.stderr.write(f'chainermn-torus timeline: {e}\n')
        return 2
    for note in notes:
        sys.stderr.write(f'chainermn-torus timeline: {note}\n')
    print('wrote ' + args.output)
    return 0
