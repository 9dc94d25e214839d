"""Files on a shared machine: written whole, made new at predictable names, never through
another user's link; /dev/shm's room and names; the sweep of dead writers' files."""
