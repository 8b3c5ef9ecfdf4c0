# SPDX-License-Identifier: Apache-2.0
"""dmm.kv_kernels (python/dmm/kv_kernels.py) on a GPU: decode attention over KV arena requests in one launch.

  - attention over rows of different lengths (1 to 1,000 tokens; 64 tokens fill a granule here) equals
    PyTorch's SDPA over each request's own views (grouped-query heads), within bf16's rounding;
  - the kernel reads nothing past a row's length: every row is backed up to exactly its tokens' granules and
    the arena has no zero tails, so a read one granule past would be a CUDA fault (the test would crash);
  - write() stores one token's K and V per row at its position, as the views then read;
  - a CUDA graph captured once over Rows replays right after the rows' requests and lengths change (a
    request closed, another opened and grown in its row);
  - bad input (an arena that is not bf16, a layer out of range, heads not a multiple of the KV heads) is
    refused with a sentence.
Exit 0 = all held, 1 = something did not, 77 = no torch/GPU/Triton.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import check, failures, import_or_skip, require_torch_gpu  # noqa: E402

require_torch_gpu()
import_or_skip("triton", "Triton")

import torch  # noqa: E402

import dmm.kv  # noqa: E402
import dmm.kv_kernels as kk  # noqa: E402

torch.manual_seed(0)
L, KVH, D, H = 8, 8, 128, 32  # a token is 2 x 8 x 8 x 128 x 2 B = 32 KiB: 64 tokens a 2 MiB granule
arena = dmm.kv.Arena(layers=L, kv_heads=KVH, head_dim=D, dtype=torch.bfloat16, max_tokens=2048, max_requests=16)
lengths = [1, 63, 64, 65, 640, 1000]
reqs = [arena.open(n) for n in lengths]
per_granule = arena.stats()["granule"] // arena.token_bytes
for r, n in zip(reqs, lengths):
    c = r.cache()
    c[:n].copy_(torch.randn(n, L, 2, KVH, D, device="cuda").to(torch.bfloat16))
    inf = r.info()
    check(inf["backed_tokens"] == -(-n // per_granule) * per_granule and inf["unreadable_bytes"] > 0,
          "a %d-token request is backed to its last granule only (%d tokens), the rest unmapped"
          % (n, inf["backed_tokens"]))
del c  # (a request refuses to close while a view of it is referenced)
B = len(reqs)
rows = kk.Rows(B, arena)
rows.ptrs.copy_(torch.tensor([r.base for r in reqs], dtype=torch.int64))
rows.lens.copy_(torch.tensor(lengths, dtype=torch.int32))
q = torch.randn(B, H, D, device="cuda").to(torch.bfloat16)


def reference(layer, q, reqs, lengths):
    outs = []
    for b, (r, n) in enumerate(zip(reqs, lengths)):
        k, v = r.keys(layer, n).unsqueeze(0).float(), r.values(layer, n).unsqueeze(0).float()
        outs.append(torch.nn.functional.scaled_dot_product_attention(q[b:b + 1, :, None].float(), k, v,
                                                                     enable_gqa=True)[0, :, 0])
    return torch.stack(outs)


worst = 0.0
for layer in (0, 3, L - 1):
    for splits in (1, 8):
        got = kk.attention(q, rows, layer, arena, splits=splits)
        torch.cuda.synchronize()
        worst = max(worst, float((got - reference(layer, q, reqs, lengths)).abs().max()))
check(worst < 2e-2, "attention over rows of 1 to 1,000 tokens equals SDPA per request (max |diff| %.2e)" % worst)

# write: one token per row at its position
rows.pos.copy_(torch.tensor([n - 1 for n in lengths], dtype=torch.int32))
k = torch.randn(B, KVH, 1, D, device="cuda").to(torch.bfloat16)
v = torch.randn(B, KVH, 1, D, device="cuda").to(torch.bfloat16)
kk.write(k, v, rows, 5, arena)
torch.cuda.synchronize()
ok = all(torch.equal(r.cache()[n - 1, 5, 0], k[b, :, 0]) and torch.equal(r.cache()[n - 1, 5, 1], v[b, :, 0])
         for b, (r, n) in enumerate(zip(reqs, lengths)))
check(ok, "write() stores each row's K and V at its position of the layer")

# a graph captured once, replayed after a row's request and lengths change
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    kk.attention(q, rows, 2, arena)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = kk.attention(q, rows, 2, arena)
reqs[1].close()
reqs[1] = arena.open(300)
reqs[1].cache()[:300].copy_(torch.randn(300, L, 2, KVH, D, device="cuda").to(torch.bfloat16))
lengths[1] = 300
rows.ptrs[1] = reqs[1].base
rows.lens.copy_(torch.tensor(lengths, dtype=torch.int32))
g.replay()
torch.cuda.synchronize()
diff = float((out - reference(2, q, reqs, lengths)).abs().max())
check(diff < 2e-2, "a graph captured once reads a row's new request and lengths after they change (|diff| %.2e)" % diff)

# refusals
f32 = dmm.kv.Arena(layers=1, kv_heads=KVH, head_dim=D, dtype=torch.float32, max_tokens=64)
for what, fn, frag in (("a float32 arena", lambda: kk.attention(q, rows, 0, f32), "bf16"),
                       ("a layer out of range", lambda: kk.attention(q, rows, L, arena), "layer must be"),
                       ("heads not a multiple of KV heads", lambda: kk.attention(q[:, :12], rows, 0, arena),
                        "not a multiple")):
    try:
        fn()
        check(False, "%s is refused" % what)
    except ValueError as e:
        check(frag in str(e), "%s is refused: %s" % (what, e))
f32.close()
del out, g
for r in reqs:
    r.close()
arena.close()
sys.exit(1 if failures else 0)
