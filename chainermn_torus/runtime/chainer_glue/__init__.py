"""Where the package meets Chainer and ChainerMN: importing Chainer, the private names read,
every patch to their objects (recorded, undoable)."""
