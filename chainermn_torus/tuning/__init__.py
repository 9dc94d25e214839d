"""Choosing a communicator configuration by measuring it on the job's own gradients.

``trials``: the schedule of calls (each candidate in turn, several rounds, the clearly slower
ones dropped) and the decision, taken from figures every rank holds alike. ``memory``: the
choice kept in a file per job shape, so the next job of that shape starts with it.
``auto`` (one layer up) makes the candidates and runs the calls.
"""
