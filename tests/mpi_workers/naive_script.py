"""An unchanged ChainerMN-style script: asks for 'naive' and knows nothing of chainermn_torus."""
import sys

import chainermn

comm = chainermn.create_communicator('naive')
if len(sys.argv) > 1 and sys.argv[1] == 'raise':
    raise RuntimeError('the script failed on purpose')
print(f'OK rank {comm.rank} {type(comm).__name__} argv={sys.argv[1:]}', flush=True)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 0)
