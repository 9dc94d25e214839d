"""Run by tests/launch/test_run.py: which options our communicators got (no --communicator)."""
import chainermn
import chainermn_torus  # NOQA

rsap = chainermn.create_communicator('rsap')
pure = chainermn.create_communicator('pure_allreduce')
wire = rsap.allreduce_grad_dtype
print(f'OK rank {rsap.rank} grid {rsap.grid.shape} '
      f'segment {rsap.segment_bytes} {pure.segment_bytes} '
      f'wire {None if wire is None else wire.name}', flush=True)
