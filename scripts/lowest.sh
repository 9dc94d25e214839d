#!/bin/sh
# lowest.sh COMMAND...: COMMAND at the lowest priority: nice 19 for the process and, where the
# kernel groups processes by session (CONFIG_SCHED_AUTOGROUP), for its session too.
#
# Why both: where the kernel groups by session (/proc/sys/kernel/sched_autogroup_enabled = 1),
# nice weighs a process only against the others of its session, and every session weighs the
# same as every other; a session's own nice (/proc/self/autogroup) weighs the session. MPI
# launchers start each node's ranks in a new session (MPICH's hydra_pmi_proxy calls setsid):
# so a job's ranks must say it themselves, `mpiexec -n P sh lowest.sh python ...`, or they
# weigh what any other job weighs. (scripts/test_lanes.py, docs/development.md "Two lanes".)
echo 19 2>/dev/null >/proc/self/autogroup
exec nice -n 19 "$@"
