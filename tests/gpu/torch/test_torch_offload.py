# SPDX-License-Identifier: Apache-2.0
"""Acceptance 4-5 of issue 6 on a GPU: sleep/wake of a Llama-style model's weights under dmm.

  4. offload("weights") raises the device's free memory (cuMemGetInfo) by >= 95 % of the weights'
     bytes; restore; greedy generation is identical; a CUDA graph captured before the offload replays
     with identical output after the restore; offload and restore bandwidth against a pinned copy of
     the same size measured in this run (printed, not asserted: a benchmark's number); discard frees a tag without copying.
  5. offload requested while a long kernel still reads the weights: the call returns at once (the
     kernel's end event is still pending: no synchronize), the unmap happens only after the kernel
     (dmm's decommit timestamp after the first moment the kernel's end event was seen complete; polls
     found the offload's event pending meanwhile), no illegal address, the kernel's result is right.

Prints every number. Exit 0 = all held, 1 = something did not, 77 = no torch/transformers/GPU.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import check, failures, mib, require_torch_gpu  # noqa: E402

require_torch_gpu(need_transformers=True)

import dmm.torch as dt  # noqa: E402

dt.enable()
import torch  # noqa: E402

from models import deterministic, generate, llama, prompt  # noqa: E402

deterministic()


def gbps(nbytes, seconds):
    return nbytes / seconds / 1e9


model, cfg, wbytes = llama(dt.tag("weights"))
info = dt.tag_info("weights")
print("weights: %s in %d tensors; tag: %s" % (mib(wbytes), len(list(model.parameters())), info), flush=True)
ids = prompt(cfg)
gen0 = generate(model, ids)

# ---- a CUDA graph that reads tagged weights (embedding -> layer-0 MLP -> norm -> lm_head) ----
static_ids = ids[:, :16].clone()


def subnet(x):
    h = model.model.embed_tokens(x)
    h = h + model.model.layers[0].mlp(h)
    return model.lm_head(model.model.norm(h))


side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side), torch.no_grad():
    for _ in range(3):
        subnet(static_ids)
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.no_grad(), dt.graph(g, reserve_bytes=512 << 20):
    static_out = subnet(static_ids)
g.replay()
torch.cuda.synchronize()
graph_ref = static_out.clone()
raw = dt.memory_stats_raw()
print("graph captured: capture id %s, %d allocations served from graph memory, graphs %s" % (
    getattr(g, "_dmm_capture_id", "?"), raw["capture_mallocs"], raw["graphs"]), flush=True)
check(raw["capture_mallocs"] > 0 and raw["capture_refusals"] == 0, "the capture was served from graph memory")

# ---- the reference: a pinned copy of the same size, both ways ----
buf = torch.empty(wbytes, dtype=torch.uint8, device="cuda")
host = torch.empty(wbytes, dtype=torch.uint8, pin_memory=True)


def timed(fn, reps=3):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out


d2h = [gbps(wbytes, t) for t in timed(lambda: host.copy_(buf, non_blocking=True))]
h2d = [gbps(wbytes, t) for t in timed(lambda: buf.copy_(host, non_blocking=True))]
print("pinned copy of %s: D2H %s GB/s, H2D %s GB/s" % (mib(wbytes), ["%.1f" % x for x in d2h],
                                                       ["%.1f" % x for x in h2d]), flush=True)
del buf, host
dt.empty_cache()

# ---- warm cycle (pins the host copies), then timed cycles ----
t0 = time.perf_counter()
dt.offload("weights")
dt.offload_wait("weights")
t_cold = time.perf_counter() - t0
dt.restore("weights")
torch.cuda.synchronize()
print("first offload (allocating %s of pinned memory): %.1f ms" % (mib(dt.tag_info("weights")["host_bytes"]),
                                                                    t_cold * 1e3), flush=True)
off_bw, res_bw, rises = [], [], []
for cycle in range(3):
    torch.cuda.synchronize()
    free0, total = torch.cuda.mem_get_info()
    t0 = time.perf_counter()
    dt.offload("weights")
    dt.offload_wait("weights")
    t1 = time.perf_counter()
    free1, _ = torch.cuda.mem_get_info()
    st = dt.tag_info("weights")
    t2 = time.perf_counter()
    dt.restore("weights")
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    free2, _ = torch.cuda.mem_get_info()
    rises.append(free1 - free0)
    off_bw.append(gbps(wbytes, t1 - t0))
    res_bw.append(gbps(wbytes, t3 - t2))
    print("cycle %d: offload %.2f ms (%.1f GB/s), free memory %s -> %s (+%s = %.1f %% of the weights), state %s, "
          "restore %.2f ms (%.1f GB/s), free after restore %s" % (
              cycle, (t1 - t0) * 1e3, off_bw[-1], mib(free0), mib(free1), mib(free1 - free0),
              100.0 * (free1 - free0) / wbytes, st["state"], (t3 - t2) * 1e3, res_bw[-1], mib(free2)), flush=True)
check(min(rises) >= 0.95 * wbytes, "free memory rose by >= 95 %% of the weights (min %.1f %%)" % (
    100.0 * min(rises) / wbytes))
ref_d2h, ref_h2d = max(d2h), max(h2d)
mo, mr = statistics.median(off_bw), statistics.median(res_bw)
# bandwidths are measured times: printed for the benchmarks' record (target >= 90 %), never asserted
print("offload bandwidth median %.1f GB/s = %.1f %% of pinned D2H %.1f GB/s; restore %.1f GB/s = %.1f %% of pinned "
      "H2D %.1f GB/s (not asserted)" % (mo, 100 * mo / ref_d2h, ref_d2h, mr, 100 * mr / ref_h2d, ref_h2d))

gen1 = generate(model, ids)
check(gen1 == gen0, "generation after 4 offload/restore cycles == before (4 x 64 tokens)")
g.replay()
torch.cuda.synchronize()
check(torch.equal(static_out, graph_ref), "the CUDA graph captured before the offloads replays identically")

# ---- 5: offload while a long kernel still reads the weights ----
W = model.lm_head.weight
x = torch.randn(256, W.shape[1], dtype=W.dtype, device="cuda", generator=torch.Generator("cuda").manual_seed(3))
ref = x @ W.t()
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
torch.cuda._sleep(int(6e8))  # ~0.3 s at ~1.98 GHz, then the product reads W
y = x @ W.t()
end.record()
t_call0 = dt.now_ns()
dt.offload("weights")
t_call1 = dt.now_ns()
pending_at_return = not end.query()
st = dt.tag_info("weights")
state_after = st["state"]
first_done_ns, last_running_ns, polls = None, None, 0
while True:
    q = end.query()
    tq = dt.now_ns()
    if q and first_done_ns is None:
        first_done_ns = tq
    if not q:
        last_running_ns = tq
    st = dt.tag_info("weights")  # polls the queue
    polls += 1
    if st["state"] == "offloaded":
        break
    time.sleep(0.0005)
torch.cuda.synchronize()  # raises if anything touched unmapped memory
kernel_ms = start.elapsed_time(end)
decommit_ns = st["last_decommit_ns"]
print("long kernel: %.1f ms on the GPU; offload() returned in %.3f ms with the kernel %s, state right after: %s; "
      "%d polls; the offload's event was found pending %d times; kernel seen done at +%.1f ms, decommit at +%.1f ms "
      "(after the offload call)" % (
          kernel_ms, (t_call1 - t_call0) / 1e6, "still running" if pending_at_return else "already done",
          state_after, polls, st["pending_polls"], ((first_done_ns or 0) - t_call0) / 1e6,
          (decommit_ns - t_call0) / 1e6), flush=True)
check(pending_at_return, "offload returned while the kernel reading the weights still ran (no synchronize)")
check(state_after == "offloading", "the weights stayed mapped while the kernel ran")
check(first_done_ns is not None and decommit_ns >= first_done_ns,
      "the unmap happened after the kernel was seen complete")
dt.restore("weights")
torch.cuda.synchronize()
check(torch.equal(y, ref), "the kernel read the right weights (no illegal address, result == reference)")

# ---- discard ----
with dt.tag("scratch"):
    scratch = torch.ones(256 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
free0, _ = torch.cuda.mem_get_info()
dt.offload("scratch", to="discard", wait=True)
free1, _ = torch.cuda.mem_get_info()
dt.restore("scratch")
scratch.fill_(2)
torch.cuda.synchronize()
check(free1 - free0 >= 0.95 * (256 << 20) and int(scratch[-1]) == 2 and dt.tag_info("scratch")["host_bytes"] == 0,
      "discard freed %s of a 256 MiB tag without a host copy; restored and writable" % mib(free1 - free0))
del scratch

# ---- graph memory asleep: the graph's own memory leaves the device and it replays after wake ----
torch.cuda.synchronize()
graph_bytes = dt.memory_stats_raw()["graphs"]["reserved_bytes"]
for to in ("host", "discard"):
    free0, _ = torch.cuda.mem_get_info()
    t0 = time.perf_counter()
    dt.graphs_sleep(to=to)
    t1 = time.perf_counter()
    free1, _ = torch.cuda.mem_get_info()
    asleep = dt.memory_stats_raw()["graphs"]["asleep_bytes"]
    dt.graphs_wake()
    t2 = time.perf_counter()
    g.replay()
    torch.cuda.synchronize()
    print("graph memory to %s: %s of graph memory, free memory +%s asleep; sleep %.1f ms, wake %.1f ms" % (
        to, mib(graph_bytes), mib(free1 - free0), (t1 - t0) * 1e3, (t2 - t1) * 1e3), flush=True)
    check(asleep == graph_bytes and free1 - free0 >= 0.95 * graph_bytes,
          "graphs_sleep(to=%r) frees the graph memory (%s of %s)" % (to, mib(free1 - free0), mib(graph_bytes)))
    check(torch.equal(static_out, graph_ref), "after graphs_wake (from %s) the graph replays identically, not "
          "captured again" % to)

# ---- a shared graph pool: graphs of three lengths, captured largest first, hold one reserve ----
before = dt.memory_stats_raw()["graphs"]["reserved_bytes"]
pooled = []
for n in (16, 8, 4):
    x = ids[:, :n].clone()
    gp = torch.cuda.CUDAGraph()
    with torch.no_grad(), dt.graph(gp, reserve_bytes=256 << 20, pool="lengths"):
        y = subnet(x)
    pooled.append((gp, x, y))
grew = dt.memory_stats_raw()["graphs"]["reserved_bytes"] - before
for gp, x, y in pooled:
    gp.replay()
    torch.cuda.synchronize()
    with torch.no_grad():
        check(torch.equal(y, subnet(x)), "a graph of the shared pool (%d tokens) replays as the eager subnet" % x.shape[1])
check(grew <= 256 << 20, "three captures of one shared pool hold one reserve (%s of graph memory added)" % mib(grew))
del pooled

raw = dt.memory_stats_raw()
print("stats: %s" % {k: raw[k] for k in ("allocated_bytes", "reserved_bytes", "physical_bytes", "host_bytes",
                                           "capture_mallocs", "tag_mallocs", "num_device_alloc", "num_device_free")})
print("RESULT offload: %d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
