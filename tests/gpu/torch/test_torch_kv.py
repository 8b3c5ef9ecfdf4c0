# SPDX-License-Identifier: Apache-2.0
"""dmm.kv (python/dmm/kv.py) on a GPU, through libdmm_torch.so's dmm_torch_kv_* calls:

  - a request's cache is a tensor at a fixed address: what prefill writes reads back after the request
    grew by many granules (the address never moved);
  - keys()/values() are the layer's K and V as written (against the prompt itself), and attention over
    them (SDPA, strided, no copy) agrees with attention over the prompt's own K and V;
  - a prefix shared by two requests: both read the prefix's tokens as written, each writes its own
    tokens after it, and the prefix's whole granules are held once (stats: shared vs private bytes);
  - offload and restore: the request's contents come back identical at the same address, although the
    memory was another request's (filled with a sentinel) in between;
  - close refuses while a view is referenced (after close the range may be another request's);
  - closes and the prefix's release report COMPLETE, and the arena ends with nothing open and only its
    reserve held;
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
                     max_requests=8, refill_thread=False)
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

# --- the views are the layer's K and V, and attention over them is attention over the prompt's ---
check(torch.equal(r.keys(2, 64), prompt[:, 2, 0].transpose(0, 1))
      and torch.equal(r.values(2, 64), prompt[:, 2, 1].transpose(0, 1)),
      "keys(2, 64) / values(2, 64) are layer 2's K and V of the prompt, [kv_heads, tokens, head_dim]")
q = torch.randn(1, HEADS, 1, DIM, device="cuda", dtype=torch.bfloat16)
k, v = r.keys(2, 64).unsqueeze(0), r.values(2, 64).unsqueeze(0)
out_view = torch.nn.functional.scaled_dot_product_attention(q, k, v)
ref_k = prompt[:, 2, 0].transpose(0, 1).contiguous().unsqueeze(0)
ref_v = prompt[:, 2, 1].transpose(0, 1).contiguous().unsqueeze(0)
out_ref = torch.nn.functional.scaled_dot_product_attention(q, ref_k, ref_v)
err = (out_view.float() - out_ref.float()).abs().max().item()
print("SDPA over the strided views vs over the prompt's contiguous K, V: max abs difference %.3g" % err)
check(err < 1e-2, "SDPA over the views agrees with SDPA over the prompt's own K and V (%.3g)" % err)
del k, v, out_view

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
ia, ib = a.info(), b.info()
check(ia["private_bytes"] == st["granule"] and ib["private_bytes"] == st["granule"],
      "each request on the prefix holds one private granule of its own (%d, %d)" % (ia["private_bytes"], ib["private_bytes"]))

# --- offload and restore ---
before = a.cache()[:plen + 1].clone()
abase = a.base
a.offload()
check(a.info()["offloaded_bytes"] > 0, "offload holds the request's own bytes on the host")
scratch = arena.open(4 * per_granule)  # takes the granules offload gave back: restore must copy, not find them
scratch.cache()[:4 * per_granule].fill_(7)
torch.cuda.synchronize()
check(scratch.close() == "COMPLETE", "a scratch request filled the freed memory with a sentinel and closed")
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
info_before_refusal = r.info()
try:
    r.grow(MAX + 1)
    check(False, "a grow past max_tokens was refused")
except dmm.DmmError as e:
    check(True, "a grow past max_tokens is refused: %s" % str(e)[:200])
check(r.info() == info_before_refusal, "the refused request is unchanged: %s" % r.info())

# --- a referenced view holds the request open ---
try:
    r.close()
    check(False, "close refuses while the view `kv` is referenced")
except dmm.DmmError as e:
    check("still referenced" in str(e), "close refuses while a view is referenced: %s" % e)
del kv

# --- releases ---
states = [a.close(), b.close(), prefix.release(), r.close()]
check(all(s == "COMPLETE" for s in states), "closes and the prefix's release: %s" % states)
st = arena.stats()
check(st["requests"] == 0 and st["prefixes"] == 0 and st["private_bytes"] == 0 and st["unreleased"] == 0
      and st["owned_bytes"] == st["reserve_bytes"], "nothing open and only the reserve held at the end: %s" % st)
arena.close()
sys.exit(1 if failures else 0)
