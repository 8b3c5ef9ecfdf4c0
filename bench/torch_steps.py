# SPDX-License-Identifier: Apache-2.0
"""Step times of real PyTorch workloads under dmm, PyTorch's native allocator and expandable segments
(issue 10's acceptance 0 and 4), each run a process of its own, runs interleaved across the modes:

  python3 bench/torch_steps.py [--runs N] [--steps S] [--workloads gpt2,vit,llama] [--modes native,expandable,dmm]
                               [--regrowths K] [--record DIR] [--json FILE]

A mode dmm-s<N> runs dmm with DMM_TORCH_SETTLE=N (dmm-s20: the retention limit fixed, as before settling);
dmm-h<MiB>x<D>[m<MIN>[f<F>]] with DMM_TORCH_HANDLES=<MiB << 20>,<D>,<MIN << 20>,<F> (handles up to MiB, at most
a D-th of the request, at least MIN MiB or an F-th of the live peak; without m: no floor, e.g. dmm-h32x8 = the
default before the 8 MiB floor; without f: a fixed floor, e.g. dmm-h32x8m8 = the default; dmm-h64x8m8f256 the
rising floor measured against it);
dmm-p with DMM_TORCH_PLAN=1 and DMM_TORCH_SETTLE=25 (each stream's heap follows a plan of its loop; an
explicit dmm-s<N> part sets another settle);
dmm-a<MiB> with DMM_TORCH_STOCK=<MiB << 20> (the stock thread keeps up to MiB, at most 1/128 of the live
peak, committed ahead of the growth); dmm-r<N> with DMM_TORCH_RETAIN=N (free memory kept mapped, permille of the live peak); dmm-w with a warm
start: before the first step the pool commits the physical peak of dmm-w's last run (dmm.torch.warm),
the "last run" being one unmeasured dmm-w run made first (its cost is printed apart: it is paid before
the first step); dmm-L with a warm layout: before the first step the pool commits, each at its own place,
the handles dmm-L's last run grew through (dmm.torch.layout and warm_layout: what dmm.torch.warm_start
does), and the first step's share of them taken is printed. Parts join with "+": dmm-a256+h256x2m8 is
the stock and those handles together.

Workloads (models built from configs, no downloads; random data; fixed shapes, so every step repeats,
unless said otherwise):
  gpt2   GPT-2 small training, AdamW, bf16 autocast, batch 8 x 1,024 tokens
  vit    ViT-Base/16 training, AdamW, bf16 autocast, batch 64 x 224 x 224
  llama  a Llama-style model (16 layers, hidden 2048, bf16) generating: a step is one greedy round of
         4 x 64 new tokens after a 128-token prompt
  llama-var  the same model, rounds of varying batch and prompt (4x128, 8x64, 2x256, 6x96; 16 new tokens)
  moe    a Mixtral-style MoE (hidden 1024, 8 layers, 8 experts, top-2, bf16) generating the same rounds
  bert   BERT-base fp16 inference over random batch (8-64) x sequence (32-512): shapes never repeat
  bw     memory-bound kernels (matrix-vector products over 1 GiB of bf16 weights, a 256 MiB copy) over memory
         allocated once: the bandwidth of the allocator's mappings, e.g. dmm against dmm-h0 (2 MiB handles)
A step's time is wall time from its start to a synchronize after it (what the user waits for); a loop's time
is the sum of its steps'.
--regrowths K adds, in each process after its steps, K more first steps, each of a fresh model after the
cache was emptied: a growth from the model's memory again without CUDA's lazy initialisation, which the
process's real first step also pays (the allocator's share of that step, K samples per process; not in
dmm-w and dmm-L, whose warm start the first emptied cache undoes).

Prints per workload and mode: the first step (median over runs), the steady step (median over runs of
each run's median of steps 3..S), peak physical (dmm: every physical handle it holds; torch: peak
reserved), peak live (the tensors' bytes at their peak: no allocator's physical peak can be lower; in
parentheses, like peak physical, a ratio to the first mode's peak physical), and for dmm the driver calls (create + map + set-access + unmap + release) per steady step
and in the first step. --json FILE keeps every run's numbers, rewritten after each run, so that a run cut
short (a time limit) leaves what it measured; --summarize FILE prints the table from such a file.
--record DIR also writes, from the first native run, each workload's
allocation trace in dmm's trace format (DIR/<workload>-steps.trace.gz), so that `dmm replay
--repeat K --lag N` can be held against the real run. Needs torch with a GPU and transformers; exits
77 (skipped) without them.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DRIVER_KEYS = ("driver_create", "driver_map", "driver_set_access", "driver_unmap", "driver_release")


# ---------------------------------------------------------------- the worker (one mode, one process)

def driver_calls(dt):
    if dt is None:
        return 0
    pool = dt.memory_stats_raw()["pool"]
    return sum(int(pool.get(k, 0)) for k in DRIVER_KEYS)


def peaks(dt, torch):
    if dt is not None:
        r = dt.memory_stats_raw()
        return {"peak_physical": r["physical_bytes"]["peak"], "peak_allocated": r["allocated_bytes"]["peak"]}
    return {"peak_physical": torch.cuda.max_memory_reserved(), "peak_allocated": torch.cuda.max_memory_allocated()}


POOL_KEYS = ("grows", "chunks_committed", "chunks_moved", "chunks_aliased", "chunks_decommitted") + DRIVER_KEYS + (
    "driver_ns", "slow_path_ns", "stock_grows", "stock_ns", "stock_wait_ns", "layout_adopted", "layout_released")
TIME_KEYS = ("driver_ns", "slow_path_ns", "stock_ns", "stock_wait_ns")


def pool_counters(dt):
    pool = dt.memory_stats_raw()["pool"]
    return {k: int(pool.get(k, 0)) for k in POOL_KEYS}


def torch_segments(torch):
    """Native and expandable modes: the segments torch's allocator created so far (one cudaMalloc, or
    one expandable segment's growth, each) and those it freed."""
    st = torch.cuda.memory_stats()
    return {"segments_created": int(st.get("segment.all.allocated", 0)),
            "segments_freed": int(st.get("segment.all.freed", 0))}


def profile_path(workload, kind="profile"):
    return os.path.join(os.environ["DMM_STEPS_PROFILE_DIR"], "%s.%s" % (workload, kind))


def warm_start(dt, torch, mode, workload):
    """dmm-w: the pool commits the last run's physical peak before the first step (the warm-start
    profile, python/dmm/profile.py, and dmm.torch.warm: what dmm.torch.warm_start does for a process of
    one workload); returns what that cost, or None where there is no last run yet (the priming run) or
    another mode."""
    if dt is None:  # a torch-only mode: no warm start (and no dmm package on the path)
        return None
    from dmm import profile

    if mode == "dmm-L":  # the warm layout: the last run's handles, each at its place
        path = profile_path(workload, "layout")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            spans = json.load(f)
        t0 = time.perf_counter()
        committed = dt.warm_layout(spans)
        torch.cuda.synchronize()
        return {"target": sum(s[1] for s in spans), "committed": committed, "spans": len(spans),
                "ms": (time.perf_counter() - t0) * 1e3}
    if mode != "dmm-w":
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    target = profile.read(profile_path(workload), props.name, props.total_memory)
    if target is None:
        return None
    t0 = time.perf_counter()
    committed = dt.warm(target)
    torch.cuda.synchronize()
    return {"target": target, "committed": committed, "ms": (time.perf_counter() - t0) * 1e3}


def reset(dt, torch):
    import gc

    gc.collect()
    if dt is not None:
        dt.empty_cache()
        dt.reset_peak_memory_stats()
    else:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def fresh_model(dt, torch, workload):
    """The workload's model and step function, built with seed 0 after the cache was emptied, and the
    cache emptied again after the build: the first step grows from the model's own memory."""
    reset(dt, torch)
    torch.manual_seed(0)
    model, step = MAKERS[workload](torch)
    torch.cuda.synchronize()
    reset(dt, torch)
    return model, step


def since(counters, before):
    """What each of counters() rose by since `before`."""
    after = counters()
    return {k: after[k] - before[k] for k in after}


def training_step(torch, model, opt, inputs):
    """One bf16 AdamW training step of a transformers model; inputs(i) gives step i's keyword arguments,
    already on the GPU."""

    def step(i):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**inputs(i)).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


def make_gpt2(torch):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config()
    model = GPT2LMHeadModel(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, cfg.vocab_size, (8, 1024), generator=g) for _ in range(4)]

    def inputs(i):
        x = data[i % len(data)].cuda(non_blocking=True)
        return {"input_ids": x, "labels": x}

    return model, training_step(torch, model, opt, inputs)


def make_vit(torch):
    from transformers import ViTConfig, ViTForImageClassification

    model = ViTForImageClassification(ViTConfig(num_labels=1000)).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(64, 3, 224, 224, generator=g), torch.randint(0, 1000, (64,), generator=g)) for _ in range(2)]

    def inputs(i):
        x, y = data[i % len(data)]
        return {"pixel_values": x.cuda(non_blocking=True), "labels": y.cuda(non_blocking=True)}

    return model, training_step(torch, model, opt, inputs)


def make_llama(torch):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=1024)
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(torch.float32)
    ids = torch.randint(3, cfg.vocab_size, (4, 128), generator=torch.Generator().manual_seed(2)).cuda()

    def step(i):
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, min_new_tokens=64,
                                 do_sample=False, pad_token_id=0)
        return int(out[0, -1])

    return model, step


def generate_rounds(torch, model, vocab, shapes, new_tokens):
    """A step per generate round, the rounds' (batch, prompt) cycling through `shapes` (a serving engine's
    varying requests; the loop repeats every len(shapes) steps)."""
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, vocab, (b, n), generator=g) for b, n in shapes]

    def step(i):
        ids = prompts[i % len(prompts)].cuda()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
        return int(out[0, -1])

    return step


def bf16_on_gpu(torch, build):
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            return build().eval()
    finally:
        torch.set_default_dtype(torch.float32)


def make_llama_var(torch):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=1024)
    model = bf16_on_gpu(torch, lambda: LlamaForCausalLM(cfg))
    return model, generate_rounds(torch, model, cfg.vocab_size, [(4, 128), (8, 64), (2, 256), (6, 96)], 16)


def make_moe(torch):
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(vocab_size=32000, hidden_size=1024, intermediate_size=3584, num_hidden_layers=8,
                        num_attention_heads=16, num_key_value_heads=4, num_local_experts=8, num_experts_per_tok=2,
                        max_position_embeddings=1024)
    model = bf16_on_gpu(torch, lambda: MixtralForCausalLM(cfg))
    return model, generate_rounds(torch, model, cfg.vocab_size, [(4, 128), (8, 64), (2, 256), (6, 96)], 16)


def make_bert(torch):
    """BERT-base fp16 inference over batches of random batch x sequence length (shapes never repeat)."""
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(num_labels=2)
    model = BertForSequenceClassification(cfg).cuda().half().eval()
    g = torch.Generator().manual_seed(3)

    def step(i):
        b = int(torch.randint(8, 65, (1,), generator=g))
        n = int(torch.randint(32, 513, (1,), generator=g))
        x = torch.randint(0, cfg.vocab_size, (b, n), generator=g).cuda()
        with torch.no_grad():
            return float(model(input_ids=x).logits.float().sum())

    return model, step


def make_bw(torch):
    """The bandwidth of the memory the allocator hands out: 16 bf16 matrices of 4,096 x 8,192 (1 GiB, allocated
    once, as a model's weights are: under dmm in handles of the mode's sizes), each read by a matrix-vector
    product 32 times a step, and a 256 MiB tensor copied 8 times. Nothing is allocated in a step but the
    products' outputs, so a step's time is that of memory-bound kernels over the allocator's mappings."""
    ws = [torch.randn(4096, 8192, dtype=torch.bfloat16, device="cuda") for _ in range(16)]
    x = torch.randn(8192, dtype=torch.bfloat16, device="cuda")
    a = torch.randn(128 << 20, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)

    def step(i):
        y = None
        for _ in range(32):
            for w in ws:
                y = w @ x
        for _ in range(8):
            b.copy_(a)
        return float(y.float().sum())

    return (ws, a, b), step


MAKERS = {"gpt2": make_gpt2, "vit": make_vit, "llama": make_llama, "llama-var": make_llama_var, "moe": make_moe,
          "bert": make_bert, "bw": make_bw}


def write_trace(snapshot, path, workload, reserved):
    """The device-0 allocation history of torch's snapshot as a dmm trace (dmm.trace.from_torch_snapshot:
    the one converter; its header's native_peak_allocated counts the blocks live before the history)."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import dmm.trace

    dmm.trace.from_torch_snapshot(snapshot, path, device=0, workload="%s-steps" % workload,
                                  native_peak_reserved=reserved)


def worker(mode, workloads, steps, record, regrow):
    dt = None
    if mode.startswith("dmm"):
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import dmm.torch as dt_mod

        dt = dt_mod
        dt.enable()
    import torch

    out = {"mode": mode, "torch": torch.__version__, "workloads": {}}
    for w in workloads:
        model, step = fresh_model(dt, torch, w)
        warm = warm_start(dt, torch, mode, w)
        if record and mode == "native":
            torch.cuda.memory._record_memory_history(context=None, max_entries=4_000_000)
        times, calls = [], []
        counters = (lambda: pool_counters(dt)) if dt is not None else (lambda: torch_segments(torch))
        before = counters()
        for i in range(steps):
            c0 = driver_calls(dt)
            t0 = time.perf_counter()
            step(i)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            calls.append(driver_calls(dt) - c0)
            if i == 0:
                first = since(counters, before)
        res = {"step_ms": times, "driver_calls": calls, "first_pool" if dt is not None else "first_torch": first}
        if warm is not None:
            res["warm"] = warm
        if mode == "dmm-w" and warm is None:  # the priming run: its peak is the next runs' warm start
            dt.save_profile(profile_path(w))
        if mode == "dmm-L" and warm is None:  # the priming run: its layout is the next runs' warm layout
            with open(profile_path(w, "layout"), "w") as f:
                json.dump(dt.layout(), f)
        res.update(peaks(dt, torch))
        if record and mode == "native":
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            write_trace(snap, os.path.join(record, "%s-steps.trace.gz" % w), w, torch.cuda.max_memory_reserved())
        if dt is not None:
            res["pool"] = pool_counters(dt)
        out["workloads"][w] = res
        del model, step
        if mode not in ("dmm-w", "dmm-L"):  # (a warm start's memory would be gone after the first empty_cache)
            res["regrowth"] = regrowths(dt, torch, w, regrow, counters)
    print("RESULT " + json.dumps(out), flush=True)


def regrowths(dt, torch, workload, n, counters):
    """--regrowths: n more first steps in this process, each of a fresh model after the cache was emptied,
    so that each grows from the model's own memory again, but without CUDA's and the libraries' lazy
    initialisation (paid by the process's real first step): the allocator's growth alone, at a fraction of
    a process's cost. dmm's pool keeps its live peak and settled limit across the emptied cache, as in any
    process that drops a model and builds another. Returns each one's time and growth counters."""
    out = []
    for _ in range(n):
        model, step = fresh_model(dt, torch, workload)  # the caller dropped the previous one: its memory goes too
        before = counters()
        t0 = time.perf_counter()
        step(0)
        torch.cuda.synchronize()
        one = {"ms": (time.perf_counter() - t0) * 1e3}
        one.update(since(counters, before))
        out.append(one)
        del model, step
    return out


# ---------------------------------------------------------------- the parent

def env_for(mode):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env["PYTHONUNBUFFERED"] = "1"
    if mode == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    for part in mode.split("+"):  # dmm-a256+h128x8m8: the stock and other handles together
        part = part if part.startswith("dmm") else "dmm-" + part
        if part.startswith("dmm-s"):  # dmm-s<permille>: another settle limit (DMM_TORCH_SETTLE; 20 = fixed)
            env["DMM_TORCH_SETTLE"] = part[len("dmm-s"):]
        if part.startswith("dmm-r"):  # dmm-r<permille>: another retention (DMM_TORCH_RETAIN; 1000: no moves at all)
            env["DMM_TORCH_RETAIN"] = part[len("dmm-r"):]
        if part == "dmm-p":  # dmm-p: the plan of a loop, under a retention limit that rises to 2.5 % (DMM_TORCH_PLAN)
            env["DMM_TORCH_PLAN"] = "1"
            env.setdefault("DMM_TORCH_SETTLE", "25")
        if part.startswith("dmm-a"):  # dmm-a<MiB>: a stock of MiB ahead of the growth (DMM_TORCH_STOCK)
            env["DMM_TORCH_STOCK"] = str(int(part[len("dmm-a"):]) << 20)
        if part.startswith("dmm-h"):  # dmm-h<MiB>x<D>[m<MiB>[f<F>]]: other handles (DMM_TORCH_HANDLES=MAX,D,MIN,F)
            mib_, _, rest = part[len("dmm-h"):].partition("x")
            div, _, rest = rest.partition("m")
            floor, _, floor_div = rest.partition("f")
            env["DMM_TORCH_HANDLES"] = "%d,%s,%d,%s" % (int(mib_) << 20, div or "0", int(floor or "0") << 20,
                                                        floor_div or "0")
    return env


def summarize(runs, workloads, steps):
    """The table: per workload and mode, medians over the runs of `runs` (mode -> the runs' results)."""
    modes = [m for m in runs if runs[m]]
    nruns = max(len(runs[m]) for m in modes)
    print("\ntorch %s, %d runs per mode, %d steps, steady = steps 3..%d" % (runs[modes[0]][0]["torch"], nruns,
                                                                           steps, steps))
    for w in workloads:
        ref = ref_regrowth = None
        for m in modes:
            rs = [x["workloads"][w] for x in runs[m]]
            first = statistics.median(x["step_ms"][0] for x in rs)
            steady = statistics.median(statistics.median(x["step_ms"][2:]) for x in rs)
            phys = statistics.median(x["peak_physical"] for x in rs)
            live = statistics.median(x["peak_allocated"] for x in rs)
            loop = statistics.median(sum(x["step_ms"]) for x in rs)
            if ref is None or len(ref) < 4:
                ref = (first, steady, phys, loop)
            line = ("%-6s %-10s loop %8.1f ms (%.3f)  first step %7.1f ms (%.3f)  steady step %6.1f ms (%.3f)  "
                    "peak physical %8.1f MiB (%.3f)  peak live %8.1f MiB (%.3f)") % (
                w, m, loop, loop / ref[3], first, first / ref[0], steady, steady / ref[1], phys / 2**20,
                phys / ref[2], live / 2**20, live / ref[2])
            if m.startswith("dmm"):
                line += "  driver calls: first step %d, per steady step %s" % (
                    statistics.median(x["driver_calls"][0] for x in rs),
                    "/".join("%d" % statistics.median(x["driver_calls"][i] for x in rs) for i in range(2, steps)))
            print(line)
            if m.startswith("dmm"):
                fp = {k: statistics.median(x["first_pool"][k] for x in rs) for k in POOL_KEYS}
                print("       %-10s first step: %s; %.1f ms on malloc's slow path (%.1f of it waiting for the stock), "
                      "%.1f ms in driver calls, %.1f ms in the stock thread (medians)" % (
                          "", ", ".join("%s %d" % (k, fp[k]) for k in POOL_KEYS if k not in TIME_KEYS),
                          fp["slow_path_ns"] / 1e6, fp["stock_wait_ns"] / 1e6, fp["driver_ns"] / 1e6,
                          fp["stock_ns"] / 1e6))
            else:
                ft = {k: statistics.median(x["first_torch"][k] for x in rs) for k in ("segments_created",
                                                                                       "segments_freed")}
                print("       %-10s first step: %d segments created, %d freed (medians)" % (
                    "", ft["segments_created"], ft["segments_freed"]))
            regrown = [g for x in rs for g in x.get("regrowth", [])]
            if regrown:
                rg = statistics.median(g["ms"] for g in regrown)
                if ref_regrowth is None:
                    ref_regrowth = rg
                what = ("%d handles, %d malloc growths, %d stock growths, %.1f ms in driver calls, %.1f ms on "
                        "malloc's slow path (%.1f of it waiting for the stock), %.1f ms in the stock thread" % tuple(
                            statistics.median(g[k] for g in regrown) / (1e6 if k.endswith("_ns") else 1)
                            for k in ("driver_create", "grows", "stock_grows", "driver_ns", "slow_path_ns",
                                      "stock_wait_ns", "stock_ns"))
                        if m.startswith("dmm") else
                        "%d segments" % statistics.median(g["segments_created"] for g in regrown))
                print("       %-10s regrowth: a fresh model's first step %.1f ms (%.3f; %d of them, %.0f-%.0f), "
                      "%s (medians)" % ("", rg, rg / ref_regrowth, len(regrown), min(g["ms"] for g in regrown),
                                        max(g["ms"] for g in regrown), what))
            if m in ("dmm-w", "dmm-L"):
                print("       %-10s warm start before the first step: %.1f ms, %.1f MiB committed (medians)" % (
                    "", statistics.median(x["warm"]["ms"] for x in rs),
                    statistics.median(x["warm"]["committed"] for x in rs) / 2**20))
            if m == "dmm-L":
                print("       %-10s warm layout: %d spans; the first step took %s of them, gave %s back unused" % (
                    "", rs[0]["warm"]["spans"], "/".join(str(x["first_pool"].get("layout_adopted", 0)) for x in rs),
                    "/".join(str(x["first_pool"].get("layout_released", 0)) for x in rs)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--regrowths", type=int, default=0,
                    help="per process, this many more first steps of a fresh model (growth without lazy init)")
    ap.add_argument("--workloads", default="gpt2,vit,llama")
    ap.add_argument("--modes", default="native,expandable,dmm")
    ap.add_argument("--record", default=None, help="a folder: write the native run's traces there")
    ap.add_argument("--json", default=None, help="write every run's numbers there (after each run)")
    ap.add_argument("--summarize", default=None, metavar="JSON",
                    help="print the table of the runs a --json file holds (a run cut short included), run nothing")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.summarize:
        with open(a.summarize) as f:
            saved = json.load(f)
        some = next(r for rs in saved.values() for r in rs)
        summarize(saved, list(some["workloads"]), len(next(iter(some["workloads"].values()))["step_ms"]))
        return
    workloads = [w for w in a.workloads.split(",") if w]
    for w in workloads:
        if w not in MAKERS:
            sys.exit("torch_steps: unknown workload '%s' (known: %s)" % (w, ", ".join(MAKERS)))
    if a.worker:
        worker(a.worker, workloads, a.steps, a.record, a.regrowths)
        return
    if a.steps < 3:
        sys.exit("torch_steps: --steps must be at least 3 (the steady state is steps 3..S)")
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except Exception as e:  # noqa: BLE001
        print("SKIP: torch or transformers is not importable (%s)" % e)
        sys.exit(77)
    if a.record:
        os.makedirs(a.record, exist_ok=True)
    modes = [m for m in a.modes.split(",") if m]
    runs = {m: [] for m in modes}
    for warm_mode in ("dmm-w", "dmm-L"):  # a warm start's "last run": one unmeasured run of its own first
        if warm_mode not in modes:
            continue
        import tempfile

        os.environ.setdefault("DMM_STEPS_PROFILE_DIR", tempfile.mkdtemp(prefix="torch_steps_"))
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", warm_mode, "--steps", str(a.steps),
                            "--workloads", ",".join(workloads)], capture_output=True, text=True,
                           env=env_for(warm_mode))
        if p.returncode != 0:
            print("the priming run of %s failed (rc %d):\n%s" % (warm_mode, p.returncode, p.stderr[-3000:]))
            sys.exit(1)
    for r in range(a.runs):
        order = modes[r % len(modes):] + modes[:r % len(modes)]  # rotate: no mode always first
        for m in order:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", m, "--steps", str(a.steps),
                   "--regrowths", str(a.regrowths), "--workloads", ",".join(workloads)]
            if a.record and r == 0:
                cmd += ["--record", a.record]
            p = subprocess.run(cmd, capture_output=True, text=True, env=env_for(m))
            res = next((json.loads(l[7:]) for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
            if res is None:
                print("run %d of %s failed (rc %d):\n%s" % (r, m, p.returncode, p.stderr[-3000:]))
                sys.exit(1)
            runs[m].append(res)
            if a.json:  # after every run: a run cut short (a device call's limit) still leaves what it measured
                with open(a.json, "w") as f:
                    json.dump(runs, f)
            print("run %d %-10s %s" % (r, m, "; ".join(
                "%s steps %s ms" % (w, " ".join("%.0f" % t for t in res["workloads"][w]["step_ms"]))
                for w in workloads)), flush=True)
    summarize(runs, workloads, a.steps)


if __name__ == "__main__":
    main()
