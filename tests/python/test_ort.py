# SPDX-License-Identifier: Apache-2.0
"""dmm.ort (python/dmm/ort.py) on the CPU: ONNX Runtime sessions over this build's libdmm_torch.so
(DMM_LIB), whose allocator is charged to the library's own governor, the one dmm.torch's and dmm.cupy's
devices are charged to (issue 39: one budget for every framework in the process).

What is proven, with the real ONNX Runtime library (DMM_ORT_LIB; scripts/ort.sh fetches it) and dmm's
own dense model (`dmm ort --write-model`, DMM_CLI):
  - a session's initializers and a Run's tensors are dmm memory: the allocator's live bytes rise, and the
    governor's host tier holds at least them (dmm.ort.tier_usage: the same governor);
  - Runs give the same float32 output every time, in the model's shape, with ReLU's zeros and positives;
  - under a host-tier limit just above what is held, a Run that needs more fails with ONNX Runtime's own
    error (OrtError) carrying dmm's sentence (the tier, the limit), the allocator counts the refusal, and
    after the limit goes the same session runs again with the same output;
  - a model path that is a FIFO, a device (/dev/zero), a folder or a file above 2 GiB is refused unread;
  - bad feeds, limits, devices and thread counts are refused with a sentence naming what was wrong (numbers
    past 64 bits too, which ctypes would cut); a second ONNX Runtime library in one process is refused;
  - sessions dropped without close() give their memory back when collected; close() during a Run waits
    for it; a closed session refuses to run.
Exit 0 = all held, 1 = a check failed, 77 = no DMM_LIB, DMM_CLI or ONNX Runtime library.
"""

import array
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from _checks import check, failures, raises

for var in ("DMM_LIB", "DMM_CLI", "DMM_ORT_LIB"):
    if not os.environ.get(var) or not os.path.exists(os.environ[var]):
        print("SKIP: needs %s (this build's unsanitized libdmm_torch.so, the dmm tool and ONNX Runtime from "
              "scripts/ort.sh; run it through CTest)" % var)
        sys.exit(77)

import dmm._lib  # noqa: E402
import dmm.ort as ort  # noqa: E402

MIB = 1 << 20
tmp = tempfile.mkdtemp(prefix="dmm-ort-")
model = os.path.join(tmp, "m.onnx")
subprocess.run([os.environ["DMM_CLI"], "ort", "--write-model", model, "--batch", "0"], check=True,
               stdout=subprocess.DEVNULL)

before = ort.tier_usage()
s = ort.Session(model)
check(s.inputs == ["X"] and s.outputs == ["Y"], "the model's names are read: %s -> %s" % (s.inputs, s.outputs))
held = ort.usage()
host = ort.tier_usage()
check(held["in_use"] >= 256 * 512 * 4 + 512 * 512 * 4,
      "the initializers are dmm memory: %d bytes live in dmm.ort's allocator" % held["in_use"])
check(host["used"] - before["used"] >= held["in_use"],
      "the governor's host tier holds them: %d bytes used (was %d)" % (host["used"], before["used"]))

x = array.array("f", [((i * 7919) % 97) / 97.0 - 0.3 for i in range(4 * 256)])
first = s.run({"X": (x, [4, 256])})["Y"]
again = s.run({"X": (x, [4, 256])})["Y"]
check(first.shape == (4, 512), "the output has the model's shape: %s" % (first.shape,))
check(first.data == again.data, "two Runs give the same output")
check(min(first.data) == 0.0 and max(first.data) > 0.0, "ReLU's output: zeros and positives (max %.4f)"
      % max(first.data))

# ---- a host-tier limit: ONNX Runtime's own error, with dmm's sentence; nothing changed ----
used = ort.tier_usage()["used"]
ort.set_host_limit(used + MIB)
check(ort.tier_usage()["limit"] == used + MIB, "the host tier's limit is set: %s" % ort.tier_usage())
refusals = ort.usage()["refusals"]
big = array.array("f", bytes(4 * 4096 * 256))
ok, msg = raises(ort.OrtError, lambda: s.run({"X": (big, [4096, 256])}), "refused", "tier host:0", "limit")
check(ok, "a Run past the limit fails with ONNX Runtime's error naming dmm's refusal: %s" % msg[:300])
check(ort.usage()["refusals"] == refusals + 1, "the allocator counted the refusal: %s" % ort.usage())
check(ort.tier_usage()["used"] <= used + MIB, "the host tier stayed within its limit: %s" % ort.tier_usage())
ort.set_host_limit(0)
check(ort.tier_usage()["limit"] is None, "0 removes the limit")
check(s.run({"X": (x, [4, 256])})["Y"].data == first.data, "after the limit went, the same output")
check(s.run({"X": (big, [4096, 256])})["Y"].shape == (4096, 512), "and the large Run runs")

# ---- a second session shares the runtime and the allocator ----
s2 = ort.Session(model)
check(s2.run({"X": (x, [4, 256])})["Y"].data == first.data, "a second session gives the same output")
check(ort.usage()["in_use"] >= 2 * held["in_use"], "both sessions' initializers are live: %s" % ort.usage())

# ---- refusals of bad input ----
ok, msg = raises(ValueError, lambda: s.run({"x": (x, [4, 256])}), "the model's inputs are ['X']", "unknown")
check(ok, "a misnamed input is refused naming the model's inputs: %s" % msg)
ok, msg = raises(ValueError, lambda: s.run({"X": (x, [4, 255])}), "needs 4080 bytes", "has 4096")
check(ok, "a shape that does not fit the buffer is refused: %s" % msg)
ok, msg = raises(TypeError, lambda: s.run({"X": x}), "pass (buffer, shape)")
check(ok, "a bare buffer is refused with the form to use: %s" % msg)
ok, msg = raises(TypeError, lambda: s.run({"X": (array.array("d", [0.0] * 1024), [4, 256])}), "not float32")
check(ok, "float64 items are refused: %s" % msg)
ok, msg = raises(ValueError, lambda: ort.set_host_limit(-1), "bytes >= 0")
check(ok, "a negative limit is refused: %s" % msg)
ok, msg = raises(ValueError, lambda: ort.tier_usage(-2), "the host tier")
check(ok, "a bad device is refused: %s" % msg)
ok, msg = raises(dmm._lib.DmmError, lambda: ort.Session(model, library="/nonexistent/libonnxruntime.so.1"),
                 "is open from")
check(ok, "a second ONNX Runtime library in the process is refused: %s" % msg)
ok, msg = raises(TypeError, lambda: ort.Session(42), "path or its bytes")
check(ok, "a model that is neither a path nor bytes is refused: %s" % msg)
fifo = os.path.join(tmp, "fifo")
os.mkfifo(fifo)  # nobody writes it: a read would wait for ever
for hostile in (fifo, "/dev/zero", tmp):
    ok, msg = raises(ValueError, lambda: ort.Session(hostile), "not a regular file")
    check(ok, "model %s is refused unread: %s" % (hostile, msg))
with open(os.path.join(tmp, "sparse.onnx"), "wb") as f:
    f.truncate((2 << 30) + 1)  # a sparse file above the ceiling: refused by its size, not read
ok, msg = raises(ValueError, lambda: ort.Session(os.path.join(tmp, "sparse.onnx")), "more than an ONNX model's 2 GiB")
check(ok, "a model above 2 GiB is refused unread: %s" % msg)

for bad, frag in ((2 ** 64 + 5, "below 2**64"), (-1, "bytes >= 0"), (1.5, "bytes >= 0")):
    ok, msg = raises(ValueError, lambda: ort.set_host_limit(bad), frag)
    check(ok and ort.tier_usage()["limit"] is None, "set_host_limit(%r) is refused, the limit unchanged: %s" % (bad, msg))
ok, msg = raises(ValueError, lambda: ort.tier_usage(2 ** 32 - 1), "0..63")
check(ok, "a device past 63 is refused: %s" % msg)
for shape in ([0, 2 ** 64 + 256], [4.0, 256], "ab"):
    ok, msg = raises(ValueError, lambda: s.run({"X": (x, shape)}), "list of ints")
    check(ok, "shape %r is refused: %s" % (shape, msg))
ok, msg = raises(ValueError, lambda: ort.Session(model, threads=2 ** 31), "2**31 - 1")
check(ok, "threads=2**31 is refused: %s" % msg)
ok, msg = raises(TypeError, lambda: s.run({"X": (array.array("B", bytes(4096)), [4, 256])}), "not float32")
check(ok, "uint8 items are refused (bytes objects are the packed form): %s" % msg)
check(s.run({"X": (bytes(x), [4, 256])})["Y"].data == first.data, "bytes of packed float32 give the same output")

# a session dropped without close() is closed when collected; close() waits for a Run in progress
for _ in range(20):
    ort.Session(model)
gc.collect()
check(ort.usage()["in_use"] <= 2 * held["in_use"] + MIB, "20 sessions dropped without close() gave their "
      "memory back: %s" % ort.usage())
s3 = ort.Session(model)
big_in = array.array("f", bytes(4 * 16384 * 256))
box = {}
worker = threading.Thread(target=lambda: box.update(out=s3.run({"X": (big_in, [16384, 256])})))
worker.start()
time.sleep(0.05)
s3.close()  # waits for the Run
worker.join()
check("out" in box and box["out"]["Y"].shape == (16384, 512), "close() during a Run waits for it to finish")
ok, msg = raises(dmm._lib.DmmError, lambda: s3.run({"X": (x, [4, 256])}), "closed")
check(ok, "and the closed session refuses the next one: %s" % msg)

s.close()
s2.close()
ok, msg = raises(dmm._lib.DmmError, lambda: s.run({"X": (x, [4, 256])}), "closed")
check(ok, "a closed session refuses to run: %s" % msg)
check(ort.usage()["in_use"] == 0, "closing both sessions frees every block: %s" % ort.usage())

shutil.rmtree(tmp, ignore_errors=True)
print("%d check(s) failed" % len(failures) if failures else "all checks held")
sys.exit(1 if failures else 0)
