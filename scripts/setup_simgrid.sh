#!/bin/bash
# The simulator's optional part (docs/simulation.md): SimGrid's Python module for
# `chainermn-torus simulate`, `plan` and `auto`. `make simgrid` runs this after `make setup`.
#
# Choice: Debian's prebuilt python3-simgrid (3.32, built for Python 3.11, about 20 s with
# apt) rather than the package index's `simgrid` sdist, which compiles SimGrid's C++ with
# libboost-dev for many minutes. The venv's Python must then be 3.11; its packages stay
# first (chainermn_torus.simulation.simulate appends Debian's folder to the child's path).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
check() {
    "$PY" -c 'from chainermn_torus.simulation import simulate as s
import sys
sys.exit(0 if s.available() else 1)'
}
if check; then
    echo "SimGrid: importable for $PY"
    exit 0
fi
version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$version" != "3.11" ]; then
    echo "SimGrid: Debian's python3-simgrid is built for Python 3.11, the venv has $version;" >&2
    echo "  install the index's sdist instead: apt-get install -y libboost-dev cmake &&" >&2
    echo "  $PY -m pip install simgrid   (compiles SimGrid, many minutes)" >&2
    exit 2
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "SimGrid: needs root and apt-get to install python3-simgrid (as root:" >&2
    echo "  apt-get install -y python3-simgrid), or pip install simgrid (libboost-dev)" >&2
    exit 2
fi
apt-get install -y python3-simgrid >/dev/null 2>&1 || {
    apt-get update >/dev/null && apt-get install -y python3-simgrid >/dev/null; }
check || { echo "SimGrid: installed python3-simgrid, but $PY cannot import it" >&2; exit 1; }
echo "SimGrid: python3-simgrid $(dpkg-query -W -f='${Version}' python3-simgrid) for $PY"
