"""The machine's CPUs as Linux describes them in sysfs: cores, hyper-thread siblings, NUMA.

Read from ``<root>/devices/system/cpu`` and ``<root>/devices/system/node`` (root ``/sys``;
tests pass fake trees). Each CPU's core is (package, core_id); CPUs of one core are its
hardware threads (SMT siblings). A machine without that information (containers without
/sys, other systems) is described as one hardware thread per core, one NUMA node.
"""
import os
import re
from chainermn_torus.errors import ConfigError

__all__ = ['Cpu', 'Topology', 'parse_cpulist', 'format_cpulist']


def parse_cpulist(text):
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11] (the kernel's list format)."""
    cpus = []
    for part in text.strip().split(','):
        if not part:
            continue
        m = re.fullmatch(r'(\d+)(?:-(\d+))?', part.strip())
        if not m:
            raise ValueError(f'not a CPU list: {text!r}')
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        cpus.extend(range(lo, hi + 1))
    return cpus


def format_cpulist(cpus):
    """[0, 1, 2, 3, 8] -> '0-3,8'."""
    cpus = sorted(set(cpus))
    parts, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f'{cpus[i]}-{cpus[j]}')
        i = j + 1
    return ','.join(parts) or '(none)'


class Cpu:
    __slots__ = ('id', 'package', 'core', 'node')

    def __init__(self, id, package, core, node):
        self.id, self.package, self.core, self.node = id, package, core, node


def _read(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


class Topology:
    """CPUs grouped into cores (SMT siblings) and NUMA nodes."""

    def __init__(self, cpus, source):
        self.cpus = {c.id: c for c in cpus}
        self.source = source

    @classmethod
    def from_sysfs(cls, root='/sys'):
        cpu_dir = os.path.join(root, 'devices', 'system', 'cpu')
        if root != '/sys' and not os.path.isdir(cpu_dir):
            # Another tree was asked for: never describe this machine instead of it.
            raise ConfigError(f'chainermn_torus: sysfs tree {root!r} has no devices/system/cpu; '
                              'give the root of a copied sysfs (the directory holding '
                              'devices/)')
        online = _read(os.path.join(cpu_dir, 'online'))
        if online:
            ids = parse_cpulist(online)
        else:
            ids = sorted(int(d[3:]) for d in _listdir(cpu_dir) if re.fullmatch(r'cpu\d+', d))
        if not ids:
            n = os.cpu_count() or 1
            return cls([Cpu(i, 0, i, 0) for i in range(n)],
                       f'no CPU topology in {root}: {n} CPUs taken as one thread per core')
        node_of = {}
        node_dir = os.path.join(root, 'devices', 'system', 'node')
        for d in _listdir(node_dir):
            m = re.fullmatch(r'node(\d+)', d)
            if m:
                for c in parse_cpulist(_read(os.path.join(node_dir, d, 'cpulist'), '')):
                    node_of[c] = int(m.group(1))
        cpus = []
        for i in ids:
            topo = os.path.join(cpu_dir, f'cpu{i}', 'topology')
            package = int(_read(os.path.join(topo, 'physical_package_id'), '0'))
            core = int(_read(os.path.join(topo, 'core_id'), str(i)))
            cpus.append(Cpu(i, package, core, node_of.get(i, 0)))
        return cls(cpus, root)

    def cores(self, allowed=None):
        """Lists of CPU ids, one list per core (siblings, ascending), in NUMA/package order."""
        groups = {}
        for c in sorted(self.cpus.values(), key=lambda c: c.id):
            if allowed is not None and c.id not in allowed:
                continue
            groups.setdefault((c.node, c.package, c.core), []).append(c.id)
        return [groups[k] for k in sorted(groups, key=lambda k: (k[0], k[1], groups[k][0]))]

    @property
    def smt(self):
        return max((len(c) for c in self.cores()), default=1)

    @property
    def numa_nodes(self):
        return sorted({c.node for c in self.cpus.values()})

    def describe(self):
        cores = self.cores()
        packages = {c.package for c in self.cpus.values()}
        return (f'{len(self.cpus)} CPUs = {len(cores)} cores x {self.smt} hardware threads '
                f'(SMT-{self.smt}), {len(packages)} package(s), {len(self.numa_nodes)} NUMA '
                'node(s)')


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []
