# SPDX-License-Identifier: Apache-2.0
"""dmm.buffer (python/dmm/_buffer.py) on a GPU: one dmm allocation handed to torch, CuPy and JAX without a
copy, under the same device front and budget as dmm.torch's tensors.

  - torch.from_dlpack(buf) is a uint8 tensor at the buffer's address on its device; what torch writes,
    torch.as_tensor(buf) (through __cuda_array_interface__) reads at the same address;
  - the memory is charged to the device (stats: allocated bytes rise by the buffer and fall when the
    Buffer and its last consumer are gone, in that order: not before);
  - a buffer past the device's limit (dmm.torch.set_limit) is refused with a DmmError, nothing held;
  - CuPy (cupy.from_dlpack) and JAX (jax.dlpack.from_dlpack, XLA_PYTHON_CLIENT_PREALLOCATE=false) read
    the bytes torch wrote, where they are importable (each says SKIP otherwise).
Exit 0 = all held, 1 = something did not, 77 = no torch/GPU.
"""

import gc
import json
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import check, failures, require_torch_gpu  # noqa: E402

require_torch_gpu()

import torch  # noqa: E402

import dmm  # noqa: E402
import dmm._lib  # noqa: E402

N = 8 << 20


def allocated():
    """The device's live bytes (dmm's stats: allocated_bytes.current)."""
    st = json.loads(dmm._lib.json_call(dmm._lib.load().dmm_torch_stats_json, 0))
    return st["allocated_bytes"]["current"]


before = allocated()
buf = dmm.buffer(N, device=0)
print("%r" % buf)
t = torch.from_dlpack(buf)
check(t.dtype == torch.uint8 and t.numel() == N and t.device == torch.device("cuda", 0) and t.data_ptr() == buf.ptr,
      "torch.from_dlpack(buf) is a uint8 tensor of %d bytes at %#x on cuda:0" % (N, buf.ptr))
t.copy_(torch.arange(N, device="cuda", dtype=torch.int64).remainder(251).to(torch.uint8))
torch.cuda.synchronize()
u = torch.as_tensor(buf, device="cuda")
check(u.data_ptr() == buf.ptr and torch.equal(u, t), "__cuda_array_interface__ reads what torch wrote, in place")
during = allocated()
print("device live bytes: %d before, %d with the buffer" % (before, during))
check(during - before >= N, "the buffer is dmm memory of the device (live bytes rose by %d)" % (during - before))

# --- a consumer on a side stream is ordered after the buffer's stream (dmm_torch_stream_wait) ---
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    w = torch.from_dlpack(buf)  # torch passes its current stream: the side one
    check(w.data_ptr() == buf.ptr and torch.equal(w[:4096], u[:4096]), "a side-stream consumer reads the same bytes")
torch.cuda.synchronize()
del w

# --- other frameworks, where importable ---
try:
    import cupy
except Exception as e:  # noqa: BLE001
    print("SKIP CuPy: %s" % e)
else:
    c = cupy.from_dlpack(buf)
    check(int(c.data.ptr) == buf.ptr and bool((cupy.asnumpy(c[:1000]) == t[:1000].cpu().numpy()).all()),
          "CuPy reads the same bytes at the same address")
    del c
try:
    import jax
    import jax.dlpack

    jax.devices("gpu")  # a CPU-only jax imports but has no GPU backend: that is a SKIP, not a failure
except Exception as e:  # noqa: BLE001
    print("SKIP JAX: %s" % e)
else:
    try:
        x = jax.dlpack.from_dlpack(buf)
        check(bool((jax.device_get(x[:1000]) == t[:1000].cpu().numpy()).all()), "JAX reads the bytes torch wrote")
        del x
    except Exception as e:  # noqa: BLE001
        check(False, "JAX takes the buffer through DLPack: %s" % e)

# --- the memory goes when the Buffer and the last consumer are gone ---
ptr = buf.ptr
del buf, u
gc.collect()
torch.cuda.synchronize()
t[0] = 7  # the DLPack consumer still holds it: the memory is there
torch.cuda.synchronize()
check(int(t[0]) == 7 and allocated() - before >= N, "a consumer keeps the memory after the Buffer is gone")
del t
gc.collect()
import time  # noqa: E402

import dmm._dlpack  # noqa: E402

for _ in range(200):  # XLA deletes a DLPack tensor from its own thread once its work is done: wait for it
    if dmm._dlpack.live() == 0:
        break
    time.sleep(0.01)
check(dmm._dlpack.live() == 0 and allocated() - before < N,
      "the memory goes with the last consumer (claims left %d; live bytes %d over the start)"
      % (dmm._dlpack.live(), allocated() - before))
again = dmm.buffer(N, device=0)
print("a new buffer after all let go: %#x (the old one was %#x)" % (again.ptr, ptr))
del again
gc.collect()

# --- a buffer past the limit ---

try:
    dmm._lib.check(dmm._lib.load().dmm_torch_set_limit(0, 64 << 20), "set_limit")
    try:
        dmm.buffer(256 << 20, device=0)
        check(False, "a buffer past the 64 MiB limit is refused")
    except dmm.DmmError as e:
        check("256" in str(e) or "268435456" in str(e), "a buffer past the limit is refused: %s" % str(e)[:300])
finally:
    dmm._lib.load().dmm_torch_set_limit(0, 0)
sys.exit(1 if failures else 0)
