"""An evaluator's means over virtual ranks (``algorithms.virtual_ranks``).

ChainerMN's multi-node evaluator averages each rank's result over the ranks. Under virtual
ranks a process evaluates once for each virtual rank it holds, over that virtual rank's shard
of the evaluation data and with its persistent values (BatchNormalization's running
statistics) in the model, as a rank of a job of V ranks would. Every process then learns
every virtual rank's result, and the mean is summed in virtual-rank order on each, so the
reported values are the same bits on any number of processes (an all-reduce of floats over
P processes would group the V terms by P).
"""
import types

from chainermn_torus.errors import ConfigError
from chainermn_torus.runtime.chainer_glue import chainer_private

__all__ = ['evaluate_over_virtual_ranks']


def evaluate_over_virtual_ranks(evaluator, comm, iterators, states):
    """``evaluator`` (a Chainer Evaluator) made to evaluate over virtual ranks in place, as
    ChainerMN's ``create_multi_node_evaluator`` replaces its ``evaluate``: ``iterators``, one
    per virtual rank ``comm.held`` names, in order; ``states()``: the held virtual ranks'
    states (objects with ``load()``, the updater's), or None before the first step."""
    iterators = list(iterators)
    if len(iterators) != len(comm.held):
        raise ConfigError(f'chainermn_torus: rank {comm.rank} holds virtual ranks '
                          f'{list(comm.held)}, and was given {len(iterators)} evaluation '
                          'iterators')
    own = evaluator.evaluate   # Chainer's, over the iterator in 'main'
    held = list(comm.held)

    def evaluate(self):
        named = chainer_private.iterators(self)
        kept = named['main']
        loaded = states()
        results = []
        try:
            for j, iterator in enumerate(iterators):
                if loaded is not None:
                    loaded[j].load()
                named['main'] = iterator
                results.append((held[j], {k: float(v) for k, v in own().items()}))
        finally:
            named['main'] = kept
            if loaded is not None:
                loaded[0].load()   # the model is the first held virtual rank's again
        every = sorted((r for part in comm.mpi_comm.allgather(results) for r in part),
                       key=lambda r: r[0])
        keys = set(every[0][1])
        if any(set(r) != keys for _, r in every):
            raise ConfigError('chainermn_torus: the virtual ranks\' evaluations reported '
                              'different values: {}'.format(
                                  '; '.join(f'virtual rank {v}: {sorted(r)}' for v, r in every)))
        means = {}
        for key in sorted(keys):
            total = 0.0
            for _, r in every:   # virtual-rank order: the same sum on any P
                total += r[key]
            means[key] = total / len(every)
        return means

    evaluator.evaluate = types.MethodType(evaluate, evaluator)
    return evaluator
