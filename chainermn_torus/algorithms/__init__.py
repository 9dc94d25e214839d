"""What each all-reduce algorithm does, with no MPI: the bottom layer of the package.

For one segment of the packed buffer, each algorithm family says once which MPI calls it
makes (group and bytes of each: its *schedule*) and what they cost in the alpha-beta model.
The communicators (``communicators/``) run those calls and are checked call for call
against the schedules (tests/simulation/test_schedules_mpi.py); the planner, the
simulator, ``auto``, the benchmark rows and the tests read the variants table here
(docs/development.md, "Adding an algorithm"). Nothing here imports mpi4py, so login nodes
and the job-script generator can read it.
"""
