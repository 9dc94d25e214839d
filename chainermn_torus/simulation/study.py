"""The shape study at scale: ResNet-50 gradients on 256 to 8,192 simulated nodes.

    chainermn-torus simulate study [--out docs/measurements/simulation] [--jobs 2]
    chainermn-torus simulate study --report DIR      (tables and plots from the results)

Parts (each result is appended to ``study.jsonl`` as it finishes, so an interrupted study
resumes where it stopped):

  fattree   Oakforest-PACS-like fat tree (the ``ofp`` figures), one rank per node (seed
            003's set-up): pure_allreduce, rsaa and rsap on every power-of-two grid at 256
            and 1,024 nodes, and on M = 2, 16, 64 at 4,096 and 8,192, with Rabenseifner's
            all-reduce (``halving``) as the library's.
  library   256 fat-tree nodes, Tamura & Hanawa's three shapes and all-reduce alone, with each
            library stand-in (halving, ring, doubling): which library behaviour makes
            "all-reduce alone" 2.1x slower than RSAP (2, 128)?
  torus     Tofu-like 3D torus (the ``k`` figures), 256 and 1,024 nodes, one rank per node,
            every mapping (row-major, rows-along-z, random), M = 2, 4, 16, 64.
  exact     the fat tree at every node count: rsap (2, K/2) and (16, K/16), and
            pure_allreduce, each plain and with the exact sum (``schedule.Setup``: the
            floats in phase 1, int64 in phase 2, the MAX of the scales): what the same bits
            on any P cost at scale.
"""
import argparse
import concurrent.futures
import json
import os
import sys
import time

from chainermn_torus import command_line
from chainermn_torus.planning import planner
from chainermn_torus.simulation import platforms, simulate

__all__ = ['jobs', 'main', 'report']

# The grids of 256 ranks the 2D-torus paper measured on Oakforest-PACS (rows x columns).
PAPER_GRIDS = [(2, 128), (16, 16), (64, 4)]


def _pow2_grids(P, only=None):
    ms = [1 << k for k in range(1, P.bit_length()) if (1 << k) < P and P % (1 << k) == 0]
    if only:
        ms = [m for m in ms if m in only]
    return [(m, P // m) for m in ms]


def jobs(parts=('fattree', 'library', 'torus', 'exact'), nodes=(256, 1024, 4096, 8192)):
    out = []
    if 'fattree' in parts:
        for K in nodes:
            grids = _pow2_grids(K, None if K <= 1024 else (2, 16, 64))
            out.append(dict(part='fattree', nodes=K, algorithm='pure_allreduce', grid=None))
            for algo in ('rsap', 'rsaa'):
                out += [dict(part='fattree', nodes=K, algorithm=algo, grid=g) for g in grids]
    if 'library' in parts:
        for lib in ('halving', 'ring', 'doubling'):  # ChainerMN's naive: one per array
            out.append(dict(part='library', nodes=256, algorithm='naive', grid=None,
                            library=lib))
        for lib in ('ring', 'doubling'):
            out.append(dict(part='library', nodes=256, algorithm='pure_allreduce', grid=None,
                            library=lib))
            for algo in ('rsap', 'rsaa'):
                out += [dict(part='library', nodes=256, algorithm=algo, grid=g, library=lib)
                        for g in PAPER_GRIDS]
    if 'torus' in parts:
        for K in (256, 1024):
            for mapping in ('row-major', 'rows-along-z', 'random'):
                out.append(dict(part='torus', nodes=K, algorithm='pure_allreduce', grid=None,
                                mapping=mapping))
                for algo in ('rsap', 'rsaa'):
                    out += [dict(part='torus', nodes=K, algorithm=algo, grid=(m, K // m),
                                 mapping=mapping) for m in (2, 4, 16, 64)]
    if 'exact' in parts:
        for K in nodes:
            for exact in (False, True):
                out.append(dict(part='exact', nodes=K, algorithm='pure_allreduce', grid=None,
                                exact=exact))
                out += [dict(part='exact', nodes=K, algorithm='rsap', grid=(m, K // m),
                             exact=exact) for m in (2, 16) if K % m == 0 and K > m]
    for j in out:
        j.setdefault('library', 'halving')
        j.setdefault('mapping', None)
        j.setdefault('exact', False)
    return out


def _key(j):
    return (j['part'], j['nodes'], j['algorithm'], tuple(j['grid'] or ()), j['library'],
            j['mapping'], j.get('exact', False))


def run_one(j):
    if j['part'] == 'torus':
        machine = platforms.torus(j['nodes'], 1, planner.PRESETS['k'], mapping=j['mapping'])
    else:
        machine = platforms.fattree(j['nodes'], 1, planner.PRESETS['ofp'])
    t0 = time.time()
    naive = j['algorithm'] == 'naive'
    res = simulate.simulate(machine, 'pure_allreduce' if naive else j['algorithm'],
                            'resnet50', M=j['grid'][0] if j['grid'] else 1,
                            library=j['library'], segment_bytes=None if naive else 4 << 20,
                            exact=j.get('exact', False))
    return dict(j, seconds=res['seconds'], messages=res['messages'], mode=res['mode'],
                wall_s=time.time() - t0, dims=machine.dims)


def run(out_dir, parts, nodes, workers):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, 'study.jsonl')
    done = set()
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                r['grid'] = tuple(r['grid']) if r['grid'] else None
                done.add(_key(r))
    todo = [j for j in jobs(parts, nodes) if _key(j) not in done]
    # The largest first, so that the long runs overlap the short ones.
    todo.sort(key=lambda j: -j['nodes'])
    print(f'{len(todo)} simulations to run ({len(done)} done before)', flush=True)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool, open(path, 'a') as f:
        for r in pool.map(run_one, todo):
            f.write(json.dumps(r) + '\n')
            f.flush()
            print('{part:8} {nodes:5} {algorithm:15} {grid!s:12} {library:8} {mapping!s:12} '
                  'exact={exact!s:5} '
                  '{ms:9.2f} ms  {wall_s:6.1f} s wall'.format(ms=r['seconds'] * 1e3, **r),
                  flush=True)


def _load(out_dir):
    rows = []
    with open(os.path.join(out_dir, 'study.jsonl')) as f:
        for line in f:
            r = json.loads(line)
            r['grid'] = tuple(r['grid']) if r['grid'] else None
            rows.append(r)
    return rows


def _name(r):
    return r['algorithm'] + ('' if r['grid'] is None else ' ({}, {})'.format(*r['grid']))


def report(out_dir):
    """study.md and the plots, from study.jsonl."""
    rows = _load(out_dir)
    lines = ['# The shape study (simulated, ResNet-50 gradients, 102 MB, 4 MiB segments)', '']
    lines += _fat_tree_section(rows) + _library_section(rows) + _torus_section(rows) + \
        _exact_section(rows)
    with open(os.path.join(out_dir, 'study.md'), 'w') as f:
        f.write('\n'.join(lines))
    _plots(rows, out_dir)
    return '\n'.join(lines)


def _fat_tree_section(rows):
    """Every node count of the fat tree: each algorithm against the best."""
    lines = []
    ft = [r for r in rows if r['part'] == 'fattree']
    for K in sorted({r['nodes'] for r in ft}):
        sub = sorted((r for r in ft if r['nodes'] == K), key=lambda r: r['seconds'])
        best = sub[0]['seconds']
        lines += [f'## Fat tree (OFP-like), {K} nodes x 1 rank, halving', '',
                  '| algorithm (M, N) | simulated ms | x best | messages | wall s |',
                  '|---|---|---|---|---|']
        lines += ['| {} | {:.2f} | {:.2f} | {} | {:.1f} |'.format(
            _name(r), r['seconds'] * 1e3, r['seconds'] / best, r['messages'], r['wall_s'])
            for r in sub]
        lines.append('')
    return lines


def _library_section(rows):
    """The library all-reduces at 256 fat-tree nodes, Tamura & Hanawa's shapes."""
    lines = []
    lines += ['## Library all-reduce at 256 fat-tree nodes: Tamura & Hanawa\'s shapes', '',
              '| library | naive (one all-reduce per array) ms | all-reduce alone ms | '
              'RSAP (2,128) ms | (16,16) | (64,4) | alone / RSAP (2,128) | naive / RSAP (2,128) '
              '| RSAP order |', '|---|---|---|---|---|---|---|---|---|']
    at256 = {}
    for r in rows:
        if r['nodes'] == 256 and r['part'] in ('fattree', 'library'):
            at256[(r['library'], r['algorithm'], r['grid'])] = r['seconds']
    for lib in ('halving', 'ring', 'doubling'):
        alone = at256.get((lib, 'pure_allreduce', None))
        naive = at256.get((lib, 'naive', None))
        rsap = [at256.get((lib, 'rsap', g)) for g in PAPER_GRIDS]
        if alone is None or None in rsap:
            continue
        order = sorted(PAPER_GRIDS, key=lambda g: at256[(lib, 'rsap', g)])
        lines.append('| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {} | {} |'.format(
            lib, '-' if naive is None else f'{naive * 1e3:.1f}', alone * 1e3,
            *[t * 1e3 for t in rsap], alone / rsap[0],
            '-' if naive is None else f'{naive / rsap[0]:.2f}',
            ' < '.join('({}, {})'.format(*g) for g in order)))
    mixed = [(lib, at256.get((lib, 'pure_allreduce', None)), at256.get((lib, 'naive', None)))
             for lib in ('ring', 'doubling')]
    base = at256.get(('halving', 'rsap', (2, 128)))
    if base:
        lines += ['', 'The library choosing by size: all-reduce alone (or naive) with another '
                  'algorithm, the columns\' all-reduce of RSAP (2, 128) with halving:', '']
        for lib, alone, naive in mixed:
            if alone:
                lines.append('- all-reduce alone with {}: {:.2f}x RSAP (2, 128){}'.format(
                    lib, alone / base, '' if naive is None else
                    f'; naive with {lib}: {naive / base:.2f}x'))
    lines.append('')
    return lines


def _torus_section(rows):
    """The torus mappings: each algorithm under each mapping."""
    lines = []
    tor = [r for r in rows if r['part'] == 'torus']
    for K in sorted({r['nodes'] for r in tor}):
        sub = [r for r in tor if r['nodes'] == K]
        dims = sub[0].get('dims')
        names = sorted({_name(r) for r in sub}, key=lambda n: min(
            r['seconds'] for r in sub if _name(r) == n))
        maps = ('row-major', 'rows-along-z', 'random')
        lines += ['## Torus (Tofu-like, {}), {} nodes x 1 rank: mapping'.format(
            'x'.join(map(str, dims or ())), K), '',
            '| algorithm (M, N) | ' + ' | '.join(maps) + ' | worst / best mapping |',
            '|---|---|---|---|---|']
        for n in names:
            t = {r['mapping']: r['seconds'] for r in sub if _name(r) == n}
            vals = [t.get(m) for m in maps]
            got = [v for v in vals if v is not None]
            lines.append('| {} | {} | {:.2f} |'.format(n, ' | '.join(
                '-' if v is None else f'{v * 1e3:.2f}' for v in vals),
                max(got) / min(got)))
        lines.append('')
    return lines


def _exact_section(rows):
    """The exact sum against the plain one, each algorithm and node count."""
    ex = [r for r in rows if r['part'] == 'exact']
    if not ex:
        return []
    lines = ['## The exact sum at scale (fat tree, one rank per node, halving)', '',
             "rsap: the gradients' float32 in phase 1 (encoded and summed by their "
             'receivers), int64 in phase 2 and the tails, the float32 means in phase 3; '
             'pure_allreduce: one all-reduce of the int64; both after one MAX all-reduce of '
             'the scales and a pass over the values for it on each node.', '',
             '| nodes | algorithm (M, N) | plain ms | exact ms | exact / plain |',
             '|---|---|---|---|---|']
    plain = {(r['nodes'], _name(r)): r['seconds'] for r in ex if not r.get('exact')}
    for r in sorted((r for r in ex if r.get('exact')), key=lambda r: (r['nodes'], _name(r))):
        base = plain.get((r['nodes'], _name(r)))
        if base:
            lines.append('| {} | {} | {:.2f} | {:.2f} | {:.2f} |'.format(
                r['nodes'], _name(r), base * 1e3, r['seconds'] * 1e3, r['seconds'] / base))
    return lines + ['']


def _plots(rows, out_dir):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    ft = [r for r in rows if r['part'] == 'fattree']
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = {}
    for r in ft:
        if r['grid'] is None or r['grid'][0] in (2, 16, 64):
            label = r['algorithm'] + ('' if r['grid'] is None else ' M={}'.format(r['grid'][0]))
            series.setdefault(label, []).append((r['nodes'], r['seconds'] * 1e3))
    for label, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker='o', label=label)
    ax.set_xscale('log', base=2)
    ax.set_xlabel('nodes (1 rank each)')
    ax.set_ylabel('simulated all-reduce, ms')
    ax.set_title('ResNet-50 gradients on an OFP-like fat tree (SimGrid)')
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, 'study-fattree.png'), dpi=120)
    plt.close(fig)
    tor = [r for r in rows if r['part'] == 'torus']
    if tor:
        Ks = sorted({r['nodes'] for r in tor})
        fig, axes = plt.subplots(1, len(Ks), figsize=(6 * len(Ks), 4.5))
        axes = axes if len(Ks) > 1 else [axes]
        maps = ('row-major', 'rows-along-z', 'random')
        for ax, K in zip(axes, Ks):
            sub = [r for r in tor if r['nodes'] == K]
            names = sorted({_name(r) for r in sub})
            w = 0.8 / len(maps)
            for i, m in enumerate(maps):
                vals = [next((r['seconds'] * 1e3 for r in sub if _name(r) == n
                              and r['mapping'] == m), 0) for n in names]
                ax.bar([x + i * w for x in range(len(names))], vals, w, label=m)
            ax.set_xticks([x + w for x in range(len(names))])
            ax.set_xticklabels(names, rotation=60, ha='right', fontsize=7)
            ax.set_ylabel('simulated all-reduce, ms')
            ax.set_title(f'Tofu-like torus, {K} nodes')
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, 'study-torus-mapping.png'), dpi=120)
        plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(prog='chainermn-torus simulate study',
                                description=__doc__.split('\n')[0])
    p.add_argument('--out', default='results/simulation')
    p.add_argument('--parts', nargs='+', default=['fattree', 'library', 'torus', 'exact'],
                   choices=('fattree', 'library', 'torus', 'exact'))
    p.add_argument('--nodes', nargs='+', type=command_line.arg_type('count'),
                   default=[256, 1024, 4096, 8192])
    p.add_argument('--jobs', type=int, default=2, help='simulations at once')
    p.add_argument('--report', action='store_true', help='only write study.md and plots')
    args = p.parse_args(argv)
    if not args.report:
        if not simulate.available():
            sys.stderr.write(f'chainermn-torus simulate: {simulate.why_unavailable()}\n')
            return 2
        run(args.out, args.parts, args.nodes, args.jobs)
    print(report(args.out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
