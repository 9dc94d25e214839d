"""The node watchers' heartbeats: who watches whom, and the UDP messages between them.

Every node's watcher sends its ranks' rows (``verdict.summary``) to the watchers that
watch it, a ``verdict`` when it ends the job, and a ``bye`` when its ranks finished. Up to
``MAX_ALL`` nodes every watcher hears every other; beyond, each node is watched by the next
``RING`` nodes, so the traffic per node stays constant. UDP: a message may be lost, so a
verdict and a goodbye are sent three times.

A node is shared with other users and its network with other hosts, and a verdict ends the
job: so every message carries an HMAC-SHA256 of the job's key (made by rank 0 at start,
given to the watchers over MPI and their stdin, never on a command line) and a number that
only grows, per sender. A datagram without a valid MAC, from a
node outside the job's table or from an address that node does not have is dropped and
counted (``Heartbeat.dropped``); a number already seen (a copy sent to another of the
node's addresses, or a replay) is ignored. The watcher opens one socket per IPv4 address
of its node; once the table is known it keeps only those on the job's networks
(``job_addresses``: the addresses in a subnet another node of the job has one in; a one-node
job, loopback) and closes the others, so nothing listens on an interface the job does not
use.
"""
import hmac
import ipaddress
import json
import socket
import time

import psutil

__all__ = ['Heartbeat', 'monitored', 'watchers_of', 'job_addresses', 'local_addresses',
           'seal', 'unseal', 'RING', 'MAX_ALL', 'MAC_BYTES']

RING = 4       # beyond MAX_ALL nodes, the nodes that watch each node
MAX_ALL = 32   # up to this many nodes, every watcher hears every other
MAC_BYTES = 32  # HMAC-SHA256
# Datagrams read per socket at one wake-up: a flood from a sender with more cores than the
# node (1.09 M in 20 s were refused one by one) must not keep the watcher from its own beat;
# a refused datagram costs 2 us of MAC check (2-core EPYC, 2026-11-29), so 256 stay within a
# few ms, and a job sends a few per second.
DRAIN_PER_WAKE = 256


def monitored(me, n):
    """The nodes node ``me`` of ``n`` watches (and whose heartbeats it expects)."""
    if n <= MAX_ALL:
        return [i for i in range(n) if i != me]
    return sorted({(me + k) % n for k in range(1, RING + 1)} - {me})


def watchers_of(me, n):
    """The nodes that watch node ``me``: where its heartbeats go."""
    if n <= MAX_ALL:
        return [i for i in range(n) if i != me]
    return sorted({(me - k) % n for k in range(1, RING + 1)} - {me})


def local_addresses():
    """[(address, prefix length)] of this node's IPv4 interfaces, loopback last."""
    found = []
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family != socket.AF_INET or any(a.address == f[0] for f in found):
                continue
            try:
                prefix = ipaddress.IPv4Network(f'0.0.0.0/{a.netmask}').prefixlen
            except ValueError:
                prefix = 32
            found.append((a.address, prefix))
    return sorted(found, key=lambda f: f[0].startswith('127.'))


def _loopback(addr):
    return addr.startswith('127.')


def job_addresses(table, i):
    """The addresses of node ``i`` of ``table`` (every node's {'addrs': [[address, prefix,
    port]]}) that the job uses: alone, its loopback ones; else those in a subnet holding
    an address of another node; where no subnet is shared (routed networks) every
    non-loopback one; where the node has none (nodes emulated on one host), all."""
    mine = table[i]['addrs']
    if len(table) == 1:
        return [a for a in mine if _loopback(a[0])] or list(mine)
    others = [ipaddress.IPv4Address(a[0]) for j, t in enumerate(table) if j != i
              for a in t['addrs'] if not _loopback(a[0])]
    shared = [a for a in mine if not _loopback(a[0]) and any(
        o in ipaddress.IPv4Network(f'{a[0]}/{a[1]}', strict=False)
        for o in others)]
    return shared or [a for a in mine if not _loopback(a[0])] or list(mine)


def seal(key, message):
    """The datagram of ``message`` (a dict): its MAC under ``key``, then its JSON."""
    data = json.dumps(message, separators=(',', ':')).encode()
    return hmac.new(key, data, 'sha256').digest() + data


def unseal(key, datagram):
    """The message a datagram carries, or None when its MAC is not the job's."""
    mac, data = datagram[:MAC_BYTES], datagram[MAC_BYTES:]
    if len(mac) < MAC_BYTES or not hmac.compare_digest(
            mac, hmac.new(key, data, 'sha256').digest()):
        return None
    try:
        msg = json.loads(data.decode())
        msg['node'], msg['seq'] = int(msg['node']), int(msg['seq'])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    return msg


class Heartbeat:
    """This node's sockets (bound at once: their ports go into the table the leader ranks
    share) and, once ``join``ed, its peers: {node: {'host', 'heard' (ns), 'rows', 'gone',
    'seen'}} for the nodes it watches, and the addresses its messages go to."""

    def __init__(self, addresses=None):
        self.socks = []
        for addr, prefix in (local_addresses() if addresses is None else addresses):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                sock.bind((addr, 0))
            except OSError:
                sock.close()  # an address that went away meanwhile
                continue
            self.socks.append(sock)
        self.me, self.peers, self.targets, self.key, self.table = -1, {}, [], b'', []
        self._seq, self._last = 0, {}  # what this node sent last; node -> seq heard last
        self.dropped, self.first_drop = 0, None  # datagrams refused; (sender, why)

    def addresses(self):
        """[[address, prefix, port]] of the open sockets, for the table."""
        prefixes = dict(local_addresses())
        return [[s.getsockname()[0], prefixes.get(s.getsockname()[0], 32),
                 s.getsockname()[1]] for s in self.socks]

    def join(self, table, me, now, key):
        """``table``: every node's {'host', 'addrs': [[address, prefix, port]]}; ``me``: this
        node's index; ``key``: the job's key (bytes). Closes the sockets off the job's
        networks."""
        n = len(table)
        self.me, self.key, self.table = me, key, table
        used = {(a[0], a[2]) for a in job_addresses(table, me)}
        for sock in list(self.socks):
            if sock.getsockname() not in used:
                self.socks.remove(sock)
                sock.close()
        self.peers = {i: {'host': table[i]['host'], 'heard': now, 'rows': [], 'gone': False,
                          'seen': False} for i in monitored(me, n)}
        self.targets = [(a[0], a[2]) for i in watchers_of(me, n)
                        for a in job_addresses(table, i)]
        for sock in self.socks:
            sock.setblocking(False)

    def send(self, kind, rows=None, times=1):
        for _ in range(times):
            self._seq = max(self._seq + 1, time.time_ns())  # grows across restarts too
            data = seal(self.key, {'kind': kind, 'node': self.me, 'seq': self._seq,
                                   'rows': rows or []})
            for target in self.targets:
                for sock in self._senders(target[0]):
                    try:
                        sock.sendto(data, target)
                        break
                    except OSError:
                        pass  # an address of the peer this socket cannot reach

    def _senders(self, addr):
        """This node's sockets, the one on ``addr``'s subnet first."""
        dest = ipaddress.IPv4Address(addr)
        prefixes = {a[0]: a[1] for a in self.table[self.me]['addrs']}

        def near(sock):
            own = sock.getsockname()[0]
            return dest not in ipaddress.IPv4Network(
                f'{own}/{prefixes.get(own, 32)}', strict=False)
        return sorted(self.socks, key=near)

    def _drop(self, sender, why):
        self.dropped += 1
        if self.first_drop is None:
            self.first_drop = ('{}:{}'.format(*sender[:2]), why)

    def _accepted(self, data, sender):
        """The message, or None (dropped and counted)."""
        msg = unseal(self.key, data)
        if msg is None:
            return self._drop(sender, 'no valid MAC of this job')
        node = msg['node']
        if not 0 <= node < len(self.table) or node == self.me:
            return self._drop(sender, f'from node {node}, not another node of this job')
        if sender[0] not in [a[0] for a in self.table[node]['addrs']]:
            return self._drop(sender, f'from an address node {node} does not have')
        if msg['seq'] <= self._last.get(node, 0):
            return None  # a copy sent to another of this node's addresses, or a replay
        self._last[node] = msg['seq']
        return msg

    def receive(self, now, ready=None):
        """Read what arrived on the sockets (``ready``: those select found readable; default
        all): the peers' rows updated; True once a verdict came (another node of the job
        found it stalled)."""
        for sock in (self.socks if ready is None else ready):
            for _ in range(DRAIN_PER_WAKE):  # the rest waits for the next wake-up
                try:
                    data, sender = sock.recvfrom(65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break  # an ICMP error for an earlier send: nothing to read
                msg = self._accepted(data, sender)
                if msg is None:
                    continue
                if msg.get('kind') == 'verdict':
                    return True
                peer = self.peers.get(msg['node'])
                if peer is None:
                    continue
                peer['heard'] = now
                peer['seen'] = True
                if msg.get('kind') == 'bye':
                    peer['gone'] = True
                else:
                    peer['rows'] = msg.get('rows', [])
        return False

    def close(self):
        for sock in self.socks:
            sock.close()
        self.socks = []
