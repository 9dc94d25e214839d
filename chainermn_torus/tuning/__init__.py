"""Choosing a communicator configuration by measuring it on the job's own gradients.

``trials``: the schedule of calls (each candidate in turn, several rounds, the clearly slower
ones dropped) and the decision, taken from figures every rank holds alike. ``memory``: the
choice kept in a file per job shape, so the next job of that shape starts with it.
``lifecycle``: one ``auto`` communicator's choices, from the first call of each size to the
exit (the prediction: ``prediction``; the collective steps: ``job``). ``auto`` (one layer
up) makes the candidates and runs its calls on the communicator the choices give.
"""
