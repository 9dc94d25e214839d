"""Additions to a Chainer/ChainerMN training loop, in ChainerMN's sense of the word:
multi-node checkpoints (``checkpoint``), the replica check (``replicas``), and the time
spent in gradient communication (``timing``)."""
