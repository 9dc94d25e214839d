"""Multi-node optimizer wrapper, fused CPU update rules, FP environment, thread budget."""
from chainermn_torus.optimizers.fused import (  # NOQA
    FusedAdam, FusedMomentumSGD, FusedRMSprop, fuse, fusable_names, is_fused)
from chainermn_torus.optimizers.multi_node import (  # NOQA
    create_multi_node_optimizer, NonFiniteGradientError, check_finite_grads,
    check_finite_means)
