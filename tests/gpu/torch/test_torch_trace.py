# SPDX-License-Identifier: Apache-2.0
"""Issue 13, items 4 and 5, on a GPU: your own workload's trace, and snapshots PyTorch's viewer opens.

  - the same small training workload (an MLP with AdamW, batch sizes that change every step, a second
    stream) runs twice, each in a fresh process: under dmm inside dmm.torch.record(), and under
    PyTorch's native allocator inside torch.cuda.memory._record_memory_history(), whose snapshot
    dmm.trace.from_torch_snapshot converts. Both traces replay through `dmm replay` to the same peak
    live bytes, which equal dmm's own max_memory_allocated over the window; PyTorch's
    max_memory_allocated is printed beside (its blocks may be larger than the requests when it does
    not split one, so it is at least that peak);
  - under dmm, with the workload's tensors alive and dmm.torch.history() on: torch.cuda._memory_viz
    segsum, trace, segments and memory (with a flamegraph stand-in), trace_plot and segment_plot read
    dmm.torch.torch_snapshot() without error, and its device_traces hold alloc, free and segment_map
    events; Σ segment sizes = dmm's reserved bytes, Σ active blocks = its allocated bytes, and
    segsum prints that segment count; dump_snapshot's pickle loads with `python -m
    torch.cuda._memory_viz stats`.

Prints every number. Exit 0 = all held, 1 = something did not, 77 = no torch/GPU/library.
"""

import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import check, failures, mib, require_torch_gpu, result_of, ROOT, worker_env  # noqa: E402

require_torch_gpu()


WORKLOAD = r"""
import json, sys, torch

def run(steps=12):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    side = torch.cuda.Stream()
    keep = []
    for i in range(steps):
        x = torch.randn(64 * (1 + i % 4), 1024, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = torch.full((1000 + 37 * i,), 1.0, device="cuda")
            keep.append(y * 2)
        torch.cuda.current_stream().wait_stream(side)
        if len(keep) > 3:
            keep.pop(0)
    torch.cuda.synchronize()
    return model, opt, keep
"""

CHILD_DMM = WORKLOAD + r"""
import dmm.torch as dt
out_trace, out_pickle = sys.argv[1], sys.argv[2]
dt.enable(track_blocks=True)
torch.cuda.init()
dt.reset_peak_memory_stats()
start = dt.memory_allocated()
dt.history(1_000_000)
with dt.record(out_trace, workload="mlp-dmm") as rec:
    alive = run()
res = {"stats": rec.stats, "start_allocated": start, "max_allocated": dt.max_memory_allocated()}

import torch.cuda._memory_viz as mv
snap = dt.torch_snapshot()
st = dt.memory_stats()
res["reserved"] = st["reserved_bytes.all.current"]
res["allocated"] = st["allocated_bytes.all.current"]
res["seg_total"] = sum(s["total_size"] for s in snap["segments"])
res["seg_active"] = sum(s["allocated_size"] for s in snap["segments"])
res["segments"] = len(snap["segments"])
res["kinds"] = sorted({s["dmm_kind"] for s in snap["segments"]})
res["trace_actions"] = sorted({e["action"] for e in snap["device_traces"][torch.cuda.current_device()]})
errors = {}
def attempt(name, fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        errors[name] = "%s: %s" % (type(e).__name__, e)
        return None
txt = attempt("segsum", lambda: mv.segsum(snap))
res["segsum_count_line"] = bool(txt) and ("segments: %d" % len(snap["segments"])) in txt
attempt("trace", lambda: mv.trace(snap))
fl = attempt("segments", lambda: mv.segments(snap, format_flamegraph=lambda s: s))
if fl is not None:
    res["flame_total"] = sum(int(l.rsplit(" ", 1)[1]) for l in fl.splitlines() if l.strip())
fm = attempt("memory", lambda: mv.memory(snap, format_flamegraph=lambda s: s))
for name in ("trace_plot", "segment_plot"):
    fn = getattr(mv, name, None)
    if fn is None:
        errors[name] = "torch.cuda._memory_viz has no %s" % name
    else:
        html = attempt(name, lambda: fn(snap))
        if html is not None and "snapshot.pickle" not in html:
            errors[name] = "the page does not embed the snapshot"
res["viz_errors"] = errors
res["pickle"] = dt.dump_snapshot(out_pickle)
print("RESULT " + json.dumps(res), flush=True)
"""

CHILD_NATIVE = WORKLOAD + r"""
import dmm.trace
out_trace = sys.argv[1]
torch.cuda.init()
torch.cuda.reset_peak_memory_stats()
start = torch.cuda.memory_allocated()
torch.cuda.memory._record_memory_history(max_entries=1_000_000)
alive = run()
snap = torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)
r = dmm.trace.from_torch_snapshot(snap, out_trace, device=torch.cuda.current_device(), workload="mlp-native")
r["torch_max_allocated"] = torch.cuda.max_memory_allocated()
r["start_allocated"] = start
print("RESULT " + json.dumps(r), flush=True)
"""

# Who allocated each block (issue 37, acceptance 2): _record_memory_history(context="all", stacks="python")
# under dmm gives a tensor allocated in a named function that function's frame, in the snapshot's
# blocks and alloc events; memory_viz shows it; stacks="all" adds native frames; skip_actions holds.
CHILD_FRAMES = r"""
import inspect, json, subprocess, sys, time, torch
import dmm.torch as dt
import torch.cuda._memory_viz as mv
dt.enable()
torch.cuda.init()
res = {"signature": str(inspect.signature(torch.cuda.memory._record_memory_history))}

def make_named_tensor():
    return torch.empty(3 << 20, dtype=torch.uint8, device="cuda")

def pairs(n=5000):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x = torch.empty(4096, device="cuda")
        del x
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6

def cost():
    return min(pairs() for _ in range(3))

res["us_off"] = cost()
torch.cuda.memory._record_memory_history(context=None, max_entries=100000)
res["us_history"] = cost()
torch.cuda.memory._record_memory_history(context="all", stacks="python", max_entries=100000)
res["us_python"] = cost()

def frames_of(snap, t):  # the frames of the live block under tensor t ([] when there is none)
    for s in snap["segments"]:
        for b in s["blocks"]:
            if b["state"] == "active_allocated" and b["address"] == t.data_ptr():
                return b["frames"]
    return []

keep = make_named_tensor()
snap = torch.cuda.memory._snapshot()
res["named_frames"] = frames_of(snap, keep)[:3]
ev = snap["device_traces"][torch.cuda.current_device()]
res["allocs"] = sum(1 for e in ev if e["action"] == "alloc")
res["allocs_with_frames"] = sum(1 for e in ev if e["action"] == "alloc" and e["frames"])
res["frees_with_frames"] = sum(1 for e in ev if e["action"] == "free_requested" and e["frames"])
errors = {}
try:
    res["flame_shows_it"] = "make_named_tensor" in mv.memory(snap, format_flamegraph=lambda t: t)
    for name in ("trace_plot", "segment_plot"):
        getattr(mv, name)(snap)
except Exception as e:  # noqa: BLE001
    errors["viz"] = "%s: %s" % (type(e).__name__, e)
torch.cuda.memory._dump_snapshot(sys.argv[1])
out = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", sys.argv[1], "-o",
                      sys.argv[1] + ".html"], capture_output=True, text=True)
if out.returncode != 0:
    errors["cli"] = (out.stdout + out.stderr)[-500:]
res["viz_errors"] = errors
torch.cuda.memory._record_memory_history(context="alloc", stacks="all", max_entries=100000)
res["us_all"] = cost()
keep2 = make_named_tensor()
fr = frames_of(torch.cuda.memory._snapshot(), keep2)
res["all_native"] = [f["name"] for f in fr if f["line"] == 0][:8]
res["all_python"] = any(f["name"] == "make_named_tensor" for f in fr)
del keep2
snap = torch.cuda.memory._snapshot()
last, same, frees = {}, 0, 0
for e in snap["device_traces"][torch.cuda.current_device()]:  # context="alloc": a free shows its allocation's
    if e["action"] == "alloc":
        last[e["addr"]] = e["frames"]
    elif e["action"] == "free_requested" and e["addr"] in last:
        frees += 1
        same += e["frames"] == last[e["addr"]] and bool(e["frames"])
res["alloc_context_frees"] = [frees, same]
try:
    torch.cuda.memory._record_memory_history(context="all", stacks="python", max_entries=100000,
                                             skip_actions=["free_requested", "free_completed"])
    x = torch.empty(1000, device="cuda")
    del x
    res["skip_actions"] = sorted({e["action"] for e in torch.cuda.memory._snapshot()["device_traces"][0]})
except TypeError as e:
    res["skip_actions"] = "torch has no skip_actions: %s" % e
torch.cuda.memory._record_memory_history(enabled=None)
print("RESULT " + json.dumps(res), flush=True)
"""


def run_child(code, args, alloc):
    out = subprocess.run([sys.executable, "-c", code] + args, capture_output=True, text=True, env=worker_env(alloc),
                         timeout=600)
    res = result_of(out.stdout)
    if out.returncode != 0 or res is None:
        print("child (%s) failed, exit %d:\n%s\n%s" % (alloc, out.returncode, out.stdout[-3000:], out.stderr[-3000:]))
    return res


def cli():
    env = os.environ.get("DMM_CLI")
    if env and os.path.exists(env):
        return env
    found = sorted(glob.glob(os.path.join(ROOT, "build*", "tools", "dmm")))
    return found[0] if found else None


def replay_peak(path):
    tool = cli()
    if tool is None:  # the reader's rule, in Python: the largest sum of live sizes
        print("NOTE: no dmm tool found (DMM_CLI): peak live computed here, not by `dmm replay`")
        live, peak, size = 0, 0, {}
        with gzip.open(path, "rt") as f:
            for line in f:
                p = line.split()
                if not p or p[0].startswith("#"):
                    continue
                if p[1] == "a":
                    size[p[2]] = int(p[3])
                    live += int(p[3])
                    peak = max(peak, live)
                else:
                    live -= size.pop(p[2])
        return peak
    out = subprocess.run([tool, "replay", path, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        print("dmm replay %s failed: %s" % (path, out.stderr.strip()))
        return None
    return json.loads(out.stdout)["peak_live_bytes"]


tmp = tempfile.mkdtemp(prefix="dmm-torch-trace-")
dmm_trace = os.path.join(tmp, "dmm.trace.gz")
native_trace = os.path.join(tmp, "native.trace.gz")
snap_pickle = os.path.join(tmp, "dmm-snapshot.pickle")

d = run_child(CHILD_DMM, [dmm_trace, snap_pickle], "dmm")
n = run_child(CHILD_NATIVE, [native_trace], "native")
check(d is not None and n is not None, "both workloads ran")
if d is not None and n is not None:
    rs = d["stats"]
    print("dmm recording: %d allocations, %d frees, %d untracked frees, peak live %s, %d streams"
          % (rs["allocations"], rs["frees"], rs["untracked_frees"], mib(rs["peak_live_bytes"]), rs["streams"]))
    print("native history: %d allocations, %d frees, %d untracked frees, peak live %s; PyTorch's "
          "max_memory_allocated %s" % (n["allocations"], n["frees"], n["untracked_frees"], mib(n["peak_live_bytes"]),
                                       mib(n["torch_max_allocated"])))
    pd, pn = replay_peak(dmm_trace), replay_peak(native_trace)
    print("dmm replay peak live: recorded under dmm %s, converted from PyTorch %s" % (pd, pn))
    check(pd is not None and pd == rs["peak_live_bytes"], "dmm replay reads the recorded trace to its own peak live")
    check(pd is not None and pd == pn, "the recorded and the converted trace have the same peak live bytes")
    print("allocations: %d under dmm, %d under PyTorch; streams %d, %d (the same program: they should match)"
          % (rs["allocations"], n["allocations"], rs["streams"], n["streams"]))
    check(d["start_allocated"] + rs["peak_live_bytes"] >= d["max_allocated"] >= rs["peak_live_bytes"],
          "dmm's max_memory_allocated over the window is the trace's peak (+ what was live before: %d)"
          % d["start_allocated"])
    check(n["torch_max_allocated"] >= n["peak_live_bytes"] - n["start_allocated"],
          "PyTorch's max_memory_allocated is at least the converted trace's peak")
    check(rs["streams"] >= 2, "the side stream is in the trace")

    print("torch_snapshot: %d segments %s, Σ total_size %s, Σ active %s; dmm reserved %s, allocated %s"
          % (d["segments"], d["kinds"], mib(d["seg_total"]), mib(d["seg_active"]), mib(d["reserved"]),
             mib(d["allocated"])))
    check(not d["viz_errors"], "torch.cuda._memory_viz reads the snapshot (%s)" % (d["viz_errors"] or "no errors"))
    check({"alloc", "free_requested", "free_completed", "segment_map"} <= set(d["trace_actions"]),
          "device_traces holds the pool's events (%s)" % d["trace_actions"])
    check(d["seg_total"] == d["reserved"], "Σ segment sizes = dmm's reserved bytes")
    check(d["seg_active"] == d["allocated"], "Σ active blocks = dmm's allocated bytes")
    check(d.get("segsum_count_line"), "segsum counts every segment")
    check(d.get("flame_total") == d["seg_total"], "the segments flamegraph adds up to the reserved bytes (%s)"
          % d.get("flame_total"))
    out = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", d["pickle"]], capture_output=True,
                         text=True)
    check(out.returncode == 0 and "total_reserved" in out.stdout,
          "python -m torch.cuda._memory_viz stats opens dump_snapshot's pickle (%d: %s)"
          % (out.returncode, (out.stdout + out.stderr).strip()[-300:]))

f = run_child(CHILD_FRAMES, [os.path.join(tmp, "frames.pickle")], "dmm")
check(f is not None, "the frames workload ran")
if f is not None:
    print("_record_memory_history%s" % f["signature"])
    print("a 4 KiB malloc/free pair under dmm: %.2f us without history, %.2f us with history (no frames), "
          "%.2f us with Python frames, %.2f us with native + Python frames"
          % (f["us_off"], f["us_history"], f["us_python"], f["us_all"]))
    print("the named tensor's frames: %s" % f["named_frames"])
    check(bool(f["named_frames"]) and f["named_frames"][0]["name"] == "make_named_tensor"
          and f["named_frames"][0]["filename"] == "<string>",
          "context='all', stacks='python': the block's innermost frame is the function that allocated it")
    check(f["allocs"] > 0 and f["allocs_with_frames"] == f["allocs"] and f["frees_with_frames"] > 0,
          "every alloc event carries frames, and frees do (%d allocs, %d with frames, %d frees with frames)"
          % (f["allocs"], f["allocs_with_frames"], f["frees_with_frames"]))
    check(f.get("flame_shows_it") is True and not f["viz_errors"],
          "PyTorch's memory_viz reads it and its memory flamegraph names the function (%s)"
          % (f["viz_errors"] or "no errors"))
    print("stacks='all': native frames %s" % f["all_native"])
    check(f["all_python"] and len(f["all_native"]) > 0, "stacks='all': native frames, then the Python frame")
    n, same = f["alloc_context_frees"]
    check(n > 0 and same == n, "context='alloc': each free event shows its allocation's frames (%d of %d)" % (same, n))
    sk = f["skip_actions"]
    if isinstance(sk, str):
        print("SKIP skip_actions: %s" % sk)
    else:
        check("alloc" in sk and not any(a.startswith("free_") for a in sk),
              "skip_actions=free_*: no free event is kept, allocs are (%s)" % (sk,))

print("%d check(s) failed (files in %s)" % (len(failures), tmp) if failures else "all checks passed")
sys.exit(1 if failures else 0)
