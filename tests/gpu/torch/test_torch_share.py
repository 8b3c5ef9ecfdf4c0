# SPDX-License-Identifier: Apache-2.0
"""Issue 37, acceptance 4 on a GPU: CUDA tensors in dmm memory through torch.multiprocessing, and
torch.compile(mode="reduce-overhead") under dmm.

A parent under dmm.torch.enable() sends, through a torch.multiprocessing queue (spawn), a strided
float32 view with a storage offset, an nn.Parameter and a CPU tensor to a child. What is proven: the
child reads the parent's values (the same sum, dtype, shape, strides, storage size, requires_grad,
a Parameter), its in-place write is seen by the parent, the CPU tensor still travels by torch's own
reduction; a tensor the sender deletes right after putting it on the queue (and whose memory the
sender's pool could hand out again) keeps its values for the receiver, and the sender holds nothing
once the receiver let go; a tensor among a Process's arguments arrives; a tensor in tag memory is
refused with dmm's sentence; the child's mapping goes when its tensors go (its dmm stats count the
import while held, none after). torch.compile(mode="reduce-overhead") of a small model
under dmm falls back to the same kernels without CUDA graphs, says so once, and its outputs equal
those of the same compile under PyTorch's allocator (with graphs).
Prints every number; exit 0 = all held, 1 = something did not, 77 = no torch/GPU.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import check, failures, require_torch_gpu, result_of, worker_env  # noqa: E402

require_torch_gpu()

PARENT = r"""
import gc, json, sys, time, torch, torch.multiprocessing as mp
import dmm.torch as dt


def imported():
    v = dt.memory_stats_raw()["arena"].get("imported_bytes")
    return v["current"] if isinstance(v, dict) else v


def worker(q, r):
    view, param, cpu = q.get()
    r.put({"sum": float(view.double().sum().item()), "shape": list(view.shape), "stride": list(view.stride()),
           "offset": view.storage_offset(), "dtype": str(view.dtype), "param_grad": param.requires_grad,
           "param_sum": float(param.double().sum().item()), "param_is": type(param).__name__,
           "cpu_sum": float(cpu.double().sum().item()), "imported": imported(),
           "storage_bytes": view.untyped_storage().nbytes()})
    view.mul_(2)
    torch.cuda.synchronize()
    r.put("written")
    q.get()
    late = q.get()  # sent, then deleted by the sender at once: still the values it had
    time.sleep(0.5)
    r.put(float(late.double().sum().item()))
    del view, param, late
    gc.collect()
    torch.cuda.synchronize()
    r.put({"imported_after": imported()})


def by_argument(t, r):  # a tensor among a Process's arguments
    r.put(float(t.double().sum().item()))


if __name__ == "__main__":
    dt.enable()
    mp.set_start_method("spawn")
    q, r = mp.Queue(), mp.Queue()
    child = mp.Process(target=worker, args=(q, r))
    child.start()
    base = torch.arange(3 << 20, device="cuda", dtype=torch.float32)
    view = base[1000:1000 + (1 << 20)].view(1024, 1024)[:, 5:]
    before = view.clone()
    param = torch.nn.Parameter(torch.full((4096,), 0.5, device="cuda"))
    cpu = torch.arange(100, dtype=torch.float64)
    q.put((view, param, cpu))
    got = r.get(timeout=300)
    out = {"child": got, "sum": float(view.double().sum().item()), "stride": list(view.stride()),
           "offset": view.storage_offset(), "storage_bytes": view.untyped_storage().nbytes(),
           "cpu_sum": float(cpu.sum().item())}
    out["child_wrote"] = r.get(timeout=120) == "written"
    torch.cuda.synchronize()
    out["parent_sees_write"] = bool(torch.equal(view, before * 2))
    q.put("go")
    late = torch.full((1 << 20,), 3.0, device="cuda")
    q.put(late)
    del late  # the sender lets go at once: what it sent must stay what it was
    for _ in range(8):  # and allocates and writes over what the pool has free meanwhile
        junk = torch.full((1 << 20,), -7.0, device="cuda")
        del junk
    torch.cuda.synchronize()
    out["late_sum"] = r.get(timeout=120)
    out["after"] = r.get(timeout=120)
    child.join(60)
    out["child_exit"] = child.exitcode
    held = __import__("dmm._share", fromlist=["sweep"]).sweep()
    out["held_after"] = held
    arg = torch.full((2048,), 2.0, device="cuda")
    p2 = mp.Process(target=by_argument, args=(arg, r))
    p2.start()
    out["by_argument"] = r.get(timeout=120)
    p2.join(60)
    out["arg_exit"] = p2.exitcode
    from multiprocessing.reduction import ForkingPickler
    with dt.tag("weights"):
        w = torch.ones(1024, device="cuda")
    try:
        ForkingPickler.dumps(w)
        out["tag_refusal"] = None
    except Exception as e:  # noqa: BLE001
        out["tag_refusal"] = "%s: %s" % (type(e).__name__, e)
    print("RESULT " + json.dumps(out), flush=True)
"""


COMPILE = r"""
import json, logging, sys, torch
mode = sys.argv[1]
said = []
if mode == "dmm":
    import dmm.torch as dt
    h = logging.Handler()
    h.emit = lambda r: said.append(r.getMessage())
    logging.getLogger("dmm").addHandler(h)
    dt.enable()
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).cuda()
f = torch.compile(m, mode="reduce-overhead")
outs = []
with torch.no_grad():
    for i in range(5):
        x = torch.randn(32, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(i))
        outs.append(f(x).clone())
torch.cuda.synchronize()
torch.save([o.cpu() for o in outs], sys.argv[2])
print("RESULT " + json.dumps({"said": said}), flush=True)
"""


def compile_check():
    import tempfile

    import torch

    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("native", "dmm"):
            path = os.path.join(tmp, mode + ".pt")
            p = subprocess.run([sys.executable, "-c", COMPILE, mode, path], env=worker_env(mode), capture_output=True,
                               text=True, timeout=600)
            res = result_of(p.stdout)
            if p.returncode != 0 or res is None:
                print((p.stdout + p.stderr)[-3000:])
                check(False, "torch.compile(mode='reduce-overhead') ran under %s (exit %d)" % (mode, p.returncode))
                return
            got[mode] = (torch.load(path), res["said"])
    same = all(torch.equal(a, b) for a, b in zip(got["native"][0], got["dmm"][0]))
    diff = max(float((a - b).abs().max()) for a, b in zip(got["native"][0], got["dmm"][0]))
    said = got["dmm"][1]
    print("reduce-overhead: native (graph trees) vs dmm (the same kernels without graphs): max |diff| %g; dmm said: %s"
          % (diff, said))
    check(same, "torch.compile(mode='reduce-overhead') under dmm: outputs equal native's")
    check(len(said) == 1 and "graph trees" in said[0], "the fallback is said once, in the documented sentence")


def main():
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:  # spawned children import the parent's main module: a file
        script = os.path.join(tmp, "share_parent.py")
        with open(script, "w") as f:
            f.write(PARENT)
        p = subprocess.run([sys.executable, script], env=worker_env("dmm"), capture_output=True, text=True,
                           timeout=600)
    res = result_of(p.stdout)
    if p.returncode != 0 or res is None:
        print((p.stdout + p.stderr)[-4000:])
        check(False, "the parent and its child ran (exit %d)" % p.returncode)
        return 1
    c = res["child"]
    print("child: %s" % c)
    print("parent: sum %.1f, stride %s, offset %d; after: %s; child exit %s"
          % (res["sum"], res["stride"], res["offset"], res["after"], res["child_exit"]))
    check(c["sum"] == res["sum"] and c["shape"] == [1024, 1019] and c["stride"] == res["stride"]
          and c["offset"] == res["offset"] and c["dtype"] == "torch.float32"
          and c["storage_bytes"] == res["storage_bytes"],
          "the child reads the strided view the parent sent (sum, shape, strides, offset, dtype, storage size)")
    check(c["param_grad"] is True and c["param_sum"] == 2048.0 and c["param_is"] == "Parameter",
          "an nn.Parameter arrives as one (requires_grad)")
    check(c["cpu_sum"] == res["cpu_sum"], "a CPU tensor still travels by torch's own reduction")
    check(res["child_wrote"] and res["parent_sees_write"], "the parent sees the child's in-place write")
    check(bool(c["imported"]) and res["after"]["imported_after"] == 0,
          "the child's dmm device counts the import while it holds the tensors, none after (%s, %s)"
          % (c["imported"], res["after"]["imported_after"]))
    check(res["child_exit"] == 0, "the child exits 0")
    check(res["late_sum"] == 3.0 * (1 << 20), "a tensor the sender deleted right after the send keeps its values "
          "for the receiver (%s)" % res["late_sum"])
    check(res["held_after"] == 0, "once the receiver let go, the sender holds nothing (%d held)" % res["held_after"])
    check(res["by_argument"] == 4096.0 and res["arg_exit"] == 0, "a tensor among a Process's arguments arrives (%s)"
          % res["by_argument"])
    ref = res["tag_refusal"] or ""
    check("tag and graph" in ref, "a tensor in tag memory is refused with dmm's sentence (%s)" % ref[:300])
    compile_check()
    print("%d check(s) failed" % len(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
