# SPDX-License-Identifier: Apache-2.0
"""dmm.cupy (python/dmm/cupy.py) beside dmm.torch on a GPU: torch and CuPy in one process under one dmm
device budget.

  - with both enabled, CuPy arrays are dmm memory (the device's live bytes rise by the array) and torch
    reads them in place (torch.as_tensor over __cuda_array_interface__, same address);
  - under a limit B, torch's cached memory serves a CuPy allocation that would not fit beside it: torch
    frees a tensor (dmm keeps the memory cached) and CuPy then allocates what fits only without that cache;
  - a CuPy allocation past B raises CuPy's own OutOfMemoryError, a torch one torch's OutOfMemoryError, and
    the device's live bytes never pass B;
  - ONNX Runtime (dmm.ort, CPU provider) in the same process is charged to the same governor, on its host
    tier: a Run past a host budget fails with ORT's own error while torch goes on allocating on the device
    (the section is skipped without ONNX Runtime: DMM_ORT_LIB, scripts/ort.sh);
  - disable() gives CuPy its own pool back (a new array is not dmm memory; older ones still are).
Exit 0 = all held, 1 = something did not, 77 = no torch/GPU/CuPy.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import check, failures, import_or_skip, require_torch_gpu  # noqa: E402

require_torch_gpu()
cupy = import_or_skip("cupy", "CuPy")

import dmm.torch  # noqa: E402

dmm.torch.enable()
import dmm._lib  # noqa: E402
import dmm.cupy  # noqa: E402
import torch  # noqa: E402

MIB = 1 << 20
B = 512 * MIB


def live():
    st = json.loads(dmm._lib.json_call(dmm._lib.load().dmm_torch_stats_json, 0))
    return st["allocated_bytes"]["current"]


dmm.cupy.enable()
base = live()
a = cupy.ones(64 * MIB // 4, dtype=cupy.float32)
cupy.cuda.get_current_stream().synchronize()
check(live() - base >= 64 * MIB, "a CuPy array is dmm memory (live bytes rose by %d)" % (live() - base))
t = torch.as_tensor(a, device="cuda")
check(t.data_ptr() == a.data.ptr and bool((t == 1).all()), "torch reads the CuPy array in place")
del t, a

# --- one budget: torch's cache serves CuPy ---
torch.cuda.synchronize()
dmm.torch.empty_cache()
dmm.torch.set_limit(B)
x = torch.empty(300 * MIB, dtype=torch.uint8, device="cuda")
del x  # cached by dmm, still charged
stats = dmm.torch.memory_stats()
print("after torch freed 300 MiB: reserved %d MiB" % (stats.get("reserved_bytes.all.current", 0) // MIB))
y = cupy.empty(400 * MIB, dtype=cupy.uint8)  # fits B only if the cached 300 MiB serve it
check(int(y.data.ptr) != 0, "CuPy's 400 MiB fit under %d MiB beside torch's cached 300 MiB" % (B // MIB))
peak_live = live()
check(peak_live <= B, "the device's live bytes stay within B (%d MiB)" % (peak_live // MIB))

# --- refusals, as each framework's own error ---
try:
    cupy.empty(200 * MIB, dtype=cupy.uint8)
    check(False, "a CuPy allocation past B is refused")
except cupy.cuda.memory.OutOfMemoryError as e:
    check(True, "a CuPy allocation past B raises CuPy's OutOfMemoryError: %s" % str(e)[:200])
try:
    torch.empty(200 * MIB, dtype=torch.uint8, device="cuda")
    check(False, "a torch allocation past B is refused")
except torch.cuda.OutOfMemoryError as e:
    check(True, "a torch allocation past B raises torch's OutOfMemoryError: %s" % str(e)[:200])
check(live() <= B, "after the refusals the live bytes are within B (%d MiB)" % (live() // MIB))
del y
dmm.torch.set_limit(None)

# --- ONNX Runtime (CPU provider) on the same governor: its memory on the host tier, under a host budget ---
ort_lib, cli = os.environ.get("DMM_ORT_LIB", ""), os.environ.get("DMM_CLI", "")
if not (os.path.exists(ort_lib) and os.path.exists(cli)):
    print("SKIP (this section): ONNX Runtime (DMM_ORT_LIB=%r, scripts/ort.sh) or the dmm tool (DMM_CLI=%r) "
          "is missing" % (ort_lib, cli))
else:
    import array
    import subprocess
    import tempfile

    import dmm.ort

    model = os.path.join(tempfile.mkdtemp(prefix="dmm-ort-"), "m.onnx")
    subprocess.run([cli, "ort", "--write-model", model, "--batch", "0"], check=True, stdout=subprocess.DEVNULL)
    dmm.torch.set_limit(B)
    w = torch.empty(100 * MIB, dtype=torch.uint8, device="cuda")
    c = cupy.empty(100 * MIB, dtype=cupy.uint8)
    sess = dmm.ort.Session(model)
    x = array.array("f", [((i * 31) % 17) / 17.0 for i in range(8 * 256)])
    y = sess.run({"X": (x, [8, 256])})["Y"]
    host = dmm.ort.tier_usage()
    dev = dmm.ort.tier_usage(0)
    check(y.shape == (8, 512) and max(y.data) > 0, "ONNX Runtime runs a session on dmm host memory")
    check(host["used"] >= dmm.ort.usage()["in_use"] > 0,
          "its memory is on the governor's host tier: %d bytes (ORT live %d)" % (host["used"], dmm.ort.usage()["in_use"]))
    check(dev["used"] >= 200 * MIB and dev["limit"] is not None and dev["limit"] <= B,
          "the same governor's device tier holds torch's and CuPy's memory under B: %s" % dev)
    dmm.ort.set_host_limit(host["used"] + MIB)
    try:
        sess.run({"X": (array.array("f", bytes(4 * 4096 * 256)), [4096, 256])})
        check(False, "an ORT Run past the host budget is refused")
    except dmm.ort.OrtError as e:
        check("tier host:0" in str(e), "an ORT Run past the host budget fails with ORT's error: %s" % str(e)[:200])
    z = torch.ones(10 * MIB, dtype=torch.uint8, device="cuda")
    check(int(z.sum()) == 10 * MIB, "torch goes on allocating on the device while ORT is refused on the host")
    dmm.ort.set_host_limit(0)
    check(sess.run({"X": (x, [8, 256])})["Y"].data == y.data, "ORT runs again once the host budget goes")
    sess.close()
    del w, c, z
    dmm.torch.set_limit(None)

# --- disable ---
dmm.cupy.disable()
before = live()
z = cupy.empty(32 * MIB, dtype=cupy.uint8)
check(live() == before, "after disable() CuPy allocates from its own pool (dmm's live bytes unchanged)")
del z
sys.exit(1 if failures else 0)
