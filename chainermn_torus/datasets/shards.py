"""What a batch size needs of a data set split among ranks: each rank's shard must hold a
batch. A batch larger than the shard makes Chainer's iterators repeat the shard within one
batch: ``--batchsize 100000000`` on MNIST built a batch of 10^8 images from 30,000 and ran
until the machine ran out of memory."""

__all__ = ['batch_too_large']


def batch_too_large(total, batch, ranks, what='training images', option='--batchsize',
                    limit=None):
    """The refusal for a per-rank ``batch`` of ``total`` examples over ``ranks`` ranks (each
    gets ``total // ranks``), or None where it fits."""
    shard = total // ranks
    if batch <= shard:
        return None
    return '{} {} is more than the {} {} each of the {} rank(s) gets ({} in all{}): at most ' \
        '{}'.format(option, batch, shard, what, ranks, total,
                    f', --limit {limit}' if limit else '', shard)
