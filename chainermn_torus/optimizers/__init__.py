"""Multi-node optimizer wrapper, fused CPU update rules, FP environment, thread budget."""
from chainermn_torus.optimizers.finite_checks import (  # NOQA
    NonFiniteGradientError, check_finite_grads, check_finite_means)
from chainermn_torus.optimizers.fused import (  # NOQA
    FusedAdam, FusedMomentumSGD, FusedRMSprop, fuse, fusable_names, is_fused, unfuse)
from chainermn_torus.optimizers.multi_node import MultiNodeOptimizer, is_multi_node  # NOQA
