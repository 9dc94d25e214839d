"""Every process a command starts and the CPU time each kind spends, by phase (root).

    .venv/bin/python scripts/process_census.py [--phases REGEX] [--json FILE] -- COMMAND...
    e.g.  .venv/bin/python scripts/process_census.py -- bash .ci/run

Runs COMMAND with the kernel's process accounting on (acct(2), into a temporary file) and
reads each new process's command line while it lives (psutil, every 0.3 s). Every process
that ends meanwhile, on the whole machine, is counted with its user and system CPU
seconds: killed ranks, mpiexec and its proxies, QEMU and short-lived tools too, which
scripts/interpreter_census.py (no root; Python interpreters that exit normally) cannot see.
COMMAND's output passes through; its lines matching --phases (default: `make test`'s
"[test] ..." lines) end one phase and start the next, and each process counts in the phase
where it ended (known to the second). Beside each phase, the machine's busy CPU seconds
from /proc/stat: what the records leave out (kernel threads, processes still running) is
the difference.
"""
import argparse
import collections
import ctypes
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from interpreter_census import kind as python_kind

# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime
# (s), etime (float, 1/AHZ s), then comp_t utime, stime, mem, io, rw, minflt, majflt, swaps,
# and the command's first 16 bytes.
RECORD = struct.Struct('<BBHIIIIIIf8H16s')
AHZ = 100.0
CENSUS = 'CHAINERMN_TORUS_PROCESS_CENSUS'  # set for COMMAND: a census is running


def _comp(value):
    """comp_t: a 13-bit mantissa and a 3-bit base-8 exponent, in 1/AHZ s."""
    return ((value & 0x1fff) << (3 * (value >> 13))) / AHZ


def records(path):
    with open(path, 'rb') as f:
        data = f.read()
    for at in range(0, len(data) - RECORD.size + 1, RECORD.size):
        r = RECORD.unpack_from(data, at)
        # btime is in whole seconds, so 'end' is the earliest the process can have ended.
        yield {'pid': r[6], 'end': r[8] + r[9] / AHZ, 'user': _comp(r[10]),
               'system': _comp(r[11]), 'comm': r[18].split(b'\0')[0].decode(errors='replace')}


def busy_seconds():
    with open('/proc/stat') as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    # user, nice, system, idle, iowait, irq, softirq, steal: all but idle and iowait
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf('SC_CLK_TCK')


def kind(comm, cmd):
    if not cmd:
        return comm
    argv0 = os.path.basename(cmd.split()[0])
    if 'python' in argv0 or 'qemu' in cmd:
        return python_kind(cmd)
    return argv0


class Sampler(threading.Thread):
    """pid -> command line of every process seen alive."""

    def __init__(self):
        super().__init__(daemon=True)
        self.cmdlines, self.stop = {}, threading.Event()

    def run(self):
        while not self.stop.is_set():
            for p in psutil.process_iter(['pid', 'cmdline']):
                if p.info['pid'] not in self.cmdlines and p.info['cmdline']:
                    self.cmdlines[p.info['pid']] = ' '.join(p.info['cmdline'])[:300]
            self.stop.wait(0.3)


def census(command, phases):
    """Run command; returns (exit code, [(phase, wall s, busy CPU-s, {kind: [n, user, sys]})])."""
    folder = tempfile.mkdtemp(prefix='process-census-')
    log = os.path.join(folder, 'acct')
    open(log, 'w').close()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(log.encode()) != 0:
        sys.exit('process_census: process accounting (acct(2)) '
                 f'refused: {os.strerror(ctypes.get_errno())}; it needs root '
                 '(run this script as root)')
    sampler = Sampler()
    sampler.start()
    marks = [('start', time.time(), busy_seconds())]
    try:
        # Accounting is one file for the whole machine: a census inside (this script's own
        # test, in `make test`) would end this one's; CENSUS tells it to stay out.
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors='replace', env=dict(os.environ, **{CENSUS: '1'}))
        for line in proc.stdout:
            sys.stdout.write(line)
            if re.search(phases, line):
                marks.append((line.strip()[:70], time.time(), busy_seconds()))
        code = proc.wait()
    finally:
        marks.append(('end', time.time(), busy_seconds()))
        libc.acct(None)
        sampler.stop.set()
        sampler.join()
    out = []
    for (name, t0, b0), (_, t1, b1) in zip(marks, marks[1:]):
        out.append((name, t1 - t0, b1 - b0, collections.defaultdict(lambda: [0, 0.0, 0.0])))
    for r in records(log):
        if r['end'] < marks[0][1] - 1:
            continue  # ended before the command started (the accounting file's first)
        phase = next((i for i, m in enumerate(marks[1:]) if r['end'] <= m[1]), len(out) - 1)
        row = out[phase][3][kind(r['comm'], sampler.cmdlines.get(r['pid'], ''))]
        row[0] += 1
        row[1] += r['user']
        row[2] += r['system']
    os.remove(log)
    os.rmdir(folder)
    return code, out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--phases', default=r'^\[test\] ', metavar='REGEX',
                   help="output lines that start a phase (default: make test's '[test] ')")
    p.add_argument('--json', metavar='FILE', help='also write the figures to FILE')
    p.add_argument('--top', type=int, default=12, help='kinds shown per phase (default 12)')
    p.add_argument('command', nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    if not command:
        p.error('no command: process_census.py -- COMMAND...')
    code, phases = census(command, args.phases)
    for name, wall, busy, kinds in phases:
        counted = sum(u + s for _, u, s in kinds.values())
        print(f'\n[census] {name}: {wall:.0f} s, machine busy {busy:.0f} CPU-s, '
              f'processes {counted:.0f} CPU-s'
              )
        for k, (n, u, s) in sorted(kinds.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[
                :args.top]:
            print(f'  {u + s:8.1f} CPU-s (user {u:7.1f}, system {s:6.1f}) {n:5d} x {k}')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump([{'phase': name, 'wall_s': wall, 'busy_cpu_s': busy,
                        'kinds': {k: {'processes': n, 'user_s': u, 'system_s': s}
                                  for k, (n, u, s) in kinds.items()}}
                       for name, wall, busy, kinds in phases], f, indent=1)
    return code


if __name__ == '__main__':
    sys.exit(main())
