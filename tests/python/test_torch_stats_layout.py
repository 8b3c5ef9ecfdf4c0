# SPDX-License-Identifier: Apache-2.0
"""dmm._torch_calls.nested (python/dmm/_torch_calls.py): dmm's stats in the layout of
torch._C._cuda_memoryStats, without torch.

The stats are the adapter's own JSON, written by unit/test_torch_snapshot over the host driver (pool
blocks on two streams, a tag with two blocks, a graph segment with one; sizes on both sides of 1 MiB)
to the file DMM_TORCH_SNAPSHOT_FIXTURE (a CTest fixture: that test runs first). What is proven: every
key torch.cuda.memory_summary() reads is there, as an integer; for allocation, allocated_bytes and
requested_bytes, all = large_pool + small_pool (current and totals) and small_pool holds exactly the
blocks of at most 1 MiB; the counts equal the blocks the snapshot lists; reserved = dmm's mapped
bytes; the flat keys are torch.cuda.memory_stats()'s; the dmm extras are numbers only.
Exit 0 = all held, 1 = a check failed, 77 = the fixture's path was not given (run it through CTest).
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

from dmm import _torch_calls as tc  # noqa: E402

from _checks import check, failures  # noqa: E402

path = os.environ.get("DMM_TORCH_SNAPSHOT_FIXTURE")
if not path or not os.path.exists(path):
    print("SKIP: DMM_TORCH_SNAPSHOT_FIXTURE names no file (run through CTest: unit/test_torch_snapshot writes it)")
    sys.exit(77)
with open(path) as f:
    raw = json.load(f)

n = tc.nested(raw)
flat = tc.flatten(n)

# what torch.cuda.memory_summary() indexes, with its exact key names
summary_keys = ["num_ooms", "num_alloc_retries"]
for metric in ("allocated_bytes", "active_bytes", "requested_bytes", "reserved_bytes", "inactive_split_bytes",
               "allocation", "active", "segment", "inactive_split"):
    for pool in ("all", "large_pool", "small_pool"):
        for f in ("current", "peak", "allocated", "freed"):
            summary_keys.append("%s.%s.%s" % (metric, pool, f))
for metric in ("oversize_allocations", "oversize_segments"):
    for f in ("current", "peak", "allocated", "freed"):
        summary_keys.append("%s.%s" % (metric, f))
missing = [k for k in summary_keys if k not in flat]
check(not missing, "every key memory_summary() reads is there (%d keys; missing %s)" % (len(summary_keys), missing[:5]))
check(all(isinstance(v, int) and not isinstance(v, bool) for v in flat.values()),
      "every value is an integer (%d values)" % len(flat))

blocks = [b[1] for b in raw["pool_blocks"]]
for tag in raw["tags"].values():
    for seg in tag.get("segment_list", []):
        blocks += [b[1] for b in seg["blocks"]]
for seg in raw["graphs"].get("segment_list", []):
    blocks += [b[1] for b in seg["blocks"]]
small = [b for b in blocks if b <= 1 << 20]
print("fixture: %d live blocks (%d of at most 1 MiB), %d bytes" % (len(blocks), len(small), sum(blocks)))
check(len(small) > 0 and len(small) < len(blocks), "the fixture has blocks on both sides of 1 MiB")
check(n["allocation"]["all"]["current"] == len(blocks), "allocation.all.current = the snapshot's blocks (%d, %d)"
      % (n["allocation"]["all"]["current"], len(blocks)))
check(n["allocated_bytes"]["all"]["current"] == sum(blocks), "allocated_bytes.all.current = their sizes")
check(n["allocation"]["small_pool"]["current"] == len(small) and
      n["allocated_bytes"]["small_pool"]["current"] == sum(small),
      "small_pool = exactly the blocks of at most 1 MiB (%d blocks, %d bytes)" % (len(small), sum(small)))
for metric in ("allocation", "allocated_bytes", "requested_bytes"):
    for f in ("current", "allocated", "freed"):
        a, l, s = (n[metric][p][f] for p in ("all", "large_pool", "small_pool"))
        check(a == l + s, "%s.all.%s = large_pool + small_pool (%d = %d + %d)" % (metric, f, a, l, s))
check(n["reserved_bytes"]["all"]["current"] == raw["reserved_bytes"]["current"] and
      n["reserved_bytes"]["small_pool"]["current"] == 0,
      "reserved_bytes.all.current = dmm's mapped bytes, all in large_pool")
check(n["active_bytes"] == n["allocated_bytes"], "active_bytes = allocated_bytes")
check(n["segment"]["all"]["current"] > 0, "segment.all.current counts dmm's chunks and segments (%d)"
      % n["segment"]["all"]["current"])
check("limit" not in flat or isinstance(flat.get("dmm.limit"), int), "dmm extras: numbers only")
check(all(k.startswith("dmm.") for k in flat if k not in summary_keys and k not in
          ("max_split_size", "num_device_alloc", "num_device_free", "num_sync_all_streams", "num_oom_rejections")),
      "every other key is one of torch's counters or a dmm. extra")

print("\n%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
