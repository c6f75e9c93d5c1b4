import datetime
import sys
import time
import traceback

import torch.distributed as dist

rank = int(sys.argv[1])
ws = int(sys.argv[2])
addr = sys.argv[3]
t = float(sys.argv[4])
t0 = time.monotonic()
try:
    dist.init_process_group(
        backend="gloo",
        init_method=f"tcp://{addr}",
        rank=rank,
        world_size=ws,
        timeout=datetime.timedelta(seconds=t),
    )
    print("joined", flush=True)
    while True:
        obj = [None]
        dist.broadcast_object_list(obj, src=0)
        time.sleep(0.05)
except Exception:
    traceback.print_exc()
print(f"elapsed {time.monotonic() - t0:.2f}", flush=True)
