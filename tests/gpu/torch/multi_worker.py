# SPDX-License-Identifier: Apache-2.0
"""One rank of the two-GPU runs of test_torch_multi.py (not a test: torchrun starts two of these).

usage: torchrun --nproc-per-node 2 multi_worker.py native|dmm OUT.json

Every rank: dmm.torch.enable() first (mode dmm), then NCCL on its own GPU (LOCAL_RANK). Three parts:
  ddp    GPT-2 small (from its config, seeded), DDP, AdamW, bf16 autocast, batch 8 x 1,024 per rank,
         20 steps: the losses, the step times (ms, each step timed after a synchronize), the peak
         reserved (native) or the peak physical (dmm) bytes;
  tp     a tensor-parallel generation: 8 layers whose weights are split by columns then rows over the
         ranks, an all_reduce after each layer, 32 greedy tokens; then all_reduce bus bandwidth of
         a 256 MiB buffer from the allocator (median of 20 after 5 warm-ups);
  sleep  (dmm) the TP weights offloaded and restored on every rank between two generations: the
         bytes the driver got back, the tokens of the second generation.
Rank 0 writes the results as JSON to OUT.json.
"""

import json
import os
import statistics
import sys
import time

mode, out_path = sys.argv[1], sys.argv[2]
if mode == "dmm":
    import dmm.torch as dt

    dt.enable()
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import deterministic  # noqa: E402

deterministic()  # the same kernels in both runs: losses comparable bit for bit

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
dev = torch.device("cuda", local)
res = {"mode": mode, "world": world}


def peak():
    if mode == "dmm":
        return dt.memory_stats_raw(local)["physical_bytes"]["peak"]
    return torch.cuda.max_memory_reserved(local)


# ---- ddp ----
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

torch.manual_seed(0)
cfg = GPT2Config()
model = GPT2LMHeadModel(cfg).to(dev)
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
gen = torch.Generator().manual_seed(1 + rank)
losses, times = [], []
for step in range(20):
    x = torch.randint(0, cfg.vocab_size, (8, 1024), generator=gen).to(dev)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = ddp(input_ids=x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    times.append((time.perf_counter() - t0) * 1e3)
    losses.append(loss.item())
res["ddp"] = {"losses": losses, "step_ms": times, "median_ms": statistics.median(times[2:]), "peak": peak()}
del ddp, model, opt
torch.cuda.synchronize()
if mode == "dmm":
    dt.empty_cache(local)
else:
    torch.cuda.empty_cache()

# ---- tp ----
D, L, V, T = 4096, 8, 2048, 32


def tp_weights():
    g = torch.Generator(device="cpu").manual_seed(7)
    ws = []
    for _ in range(L):
        a = torch.randn(D, D, generator=g) / D ** 0.5   # columns split: D x D/world per rank
        b = torch.randn(D, D, generator=g) / D ** 0.5   # rows split: D/world x D per rank
        part = D // world
        ws.append((a[:, rank * part:(rank + 1) * part].contiguous().to(dev),
                   b[rank * part:(rank + 1) * part, :].contiguous().to(dev)))
    emb = (torch.randn(V, D, generator=g) / D ** 0.5).to(dev)
    return ws, emb


def tp_generate(ws, emb, n=T):
    tok, out = torch.tensor([5], device=dev), []
    with torch.no_grad():
        for _ in range(n):
            h = emb[tok]
            for a, b in ws:
                part = torch.relu(h @ a) @ b
                dist.all_reduce(part)
                h = torch.tanh(h + part)
            tok = (h @ emb.t()).argmax(-1)
            out.append(int(tok.item()))
    return out


if mode == "dmm":
    with dt.tag("tp_weights"):
        ws, emb = tp_weights()
else:
    ws, emb = tp_weights()
res["tp"] = {"tokens": tp_generate(ws, emb)}
buf = torch.ones(256 << 20 >> 2, device=dev)   # 256 MiB from the allocator
for _ in range(5):
    dist.all_reduce(buf)
torch.cuda.synchronize()
samples = []
for _ in range(20):
    t0 = time.perf_counter()
    dist.all_reduce(buf)
    torch.cuda.synchronize()
    samples.append(time.perf_counter() - t0)
t = statistics.median(samples)
res["tp"]["busbw_gbs"] = 2.0 * (world - 1) / world * buf.nbytes / t / 1e9
del buf

# ---- sleep ----
if mode == "dmm":
    weights_bytes = sum(a.nbytes + b.nbytes for a, b in ws) + emb.nbytes
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info(local)[0]
    dt.offload("tp_weights", wait=True)
    free1 = torch.cuda.mem_get_info(local)[0]
    dist.barrier()
    dt.restore("tp_weights")
    res["sleep"] = {"weights_bytes": weights_bytes, "freed": free1 - free0, "tokens": tp_generate(ws, emb)}

gathered = [None] * world
dist.all_gather_object(gathered, res)
if rank == 0:
    with open(out_path, "w") as f:
        json.dump(gathered, f)
dist.destroy_process_group()
