# SPDX-License-Identifier: Apache-2.0
"""dmm.kv (python/dmm/kv.py) on a GPU, through libdmm_torch.so's dmm_torch_kv_* calls:

  - a request's cache is a tensor at a fixed address: what prefill writes reads back after the request
    grew by many granules (the address never moved);
  - attention over keys()/values() views (SDPA, strided, no copy) equals attention over contiguous copies;
  - a prefix shared by two requests: both read the prefix's tokens as written, each writes its own
    tokens after it, and the prefix's whole granules are held once (stats: shared vs private bytes);
  - offload and restore: the request's contents come back identical at the same address;
  - closes and the prefix's release report COMPLETE, and the arena ends with nothing open or held;
  - bad arguments raise TypeError / ValueError naming the argument, and a request past max_tokens is
    refused with dmm's sentence (a DmmError), the request unchanged.

Prints every number. Exit 0 = all held, 1 = something did not, 77 = no torch/GPU.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import check, failures, require_torch_gpu  # noqa: E402

require_torch_gpu()

import torch  # noqa: E402

import dmm  # noqa: E402
import dmm.kv  # noqa: E402

torch.manual_seed(0)
LAYERS, HEADS, DIM, MAX = 4, 8, 128, 4096
arena = dmm.kv.Arena(layers=LAYERS, kv_heads=HEADS, head_dim=DIM, dtype=torch.bfloat16, max_tokens=MAX,
                     max_requests=8)
st = arena.stats()
print("arena: token_bytes %d, granule %d, range %d MiB" % (arena.token_bytes, st["granule"], st["range_bytes"] >> 20))
per_granule = st["granule"] // arena.token_bytes

# --- a request grows under a fixed address ---
r = arena.open(64)
base = r.base
kv = r.cache()
prompt = torch.randn(64, LAYERS, 2, HEADS, DIM, device="cuda", dtype=torch.bfloat16)
kv[:64].copy_(prompt)
grown = 64 + 20 * per_granule
r.grow(grown)
kv[64:grown].fill_(1)
torch.cuda.synchronize()
check(r.base == base, "the request's base stays %#x after growing to %d tokens (is %#x)" % (base, grown, r.base))
check(torch.equal(r.cache()[:64], prompt), "the prompt's K and V read back after growth")
info = r.info()
check(info["backed_tokens"] >= grown, "backed_tokens %d >= %d" % (info["backed_tokens"], grown))

# --- attention over strided views equals attention over copies ---
q = torch.randn(1, HEADS, 1, DIM, device="cuda", dtype=torch.bfloat16)
k, v = r.keys(2, grown).unsqueeze(0), r.values(2, grown).unsqueeze(0)
out_view = torch.nn.functional.scaled_dot_product_attention(q, k, v)
out_copy = torch.nn.functional.scaled_dot_product_attention(q, k.contiguous(), v.contiguous())
check(torch.equal(out_view, out_copy), "SDPA over the views equals SDPA over contiguous copies")

# --- a prefix held once, two requests on it ---
plen = 3 * per_granule + 5
r.grow(plen)
prefix = arena.share(r, plen)
a = arena.open(plen + 1, prefix=prefix)
b = arena.open(plen + 1, prefix=prefix)
want = r.cache()[:plen].clone()
a.cache()[plen].fill_(2)
b.cache()[plen].fill_(3)
torch.cuda.synchronize()
check(torch.equal(a.cache()[:plen], want) and torch.equal(b.cache()[:plen], want),
      "both requests read the prefix's %d tokens as written" % plen)
check(bool((a.cache()[plen] == 2).all()) and bool((b.cache()[plen] == 3).all()),
      "each request's own token after the prefix is its own")
st = arena.stats()
print("with a prefix and two requests on it: %s" % {n: st[n] for n in ("private_bytes", "shared_bytes",
                                                                     "mapped_shared_bytes", "owned_bytes")})
check(st["mapped_shared_bytes"] >= 2 * 3 * st["granule"], "the prefix's whole granules are mapped into both")
check(st["shared_bytes"] <= 4 * st["granule"], "and held once (%d bytes)" % st["shared_bytes"])

# --- offload and restore ---
before = a.cache()[:plen + 1].clone()
abase = a.base
a.offload()
check(a.info()["offloaded_bytes"] > 0, "offload holds the request's own bytes on the host")
a.restore()
torch.cuda.synchronize()
check(a.base == abase and torch.equal(a.cache()[:plen + 1], before), "restore brings the same contents back in place")

# --- bad arguments and a refusal ---
for bad, exc in (("x", TypeError), (-1, ValueError)):
    try:
        r.grow(bad)
        check(False, "grow(%r) raised" % (bad,))
    except exc as e:
        check("tokens" in str(e), "grow(%r) raises %s naming tokens: %s" % (bad, exc.__name__, e))
try:
    r.grow(MAX + 1)
    check(False, "a grow past max_tokens was refused")
except dmm.DmmError as e:
    check(True, "a grow past max_tokens is refused: %s" % str(e)[:200])
check(r.info()["backed_tokens"] < MAX + 1, "the refused request is unchanged")

# --- releases ---
states = [a.close(), b.close(), prefix.release(), r.close()]
check(all(s == "COMPLETE" for s in states), "closes and the prefix's release: %s" % states)
st = arena.stats()
check(st["requests"] == 0 and st["prefixes"] == 0 and st["private_bytes"] == 0 and st["unreleased"] == 0,
      "nothing open or held at the end: %s" % st)
arena.close()
sys.exit(1 if failures else 0)
