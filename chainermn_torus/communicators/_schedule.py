"""The schedules the communicators run, as data, with no MPI: shared by the communicators
(which send what they say) and the planner (which counts their rounds), so the cost model
cannot drift from what runs.
"""
__all__ = ['put_rounds', 'ceil_log2']


def put_rounds(M):
    """The put schedule for a row of M positions.

    Returns a list of rounds; each round is a list of (origin, target, first_chunk, end_chunk)
    meaning: origin puts chunks [first_chunk, end_chunk) into target's window.
    """
    low = 1 << (M.bit_length() - 1)  # M' = largest power of two <= M
    rounds = []
    if M > low:
        rounds.append([(e, e - low, e, e + 1) for e in range(low, M)])

    def held(q, width):
        # After doubling up to `width`, q holds its aligned group and the group's extras.
        g = q & ~(width - 1)
        ranges = [(g, g + width)]
        if g + low < M:
            ranges.append((g + low, min(g + width + low, M)))
        return ranges

    width = 1
    while width < low:
        rounds.append([(q, q ^ width, a, b) for q in range(low) for a, b in held(q, width)])
        width *= 2
    if M > low:
        last = []
        for e in range(low, M):
            last.append((e - low, e, 0, e))
            if e + 1 < M:
                last.append((e - low, e, e + 1, M))
        rounds.append(last)
    return rounds


def ceil_log2(p):
    """Steps of a doubling over p ranks (a barrier, a recursive doubling): ceil(log2 p)."""
    return (p - 1).bit_length() if p > 1 else 0
