# SPDX-License-Identifier: Apache-2.0
"""Acceptance 6 of issue 6 on a GPU, and the failure paths, under dmm:

  - memory_stats() and snapshot() agree with the pool's own counters and with the tensors alive
    (allocated = sum of their 512-rounded sizes); max_memory_allocated / reset_peak_memory_stats;
  - empty_cache() lowers the pool's committed bytes exactly to the chunks that live blocks touch, and
    with one live block per stream to at most live + one chunk per stream (the main process runs with
    one granule per handle, DMM_TORCH_HANDLES=0, so that the chunks a block touches follow from its
    address: the default's larger handles are whole chunks that only the pool knows the bounds of);
  - a budget (enable(limit=...)) refuses with a Python RuntimeError carrying dmm's sentence, and the
    process allocates again once memory is freed (in a child process: a refusal must not kill it);
  - a CUDA graph capture with no graph memory reserved fails with a sentence naming the remedy,
    without mapping anything, and the process keeps working (child process);
  - warm_start(path): a first run commits nothing and writes its physical peak and layout to the
    profile at exit; the next run commits that layout ahead (no more than the last run's peak) before
    its first allocation, which then takes those handles and creates none (two child processes).

Prints every number. Exit 0 = all held, 1 = something did not, 77 = no torch/GPU.
"""

import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import check, failures, mib, require_torch_gpu, worker_env  # noqa: E402

require_torch_gpu()


CHILD_LIMIT = r"""
import dmm.torch as dt, torch
dt.enable(limit=1 << 30)
a = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
try:
    b = torch.empty(768 << 20, dtype=torch.uint8, device="cuda")
    print("NO-ERROR: a 768 MiB tensor was allocated beyond a 1 GiB limit")
except RuntimeError as e:
    print("RAISED: %s" % str(e).splitlines()[0][:600])
print("LAST_ERROR: %s" % dt.last_error()[:400])
del a
b = torch.empty(768 << 20, dtype=torch.uint8, device="cuda")
b.fill_(1); torch.cuda.synchronize()
s = dt.memory_stats()
print("AFTER: ok, num_ooms=%d num_alloc_retries=%d limit=%s" % (s["num_ooms"], s["num_alloc_retries"], s["dmm.limit"]))
"""

CHILD_CAPTURE = r"""
import dmm.torch as dt, torch
dt.enable()
x = torch.ones(1 << 20, device="cuda")
y = x * 2; torch.cuda.synchronize()
free0 = torch.cuda.mem_get_info()[0]
g = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g):
        z = x * 3 + 1
    print("NO-ERROR: the capture allocated with no graph memory reserved")
except Exception as e:
    print("RAISED: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:600]))
print("LAST_ERROR: %s" % dt.last_error()[:600])
s = dt.memory_stats()
print("REFUSALS: %d, graph reserved bytes %d" % (s["dmm.capture_refusals"], s["dmm.graphs.reserved_bytes"]))
w = x * 5; torch.cuda.synchronize()
print("AFTER: ok %s" % (float(w[0]) == 5.0))
"""


CHILD_WARM = r"""
import sys, dmm.torch as dt, torch
dt.enable()
torch.empty(1, device="cuda")  # the device's context, before the warm start as after a model load
committed = dt.warm_start(sys.argv[1])
creates = lambda: dt.memory_stats_raw()["pool"]["driver_create"]
c0 = creates()
a = torch.empty(300 << 20, dtype=torch.uint8, device="cuda")
a.fill_(1); torch.cuda.synchronize()
print("WARM: committed %d, creates by the allocation %d, physical peak %d" % (
    committed, creates() - c0, dt.memory_stats_raw()["physical_bytes"]["peak"]))
"""


def child(code, name, *args):
    env = worker_env("dmm")
    env.pop("DMM_TORCH_HANDLES", None)  # the children run the default handles
    out = subprocess.run([sys.executable, "-c", code] + list(args), capture_output=True, text=True, env=env,
                         timeout=300)
    print("--- child '%s' (rc %d):\n%s%s" % (name, out.returncode, out.stdout, out.stderr[-1500:]), flush=True)
    return out


import dmm.torch as dt  # noqa: E402

os.environ["DMM_TORCH_HANDLES"] = "0"  # one granule per handle (read when the device is first used)
dt.enable()
import torch  # noqa: E402

rng = random.Random(5)
s0 = dt.memory_stats()
check(s0["allocated_bytes.all.current"] == 0, "nothing allocated at the start")
streams = [torch.cuda.current_stream(), torch.cuda.Stream()]
live = []
for i in range(400):
    n = rng.choice([rng.randint(1, 4096), rng.randint(4096, 1 << 20), rng.randint(1 << 20, 8 << 20)])
    with torch.cuda.stream(streams[i % 2]):
        live.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
with dt.tag("weights"):
    w = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
expect = sum((t.numel() + 511) // 512 * 512 for t in live) + (w.numel() + 511) // 512 * 512
stats, raw, snap = dt.memory_stats(), dt.memory_stats_raw(), dt.snapshot()
pool_live = raw["pool"]["allocated_bytes"]["current"] if isinstance(raw["pool"], dict) else None
print("allocated %d (tensors: %d); pool %s + tags %d + graphs %d; reserved %s; physical %s; blocks %d" % (
    stats["allocated_bytes.all.current"], expect, pool_live, raw["tag_live_bytes"], raw["graph_live_bytes"],
    mib(stats["reserved_bytes.all.current"]), mib(stats["dmm.physical_bytes.current"]),
    stats["allocation.all.current"]))
check(stats["allocated_bytes.all.current"] == expect, "allocated_bytes == the tensors' rounded sizes")
check(stats["allocated_bytes.all.current"] == pool_live + raw["tag_live_bytes"] + raw["graph_live_bytes"],
      "allocated_bytes == the pool's own allocated + tags + graphs")
check(stats["allocation.all.current"] == len(live) + 1 == raw["pool"]["allocations"]["current"] + 1,
      "allocation count == tensors == the pool's live blocks + 1 tagged")
check(raw["pool_committed_bytes"] == raw["pool"]["committed_bytes"]["current"], "committed == the pool's own")
check(stats["reserved_bytes.all.current"] == raw["pool_committed_bytes"] + raw["tag_committed_bytes"] +
      raw["graph_committed_bytes"], "reserved_bytes == pool + tag + graph committed")
check(snap["allocated_bytes"] == raw["allocated_bytes"] and snap["reserved_bytes"] == raw["reserved_bytes"],
      "snapshot() agrees with memory_stats()")
blocks = [b for seg in snap["tags"]["weights"]["segment_list"] for b in seg["blocks"]]
check(blocks == [[w.data_ptr(), 3 << 20, 3 << 20]], "the snapshot lists the tagged block at its address")
check(len(json.dumps(snap)) > 0, "snapshot() is JSON-able (%d bytes)" % len(json.dumps(snap)))
peak = dt.max_memory_allocated()
del live[::2]
dt.reset_peak_memory_stats()
check(dt.max_memory_allocated() == dt.memory_allocated() < peak, "reset_peak_memory_stats lowers the peak to current")

# empty_cache: exactly the chunks that live blocks touch
torch.cuda.synchronize()
rng.shuffle(live)
del live[: len(live) * 3 // 4]
before = dt.memory_stats_raw()["pool_committed_bytes"]
released = dt.empty_cache()
raw = dt.memory_stats_raw()
C = raw["granule"]
touched = set()
for t in live:
    p, n = t.data_ptr(), (t.numel() + 511) // 512 * 512
    touched.update(range(p // C, (p + n - 1) // C + 1))
print("empty_cache: pool committed %s -> %s (released %s); live %s in %d blocks touching %d chunks of %s" % (
    mib(before), mib(raw["pool_committed_bytes"]), mib(released), mib(raw["pool_live_bytes"]), len(live),
    len(touched), mib(C)))
check(raw["pool_committed_bytes"] == len(touched) * C, "after empty_cache the pool holds exactly the chunks live "
      "blocks touch")
live = [live[0]]
with torch.cuda.stream(streams[1]):
    live.append(torch.empty(1000, dtype=torch.uint8, device="cuda"))
torch.cuda.synchronize()
dt.empty_cache()
raw = dt.memory_stats_raw()
heaps = raw["pool"]["heaps"]["current"]
bound = raw["pool_live_bytes"] + len(streams) * C
print("one live block per stream: pool committed %s, live %s, heaps %d, bound live + one chunk per stream %s" % (
    mib(raw["pool_committed_bytes"]), mib(raw["pool_live_bytes"]), heaps, mib(bound)))
check(raw["pool_committed_bytes"] <= bound, "empty_cache: committed <= live + one chunk per stream")
del live, w, t
dt.empty_cache()
raw = dt.memory_stats_raw()
print("all freed: allocated %d, pool committed %d, tag committed %d, reserved %d, physical %d, queued %d" % (
    raw["allocated_bytes"]["current"], raw["pool_committed_bytes"], raw["tag_committed_bytes"],
    raw["reserved_bytes"]["current"], raw["physical_bytes"]["current"], raw["queued"]))
check(raw["allocated_bytes"]["current"] == 0 and raw["pool_committed_bytes"] == 0, "all freed: nothing left")

# failure paths, each in a child process
out = child(CHILD_LIMIT, "limit")
check(out.returncode == 0 and "RAISED:" in out.stdout and "AFTER: ok" in out.stdout,
      "a request beyond the budget raises RuntimeError, and the process allocates again after a free")
out = child(CHILD_CAPTURE, "capture without graph memory")
check(out.returncode == 0 and "reserve_graph_memory" in out.stdout and "AFTER: ok True" in out.stdout,
      "a capture with no graph memory fails with the remedy, and the process keeps working")

with tempfile.TemporaryDirectory() as tmp:
    prof = os.path.join(tmp, "warm.profile")
    first = child(CHILD_WARM, "warm start, first run", prof)
    second = child(CHILD_WARM, "warm start, next run", prof)

    def warm_line(out):
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("WARM: ")), None)
        return [int(w) for w in line.replace(",", " ").split() if w.isdigit()] if line else None

    w1, w2 = warm_line(first), warm_line(second)
    check(w1 is not None and w1[0] == 0 and w1[1] > 0, "warm_start: a first run commits nothing and grows (%s)" % w1)
    check(w2 is not None and w1 is not None and 0 < w2[0] <= w1[2] and w2[1] == 0,
          "warm_start: the next run commits the last run's layout up front (at most its peak), and its allocation "
          "creates no handle "
          "(%s)" % w2)

print("RESULT stats: %d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
