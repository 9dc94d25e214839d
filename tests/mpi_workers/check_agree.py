"""Run by tests/runtime/test_agree.py: with a problem on some ranks, every rank raises the same
error naming all of them; with none, no rank raises."""
from chainermn_torus.runtime import agree


def check(comm, faulty):
    mine = f'disk full on rank {comm.rank}' if comm.rank in faulty else None
    try:
        agree.raise_everywhere(comm, mine, lambda bad: RuntimeError('rank(s) {}: {}'.format(
            agree.ranks_text(bad), '; '.join(p for _, p in bad))))
    except RuntimeError as e:
        return str(e)
    return None
