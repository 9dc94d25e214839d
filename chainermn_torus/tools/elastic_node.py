"""One node's part of a recovery (``chainermn-torus elastic``): started by the
supervisor on every node it still counts on, through the job's own launcher, one process
per node.

    CHAINERMN_TORUS_ELASTIC_PROBE=RUN python -m chainermn_torus.tools.elastic_node \
        [--snapshots PARENT]

The run id comes in the environment, which only the user and root can read, and never on
the command line, which every user sees.

It

* ends every process of this user that belongs to an earlier step of run ``RUN`` (their
  environment carries ``CHAINERMN_TORUS_ELASTIC_STEP=RUN:...``; a rank the launcher did not
  reach, a loader process, a stopped watcher);
* removes what those left in /dev/shm (``devshm.sweep``: files of ours whose process is
  gone, and MPI's segments no process maps), never the snapshots, and MPICH's topology
  files in /tmp that their launcher, now gone, wrote (``--since``);
* with ``--snapshots PARENT`` (the run ends for good), removes the run's snapshots too:
  its directory on this node in PARENT (``snapshot_place``: named from the run's token);
* prints ``READY`` with this node's host name, the processes ended and the files removed.

That it answers at all is the supervisor's liveness test of the node: a node that does not
within its time is lost. The host name maps the launcher's name for the node to the name
the watch uses in its lines.
"""
import argparse
import os
import re
import signal
import socket
import sys
import time

import psutil

from chainermn_torus import config, settings_table
from chainermn_torus.errors import ConfigError
from chainermn_torus.extensions.checkpoint import snapshot_place
from chainermn_torus.runtime.files import devshm

__all__ = ['main', 'READY', 'parse_ready', 'end_step_processes', 'RUN_VARIABLE',
           'remove_run_snapshots']

READY = 'chainermn_torus elastic node: {host} ready: {ended} process(es) ended, {removed} ' \
    'file(s) removed'
_VARIABLE = 'CHAINERMN_TORUS_ELASTIC_STEP'
RUN_VARIABLE = settings_table.SETTINGS['elastic_probe'].env  # the probe's own: not a step's


def parse_ready(text):
    """{host: (ended, removed)} of the READY lines in ``text``."""
    out = {}
    pattern = re.escape(READY).replace(r'\{host\}', r'(\S+)').replace(
        r'\{ended\}', r'(\d+)').replace(r'\{removed\}', r'(\d+)')
    for m in re.finditer(pattern, text):
        out[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return out


def _of_run(proc, run):
    try:
        value = proc.environ().get(_VARIABLE, '')
    except (psutil.Error, OSError):
        return False
    return value.split(':', 1)[0] == run


def end_step_processes(run, seconds=5.0):
    """SIGKILL every process of this user in run ``run``'s steps (a stopped one too: SIGKILL
    needs no cooperation); returns how many, once they are gone (at most ``seconds``)."""
    me, uid = os.getpid(), os.getuid()
    doomed = []
    for proc in psutil.process_iter(['uids']):
        if proc.pid == me or proc.info['uids'] is None or proc.info['uids'].real != uid:
            continue
        if _of_run(proc, run):
            doomed.append(proc)
    for proc in doomed:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(doomed, timeout=seconds)
    return len(doomed)


def remove_dead_topology(since, run):
    """MPICH's topology files of this user in /tmp written since ``since`` (the old step's
    start) by a launcher proxy that is gone: one no live ``hydra_pmi_proxy`` of this user
    started before could have written. Returns how many went."""
    uid = os.getuid()
    proxies = []
    for proc in psutil.process_iter(['name', 'uids', 'create_time', 'status']):
        # The run's own old proxies are not a live job's (being ended, or zombies).
        if proc.info['name'] == 'hydra_pmi_proxy' and proc.info['uids'] and \
                proc.info['uids'].real == uid and proc.info['status'] != psutil.STATUS_ZOMBIE \
                and not _of_run(proc, run):
            proxies.append(proc.info['create_time'])
    directory, prefix = os.path.split(devshm.HYDRA_TOPOLOGY)
    removed = 0
    for entry in os.scandir(directory):
        try:
            if not entry.name.startswith(prefix):
                continue
            st = entry.stat(follow_symlinks=False)
            if st.st_uid != uid or st.st_mtime < since - 0.05:
                continue
            if any(started <= st.st_mtime + 0.05 for started in proxies):
                continue  # a live launcher may have written it for ranks that still run
            os.unlink(entry.path)
            removed += 1
        except OSError:
            continue
    return removed


def remove_run_snapshots(parent, run):
    """The run's snapshot directory on this node in ``parent`` (the step's ``--memory-dir``
    pattern, or the default parent) and its fallback; how many generations went."""
    host = socket.gethostname()
    pattern = None if parent == snapshot_place.default_parent() else parent
    token = snapshot_place.from_run(run)
    gone = 0
    for directory in snapshot_place.candidates(pattern, token, host):
        try:
            gone += snapshot_place.remove_run(directory)
        except OSError:  # not there, or a parent another user holds (never walked into)
            continue
    return gone


def main(argv=None):
    p = argparse.ArgumentParser(prog='python -m chainermn_torus.tools.elastic_node',
                                description=__doc__.split('\n\n')[0])
    p.add_argument('--since', type=float, default=None, metavar='TIME',
                   help="the old step's start (seconds since the epoch): MPICH's topology "
                        'files its launcher left since then go')
    p.add_argument('--snapshots', default=None, metavar='PARENT',
                   help="remove the run's snapshots in PARENT too (the run has ended)")
    args = p.parse_args(argv)
    try:
        args.run = config.current()['elastic_probe']
    except ConfigError as e:
        p.error(str(e).replace('chainermn_torus: ', '', 1))
    if args.run is None:
        p.error(f'{RUN_VARIABLE} must hold the run id; chainermn-torus elastic sets it')
    ended = end_step_processes(args.run)
    # MPI's own segments too (a step ended in MPI_Init leaves MPICH's): those no process
    # maps or holds once the run's are gone, and not made in the last half second (one of
    # another job between its creation and its mapping).
    removed = devshm.sweep(others=True, min_age=0.5)
    if args.since is not None:
        removed += [None] * remove_dead_topology(args.since, args.run)
    # This process's own launcher proxy wrote a topology file for it (MPICH): not left.
    devshm.remove_launcher_topology(None, time.time())
    if args.snapshots:
        removed += [None] * remove_run_snapshots(args.snapshots, args.run)
    print(READY.format(host=socket.gethostname(), ended=ended, removed=len(removed)),
          flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
