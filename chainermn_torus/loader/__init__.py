"""Loader processes with core affinity, and the CPU topology they are placed by."""
from chainermn_torus.loader.iterator import LoaderError, LoaderIterator  # NOQA
from chainermn_torus.loader.placement import (  # NOQA
    POLICIES, Plan, apply_placement, describe_plan, plan_placement)
from chainermn_torus.loader.topology import Topology, format_cpulist, parse_cpulist  # NOQA
