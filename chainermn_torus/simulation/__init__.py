"""Simulation of the communicators at scale (SimGrid): schedules as data, platforms, player.

``schedules`` needs nothing beyond the standard library; ``platforms`` and ``player`` import
SimGrid only in the process that plays a schedule (see ``simgrid_env``).
"""
