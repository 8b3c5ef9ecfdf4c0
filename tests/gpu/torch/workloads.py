# SPDX-License-Identifier: Apache-2.0
"""A worker process for test_torch_models.py: python3 workloads.py <native|expandable|dmm> [--bench]

Trains GPT-2 small (20 steps, AdamW, bf16 autocast) and generates with a Llama-style model, both built
from configs (no downloads), with fixed seeds and deterministic kernels; prints one RESULT line with
the losses, the tokens and the allocator's peaks. With --bench it then serves `run <bytes> <default|side>`
lines on stdin, timing torch.empty + del, so that the parent can interleave two allocators' runs.
With DMM_MODELS_RECORD=DIR the native run also writes its training's allocation trace as
DIR/models-train.trace.gz (dmm.trace.from_torch_snapshot), for `dmm replay` and `bench_replay --designs`:
the workload whose peak a design tuned on other traces once raised.
"""

import contextlib
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit  # noqa: E402
from models import deterministic, generate, llama, prompt  # noqa: E402

ALLOC = sys.argv[1]
RECORD = os.environ.get("DMM_MODELS_RECORD") if ALLOC == "native" else None
IS_DMM = ALLOC.startswith("dmm")  # dmm, or dmm-r<permille>: another pool retention (DMM_TORCH_RETAIN)
if IS_DMM:
    import dmm.torch as dt

    dt.enable()
import torch  # noqa: E402


def mem():
    if IS_DMM:
        r = dt.memory_stats_raw()
        pool = r["pool"]
        diag = {k: pool[k] for k in ("grows", "chunks_committed", "chunks_decommitted", "chunks_moved", "trims",
                                     "events_recorded", "events_pending", "cached_mallocs", "mallocs")}
        diag["pool_committed_peak"] = pool["committed_bytes"]["peak"]
        diag["pool_allocated_peak"] = pool["allocated_bytes"]["peak"]
        diag["arena_mapped_peak"] = r["arena"]["mapped_bytes"]["peak"]
        return {"peak_reserved": r["reserved_bytes"]["peak"], "peak_physical": r["physical_bytes"]["peak"],
                "peak_allocated": r["allocated_bytes"]["peak"], "reserved": r["reserved_bytes"]["current"],
                "diag": diag}
    return {"peak_reserved": torch.cuda.max_memory_reserved(), "peak_physical": torch.cuda.max_memory_reserved(),
            "peak_allocated": torch.cuda.max_memory_allocated(), "reserved": torch.cuda.memory_reserved()}


def reset():
    gc.collect()
    if IS_DMM:
        dt.empty_cache()
        dt.reset_peak_memory_stats()
    else:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def train():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config()
    model = GPT2LMHeadModel(cfg).cuda()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.randint(0, cfg.vocab_size, (20, 8, 512), generator=torch.Generator().manual_seed(1))
    losses = []
    torch.cuda.synchronize()
    if RECORD:
        torch.cuda.memory._record_memory_history(context=None, max_entries=4_000_000)
    t0 = time.perf_counter()
    for i in range(20):
        x = data[i].cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    torch.cuda.synchronize()
    res = {"losses": losses, "seconds": time.perf_counter() - t0}
    res.update(mem())
    if RECORD:
        write_trace(os.path.join(RECORD, "models-train.trace.gz"))
    return res


def write_trace(path):
    """The recorded history of device 0 as a dmm trace at `path` (recording stops)."""
    import dmm.trace

    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    dmm.trace.from_torch_snapshot(snap, path, device=0, workload="models-train",
                                  native_peak_reserved=torch.cuda.max_memory_reserved())


def gen_run():
    model, cfg, nbytes = llama(dt.tag("weights") if IS_DMM else None)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    tokens = generate(model, prompt(cfg))
    torch.cuda.synchronize()
    res = {"tokens": tokens, "weights_bytes": nbytes, "seconds": time.perf_counter() - t0}
    res.update(mem())
    return res


_side = None


def bench(nbytes, side, n=2000, batches=5):
    global _side
    ctx = contextlib.nullcontext()
    if side:
        if _side is None:
            _side = torch.cuda.Stream()
        ctx = torch.cuda.stream(_side)
    per = []
    with ctx:
        for _ in range(batches):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
                del x
            per.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(per)


def main():
    deterministic()
    out = {"alloc": ALLOC, "torch": torch.__version__}
    reset()
    out["train"] = train()
    reset()
    out["generate"] = gen_run()
    reset()
    emit(out)
    if "--bench" not in sys.argv:
        return
    torch.utils.deterministic.fill_uninitialized_memory = False  # time the allocator, not a fill kernel
    cpu = int(sys.argv[sys.argv.index("--bench") + 1]) if len(sys.argv) > sys.argv.index("--bench") + 1 else None
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})  # both allocators' runs on the same core: no core-to-core bias
    bench(1 << 20, False, n=5000, batches=1)  # warm up both paths
    bench(1 << 20, True, n=5000, batches=1)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        emit({"ns": bench(int(cmd[1]), cmd[2] == "side")}, tag="BENCH")


if __name__ == "__main__":
    main()
