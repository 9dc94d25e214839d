"""The communicator a check module runs on: a Dup of a test world's (tests/mpi_world.py calls
the module's check functions with it) or, when the module runs as a script, MPI.COMM_WORLD.

``bind, create = bound.binder(globals())`` gives a module ``bind(comm)``, which sets its
globals ``world``, ``P`` and ``RANK``, and ``create(name, **kwargs)``, which makes a
communicator on that ``world`` (never on MPI.COMM_WORLD behind the check's back)."""
import chainermn


def binder(module_globals):
    def bind(comm):
        module_globals.update(world=comm, P=comm.size, RANK=comm.rank)

    def create(name, **kwargs):
        return chainermn.create_communicator(name, mpi_comm=module_globals['world'], **kwargs)
    return bind, create
