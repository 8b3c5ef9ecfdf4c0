# SPDX-License-Identifier: Apache-2.0
"""Issue 13's acceptance 1-4 on a GPU: a user switches to dmm and loses nothing.

  1. torch's own calls: a training loop that calls torch.cuda.memory_stats(), memory_summary(),
     max_memory_allocated(), empty_cache() and reset_peak_memory_stats() every step runs unchanged
     under dmm.torch.enable(); its losses, its requested bytes and its allocation counts equal those
     of the same loop under torch's native allocator step by step; reserved = the memory dmm has
     mapped; _record_memory_history + _dump_snapshot write a file torch's _memory_viz reads, with
     segment totals = reserved; set_per_process_memory_fraction sets dmm's limit and mem_get_info
     respects it;
  2. `except torch.cuda.OutOfMemoryError` catches a budget refusal (when libdmm_torch.so was built
     against torch's headers; otherwise a RuntimeError, reported), and a later allocation under a
     raised limit succeeds;
  3. after CUDA is initialised and a model is loaded with torch's allocator, a dmm region holds the
     KV cache; offload frees >= 95 % of the region's bytes (the driver's free memory says so) and
     restore brings them back bit-identical, while torch's own memory is untouched;
  4. the vLLM (dmm.compat.vllm.CuMemAllocator) and torch_memory_saver (dmm.compat.torch_memory_saver)
     drop-ins: weights and KV cache tagged, a CUDA graph captured, sleep/pause while a long kernel
     still reads the weights (and while another stream is busy: no device synchronize), wake/resume,
     the same tokens and a bit-identical graph replay;
  5. Tensor.record_stream: a tensor used on a side stream and freed on its own is not handed out
     again before the side stream's work.

Each part runs in its own process (a fresh CUDA context). Prints every number; exit 0 = all held,
1 = something did not, 77 = no torch/GPU.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import check, emit, failures, mib, require_torch_gpu, result_of, worker_env  # noqa: E402

require_torch_gpu()


def child(code, *args, alloc="native"):
    p = subprocess.run([sys.executable, "-c", code] + [str(a) for a in args], env=worker_env(alloc),
                       capture_output=True, text=True, timeout=600)
    tail = (p.stdout + p.stderr)[-3000:]
    res = result_of(p.stdout)
    if p.returncode != 0 or res is None:
        print(tail)
        return None
    for line in p.stdout.splitlines():
        if not line.startswith("RESULT "):
            print("  | " + line)
    return res


PRELUDE = r"""
import json, os, sys, torch
sys.path.insert(0, %r)
from _common import emit
""" % os.path.dirname(os.path.abspath(__file__))

# ---- 1. torch's own calls, native vs dmm ----
TRAIN = PRELUDE + r"""
mode = sys.argv[1]
import dmm.torch as dt
installed = []
if mode == "dmm":
    dt.enable()
    from dmm import _torch_calls
    installed = list(_torch_calls._installed)
torch.manual_seed(0)
dev = "cuda"
model = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True),
                                    num_layers=4).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(16, 128, 256, device=dev)
target = torch.randn(16, 128, 256, device=dev)
steps = []
torch.cuda.memory._record_memory_history(max_entries=20000)
for step in range(6):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), target)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    s = torch.cuda.memory_stats()
    summary = torch.cuda.memory_summary()
    steps.append({"loss": loss.item(), "requested": s["requested_bytes.all.current"],
                  "allocations": s["allocation.all.current"], "allocated": s["allocated_bytes.all.current"],
                  "small_allocations": s["allocation.small_pool.current"],
                  "max_allocated": torch.cuda.max_memory_allocated(), "reserved": torch.cuda.memory_reserved(),
                  "summary_lines": len(summary.splitlines()), "num_ooms": s["num_ooms"]})
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
out = {"steps": steps, "installed": installed, "keys": len(torch.cuda.memory_stats())}
acc = getattr(torch, "accelerator", None)
if acc is not None and hasattr(acc, "memory_allocated"):  # torch >= 2.9
    keep = torch.empty(1 << 20, device=dev)
    torch.cuda.synchronize()
    out["accelerator"] = {"allocated": acc.memory_allocated() == torch.cuda.memory_allocated() > 0,
                          "reserved": acc.memory_reserved() == torch.cuda.memory_reserved() > 0,
                          "stats": acc.memory_stats().get("allocation.all.current")
                          == torch.cuda.memory_stats()["allocation.all.current"]}
    del keep
path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "dmm_compat_%s_%d.pickle" % (mode, os.getpid()))
torch.cuda.memory._dump_snapshot(path)
import pickle
from torch.cuda import _memory_viz
with open(path, "rb") as f:
    snap = pickle.load(f)
os.unlink(path)
out["segsum_lines"] = len(_memory_viz.segsum(snap).splitlines())
out["snapshot_total"] = sum(seg["total_size"] for seg in snap["segments"])
out["snapshot_traces"] = sum(len(t) for t in snap.get("device_traces", []))
out["reserved_now"] = torch.cuda.memory_reserved()
if mode == "dmm":
    raw = dt.memory_stats_raw()
    out["dmm_mapped"] = raw["reserved_bytes"]["current"]
    torch.cuda.set_per_process_memory_fraction(0.25)
    total = torch.cuda.get_device_properties(0).total_memory
    raw = dt.memory_stats_raw()
    out["limit"] = raw["limit"]
    out["limit_wanted"] = int(0.25 * total)
    out["fraction"] = torch.cuda.get_per_process_memory_fraction()
    out["free_reported"] = torch.cuda.mem_get_info()[0]
    out["free_bound"] = raw["limit"] - raw["physical_bytes"]["current"]
emit(out)
"""

print("== 1. torch's own memory calls under dmm (a training loop, native vs dmm)")
nat = child(TRAIN, "native")
dm = child(TRAIN, "dmm", alloc="dmm")
if nat is None or dm is None:
    check(False, "the training loops ran (native %s, dmm %s)" % (nat is not None, dm is not None))
else:
    print("  dmm replaced: %s" % ", ".join(dm["installed"]))
    for a, b in zip(nat["steps"], dm["steps"]):
        print("  step: loss %.6f / %.6f  requested %d / %d  allocations %d / %d  allocated %s / %s  max %s / %s  "
              "reserved %s / %s" % (a["loss"], b["loss"], a["requested"], b["requested"], a["allocations"],
                                   b["allocations"], mib(a["allocated"]), mib(b["allocated"]),
                                   mib(a["max_allocated"]), mib(b["max_allocated"]), mib(a["reserved"]),
                                   mib(b["reserved"])))
    check([s["loss"] for s in nat["steps"]] == [s["loss"] for s in dm["steps"]], "losses bit-identical to native")
    if "accelerator" in dm:
        check(all(dm["accelerator"].values()), "torch.accelerator's memory calls answer from dmm as torch.cuda's "
                                               "do: %s" % dm["accelerator"])
    else:
        print("  (this torch has no torch.accelerator memory calls)")
    check([s["requested"] for s in nat["steps"]] == [s["requested"] for s in dm["steps"]],
          "requested_bytes.all.current equals native's at every step")
    check([s["allocations"] for s in nat["steps"]] == [s["allocations"] for s in dm["steps"]] and
          [s["small_allocations"] for s in nat["steps"]] == [s["small_allocations"] for s in dm["steps"]],
          "allocation.all / .small_pool current equal native's at every step")
    print("  allocated_bytes.all.current equal to native's at every step: %s" %
          all(a["allocated"] == b["allocated"] for a, b in zip(nat["steps"], dm["steps"])))
    check(all(b["allocated"] <= a["allocated"] for a, b in zip(nat["steps"], dm["steps"])),
          "allocated_bytes under dmm (exact 512-rounded sizes) <= native's (which adds unsplit remainders)")
    check(all(s["summary_lines"] > 20 for s in dm["steps"]), "memory_summary() prints its table under dmm")
    check(dm["reserved_now"] == dm["dmm_mapped"], "torch.cuda.memory_reserved() == dmm's mapped bytes (%s)"
          % mib(dm["dmm_mapped"]))
    check(dm["segsum_lines"] > 0 and dm["snapshot_total"] == dm["reserved_now"],
          "_dump_snapshot -> _memory_viz.segsum reads it; segment total %s == reserved %s"
          % (mib(dm["snapshot_total"]), mib(dm["reserved_now"])))
    check(dm["snapshot_traces"] > 0, "_record_memory_history recorded %d events" % dm["snapshot_traces"])
    check(dm["limit"] == dm["limit_wanted"] and abs(dm["fraction"] - 0.25) < 1e-9,
          "set_per_process_memory_fraction(0.25) -> dmm limit %s" % mib(dm["limit"] or 0))
    check(dm["free_reported"] <= dm["free_bound"], "mem_get_info's free (%s) <= limit - physical (%s)"
          % (mib(dm["free_reported"]), mib(dm["free_bound"])))

# ---- 2. OutOfMemoryError ----
OOM = PRELUDE + r"""
import dmm.torch as dt
dt.enable(limit=1 << 30)
a = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
seen = []
torch._C._cuda_attach_out_of_memory_observer(lambda *args: seen.append(args))  # as users attach one
caught = "none"
try:
    b = torch.empty(768 << 20, dtype=torch.uint8, device="cuda")
except torch.cuda.OutOfMemoryError as e:
    caught = "OutOfMemoryError: " + str(e).splitlines()[0][:3000]
except RuntimeError as e:
    caught = "RuntimeError: " + str(e).splitlines()[0][:300]
dt.set_limit(2 << 30)
b = torch.empty(768 << 20, dtype=torch.uint8, device="cuda")
b.fill_(3); torch.cuda.synchronize()
emit({"caught": caught, "after": int(b[-1].item()), "num_ooms": torch.cuda.memory_stats()["num_ooms"],
      "observed": [list(x) for x in seen]})
"""
print("== 2. a budget refusal is torch.cuda.OutOfMemoryError")
r = child(OOM, alloc="dmm")
if r is None:
    check(False, "the OOM child ran")
else:
    print("  caught: %s" % r["caught"])
    check(r["caught"].startswith("OutOfMemoryError: ") and "dmm" in r["caught"] and "limit" in r["caught"],
          "except torch.cuda.OutOfMemoryError caught the refusal, with dmm's sentence (the budget's limit named: "
          "kept across the out-of-memory observer)")
    check(r["after"] == 3 and r["num_ooms"] >= 1, "the process went on: 768 MiB under a raised limit, num_ooms %d"
          % r["num_ooms"])
    obs = r["observed"]
    check(len(obs) == 1 and obs[0][0] == 0 and obs[0][1] >= 768 << 20 and obs[0][2] == 1 << 30,
          "the out-of-memory observer saw the refusal once: (device, bytes, the 1 GiB limit, free) = %s" % obs)

# ---- 3. a dmm region after CUDA init ----
REGION = PRELUDE + r"""
import dmm.torch as dt
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).cuda()   # torch's allocator
x = torch.randn(64, 2048, device="cuda")
ref_out = model(x)
torch.cuda.synchronize()
native_before = torch.cuda.memory_allocated()
with dt.region("kv_cache"):
    kv = [torch.randn(64 << 20 >> 2, device="cuda") for _ in range(16)]       # 16 x 64 MiB
kv_copy = [t.cpu() for t in kv]
torch.cuda.synchronize()
native_with_kv = torch.cuda.memory_allocated()
info = dt.tag_info("kv_cache")
free0 = torch.cuda.mem_get_info()[0]
dt.offload("kv_cache", wait=True)
free1 = torch.cuda.mem_get_info()[0]
out_asleep = model(x)
model_same = bool(torch.equal(out_asleep, ref_out))
del out_asleep
dt.restore("kv_cache")
torch.cuda.synchronize()
same = all(torch.equal(a.cpu(), b) for a, b in zip(kv, kv_copy))
emit({"committed": info["committed_bytes"], "kv_bytes": sum(t.nbytes for t in kv), "freed": free1 - free0,
      "same": same, "native_before": native_before, "native_with_kv": native_with_kv,
      "native_after": torch.cuda.memory_allocated(), "model_same": model_same})
"""
print("== 3. a dmm region after CUDA is initialised (model on torch's allocator, KV cache in dmm)")
r = child(REGION)
if r is None:
    check(False, "the region child ran")
else:
    print("  region %s committed for %s of tensors; offload freed %s on the device" % (
        mib(r["committed"]), mib(r["kv_bytes"]), mib(r["freed"])))
    check(r["freed"] >= 0.95 * r["committed"], "offload freed >= 95 %% of the region (%.1f %%)"
          % (100.0 * r["freed"] / max(1, r["committed"])))
    check(r["same"], "restore brought the KV cache back bit-identical")
    check(r["native_after"] == r["native_with_kv"],
          "torch's own memory untouched (allocated %d bytes before offload, %d after restore)"
          % (r["native_with_kv"], r["native_after"]))
    check(r["model_same"], "the model (on torch's allocator) computes the same while the region sleeps")

# ---- 4. the drop-ins ----
LM = PRELUDE + r"""
flavour = sys.argv[1]
V, D, L, T = 1024, 2048, 8, 64

class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(D, D) for _ in range(L))
        self.head = torch.nn.Linear(D, V)

    def forward(self, h):
        for l in self.layers:
            h = torch.tanh(l(h))
        return h

def generate(model, kv, prompt, n):
    tok = torch.tensor([prompt], device="cuda")
    out = []
    for t in range(n):
        h = model(model.emb(tok))
        kv[t] = h[0]
        logits = model.head(h + kv[: t + 1].mean(0, keepdim=True))
        tok = logits.argmax(-1)
        out.append(int(tok.item()))
    return out

torch.manual_seed(0)
if flavour == "vllm":
    from dmm.compat.vllm import CuMemAllocator
    alloc = CuMemAllocator.get_instance()
    weights_ctx, kv_ctx = alloc.use_memory_pool(tag="weights"), alloc.use_memory_pool(tag="kv_cache")
else:
    from dmm.compat.torch_memory_saver import torch_memory_saver as tms
    weights_ctx = tms.region(tag="weights", enable_cpu_backup=True)
    kv_ctx = tms.region(tag="kv_cache")
with weights_ctx:
    model = TinyLM().cuda()
with kv_ctx:
    kv = torch.zeros(T, D, device="cuda")
before = generate(model, kv, 7, 32)

static_x = torch.randn(8, D, device="cuda")
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    model(static_x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
if flavour == "vllm":
    with torch.cuda.graph(g):
        static_y = model.head(model(static_x))
else:
    with tms.cuda_graph(g):
        static_y = model.head(model(static_x))
g.replay(); torch.cuda.synchronize()
graph_before = static_y.clone()
eager_ref = model.head(model(static_x))
torch.cuda.synchronize()

# a long kernel still reads the weights when sleep is called; another stream is busy for longer
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    torch.cuda._sleep(6_000_000_000)
torch.cuda._sleep(1_500_000_000)
late = model.head(model(static_x))
w0 = model.layers[0].weight.detach().clone()  # (before free0: this 16 MiB copy is the pool's, not the tags')
free0 = torch.cuda.mem_get_info()[0]
backup = {}
if flavour == "vllm":
    usage = alloc.get_current_usage()
    alloc.sleep(offload_tags=("weights",))
else:
    import dmm.torch as dt
    usage = sum(t["committed_bytes"] for t in dt.memory_stats_raw()["tags"].values())
    tms.pause()
    cb = tms.get_cpu_backup(model.layers[0].weight)
    view = tms.get_cpu_backup(model.layers[0].weight, zero_copy=True)
    backup = {"copy_same": cb is not None and cb.device.type == "cpu" and bool(torch.equal(cb, w0.cpu())),
              "view_same": view is not None and bool(torch.equal(view, w0.cpu())),
              "kv_none": tms.get_cpu_backup(kv) is None}
    del view
    from dmm.compat.torch_memory_saver import configure_subprocess
    import dmm._lib
    with configure_subprocess():
        backup["child_lib"] = os.environ.get("DMM_LIB") == dmm._lib.library_path()
side_busy = not side.query()
free1 = torch.cuda.mem_get_info()[0]
torch.cuda.synchronize()
import dmm.torch as dt
waiting = dt.poll()  # the unmaps that waited for the queued kernels (released only once they are done)
free2 = torch.cuda.mem_get_info()[0]
late_ok = bool(torch.equal(late, eager_ref))
if flavour == "vllm":
    alloc.wake_up()
else:
    tms.resume()
after = generate(model, kv, 7, 32)
g.replay(); torch.cuda.synchronize()
backup["after_resume_none"] = flavour == "vllm" or tms.get_cpu_backup(model.layers[0].weight) is None
emit({"before": before, "after": after, "graph_same": bool(torch.equal(static_y, graph_before)),
      "late_ok": late_ok, "side_busy": side_busy, "usage": usage, "freed_at_return": free1 - free0,
      "freed": free2 - free0, "waiting": waiting, "backup": backup})
"""
for flavour in ("vllm", "torch_memory_saver"):
    print("== 4. the %s drop-in" % flavour)
    r = child(LM, flavour)
    if r is None:
        check(False, "the %s child ran" % flavour)
        continue
    print("  tokens before %s\n  tokens after  %s" % (r["before"][:16], r["after"][:16]))
    print("  usage %s, sleep freed %s when it returned (kernels still queued), %s once they finished "
          "(%d unmaps still waiting)" % (mib(r["usage"]), mib(r["freed_at_return"]), mib(r["freed"]), r["waiting"]))
    check(r["before"] == r["after"], "%s: generation after wake equals generation before" % flavour)
    check(r["graph_same"], "%s: the CUDA graph's replay after wake is bit-identical" % flavour)
    check(r["late_ok"], "%s: a kernel queued before sleep read the weights intact" % flavour)
    check(r["side_busy"], "%s: sleep returned while another stream was still busy (no device synchronize)" % flavour)
    check(r["freed"] >= 0.95 * r["usage"], "%s: sleep freed >= 95 %% of the tagged memory once the kernels "
          "queued before it finished (%.1f %%)"
          % (flavour, 100.0 * r["freed"] / max(1, r["usage"])))
    if flavour == "torch_memory_saver":
        b = r["backup"]
        check(b["copy_same"] and b["view_same"], "get_cpu_backup of a paused weight (copy and zero_copy) holds its "
                                                 "contents: %s" % b)
        check(b["kv_none"] and b["after_resume_none"], "get_cpu_backup is None without a backup and after resume")
        check(b["child_lib"], "configure_subprocess points children at this process's libdmm_torch.so")

# ---- 4b. the vLLM drop-in's tag calls: discard, the selective wake, usage, reuse, release_pools ----
VLLM_TAGS = PRELUDE + r"""
import logging
from dmm.compat.vllm import CuMemAllocator
alloc = CuMemAllocator.get_instance()
n = 32 << 20
with alloc.use_memory_pool(tag="weights"):
    w = torch.full((n,), 1.0, device="cuda")
with alloc.use_memory_pool(tag="kv_cache"):
    kv = torch.full((n,), 2.0, device="cuda")
with alloc.use_memory_pool(tag="scratch"):
    sc = torch.full((n,), 3.0, device="cuda")
with alloc.reuse_memory_pool("weights"):
    w2 = torch.full((n,), 4.0, device="cuda")
torch.cuda.synchronize()
out = {"usage_awake": alloc.get_current_usage()}
try:
    with alloc.reuse_memory_pool("never-used"):
        pass
    out["reuse_unknown"] = "no error"
except ValueError as e:
    out["reuse_unknown"] = "ValueError: %s" % e

# discard one tag: the others stay mapped and usable
alloc.discard("kv_cache")
out["usage_after_discard"] = alloc.get_current_usage()
out["weights_usable"] = bool((w == 1.0).all().item() and (w2 == 4.0).all().item())
out["scratch_usable"] = bool((sc == 3.0).all().item())

# sleep keeps weights; wake_up(["weights"]) wakes weights and scratch (not deferrable), not kv_cache
warned = []
handler = logging.Handler()
handler.emit = lambda record: warned.append(record.getMessage())
logging.getLogger("dmm").addHandler(handler)
alloc.sleep(offload_tags=("weights", "kv_cache"))   # kv_cache is asleep already (discarded): kept, said
out["warned"] = warned[:]
out["usage_asleep"] = alloc.get_current_usage()
alloc.wake_up(tags=["weights"])
torch.cuda.synchronize()
out["usage_after_wake"] = alloc.get_current_usage()
out["weights_back"] = bool((w == 1.0).all().item() and (w2 == 4.0).all().item())
out["scratch_awake"] = "scratch" not in alloc._asleep
out["kv_still_asleep"] = "kv_cache" in alloc._asleep
alloc.wake_up(tags=["kv_cache"])
kv.fill_(5.0)
torch.cuda.synchronize()
out["kv_writable"] = bool((kv == 5.0).all().item())
alloc.release_pools(); alloc.release_pools(); alloc.close()
out["usage_end"] = alloc.get_current_usage()
emit(out)
"""
print("== 4b. the vLLM drop-in's tag calls")
r = child(VLLM_TAGS)
if r is None:
    check(False, "the vLLM tag child ran")
else:
    print("  %s" % r)
    N = 32 << 20
    check(r["reuse_unknown"].startswith("ValueError"), "reuse_memory_pool of an unknown tag: %s" % r["reuse_unknown"])
    check(r["usage_awake"] >= 4 * 4 * N, "get_current_usage counts the four tensors (%s)" % mib(r["usage_awake"]))
    check(r["usage_awake"] - r["usage_after_discard"] >= 4 * N,
          "discard('kv_cache') frees its memory (usage %s -> %s)" % (mib(r["usage_awake"]), mib(r["usage_after_discard"])))
    check(r["weights_usable"] and r["scratch_usable"], "discard leaves the other tags mapped and usable")
    check(any("already-asleep" in m for m in r["warned"]), "a sleep that would change a discarded tag's policy says so")
    check(r["usage_asleep"] == 0, "asleep, get_current_usage is 0 (memory that sleeps is not counted)")
    check(r["weights_back"], "wake_up(['weights']) brings the weights' contents back")
    check(r["scratch_awake"] and r["kv_still_asleep"],
          "wake_up(['weights']) also wakes 'scratch' (not deferrable) and leaves 'kv_cache' asleep")
    check(r["usage_after_wake"] >= 3 * 4 * N, "usage after that wake counts weights and scratch (%s)"
          % mib(r["usage_after_wake"]))
    check(r["kv_writable"], "kv_cache wakes when named and is writable")
    check(r["usage_end"] >= 4 * 4 * N, "release_pools/close twice change nothing in use")

# ---- 4c. torch.cuda.MemPool created after dmm.torch.enable(), without and with an allocator of its own ----
MEMPOOL = PRELUDE + r"""
import dmm.torch as dt
dt.enable()
out = {}
n = 16 << 20


def use(pool):
    before = dt.memory_stats()["allocated_bytes.all.current"]
    with torch.cuda.use_mem_pool(pool):
        t = torch.full((n,), 7, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    grew = dt.memory_stats()["allocated_bytes.all.current"] - before
    ok = bool((t == 7).all().item())
    del t
    torch.cuda.synchronize()
    return {"ok": ok, "dmm_counted": grew >= n}


for name, make in (("default", lambda: torch.cuda.MemPool()),
                   ("own_allocator", lambda: torch.cuda.MemPool(torch.cuda.memory.CUDAPluggableAllocator(
                       dt.library_path(), "dmm_torch_malloc", "dmm_torch_free").allocator()))):
    try:
        out[name] = use(make())
    except Exception as e:  # noqa: BLE001
        out[name] = {"error": "%s: %s" % (type(e).__name__, str(e)[:300])}
emit(out)
"""
print("== 4c. torch.cuda.MemPool after enable()")
r = child(MEMPOOL, alloc="dmm")
if r is None:
    check(False, "the MemPool child ran")
else:
    # Either it works (tensors in the pool hold their values and are dmm memory), or PyTorch refuses the
    # pool itself, as torch 2.11 does for every pluggable allocator (createOrIncrefPool): docs/torch.md
    # says so and points at dmm.torch.tag. Anything else (a crash, a wrong value, memory off dmm) fails.
    for name in ("default", "own_allocator"):
        res = r[name]
        works = bool(res.get("ok") and res.get("dmm_counted"))
        refused = "error" in res and res["error"].startswith("RuntimeError") and "createOrIncrefPool" in res["error"]
        check(works or refused, "MemPool (%s) after enable(): %s" % (
            name, "tensors in it hold their values and are dmm memory" if works else
            "refused by PyTorch's pluggable-allocator interface, as docs/torch.md says: %s" % res))

# ---- 4d. torch_memory_saver's TMS_INIT_ENABLE: everything outside a region pauses, but disable() ----
TMS_INIT = PRELUDE + r"""
os.environ["TMS_INIT_ENABLE"] = "1"
os.environ["TMS_INIT_ENABLE_CPU_BACKUP"] = "1"
from dmm.compat.torch_memory_saver import torch_memory_saver as tms
import dmm.torch as dt
n = 64 << 20
out = {"enabled": dt.is_enabled()}
w = torch.full((n,), 5, dtype=torch.uint8, device="cuda")  # outside every region: the default tag's
with tms.disable():
    keep = torch.full((n,), 6, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
before = torch.cuda.memory_reserved()
tms.pause()
torch.cuda.synchronize()
out["freed"] = before - torch.cuda.memory_reserved()
backup = tms.get_cpu_backup(w)
out["backup_ok"] = backup is not None and bool((backup == 5).all().item())
out["keep_awake"] = tms.get_cpu_backup(keep) is None and bool((keep == 6).all().item())
tms.resume()
out["w_ok"] = bool((w == 5).all().item())
emit(out)
"""
print("== 4d. TMS_INIT_ENABLE")
r = child(TMS_INIT)
if r is None:
    check(False, "the TMS_INIT_ENABLE child ran")
else:
    check(r["enabled"], "TMS_INIT_ENABLE=1 makes dmm torch's allocator at import")
    check(r["freed"] >= 64 << 20, "pause() frees what was allocated outside a region (%s)" % mib(r["freed"]))
    check(r["backup_ok"], "with TMS_INIT_ENABLE_CPU_BACKUP=1 its contents are in the CPU backup while paused")
    check(r["keep_awake"], "what disable() allocated stays on the device, with its contents")
    check(r["w_ok"], "resume() brings it back at the same address with its contents")

# ---- 5. record_stream ----
RECORD = PRELUDE + r"""
import dmm.torch as dt
dt.enable()
n = 64 << 20
side = torch.cuda.Stream()


def race(record):
    x = torch.full((n,), 3.0, device="cuda")
    torch.cuda.synchronize()
    old = x.data_ptr()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)   # the side stream reads x only after this (about a second)
        y = x * 2
    if record:
        x.record_stream(side)
    del x                                  # freed on its own stream while the side stream still needs it
    z = torch.empty(n, device="cuda")      # the same size on the same stream, overwritten at once
    z.fill_(-1.0)
    torch.cuda.synchronize()
    return {"reused": z.data_ptr() == old, "y_ok": bool((y == 6.0).all().item())}


cross0 = dt.memory_stats()["dmm.pool.cross_stream_frees"]
out = {"recorded": race(True), "cross": dt.memory_stats()["dmm.pool.cross_stream_frees"] - cross0}
out["control"] = race(False)
emit(out)
"""
print("== 5. record_stream: a block used on another stream waits for it")
r = child(RECORD, alloc="dmm")
if r is None:
    check(False, "the record_stream child ran")
else:
    print("  with record_stream: the same address again %s (then only after the side stream's event), the side "
          "stream read 6.0: %s; without it (the control): the same address %s, read 6.0: %s" % (
              r["recorded"]["reused"], r["recorded"]["y_ok"], r["control"]["reused"], r["control"]["y_ok"]))
    check(r["recorded"]["y_ok"] and r["cross"] >= 1,
          "record_stream: the side stream read the tensor's values, not the next tensor's (%d cross-stream free)"
          % r["cross"])

print("\n%d failure(s)" % len(failures))
for f in failures:
    print("  - " + f)
sys.exit(1 if failures else 0)
