# SPDX-License-Identifier: Apache-2.0
"""The KV arena on a Llama-3-8B-shaped decoder (issue 38's acceptance; docs/kv.md, "Measured"): capacity,
waste, decode speed against a pre-mapped buffer and transformers' StaticCache, CUDA graphs across growth and
request turnover, prefill from a held prefix, and preemption bandwidth. One process, one command:

  python3 bench/kv_decode.py [--layers 32] [--requests 64] [--prefix 4096] [--private 512] [--steps 1000]
                             [--rounds 5] [--small] [--json FILE]

The model is transformers' LlamaForCausalLM built from a config (hidden 4096, 32 heads, 8 KV heads of 128,
intermediate 14336, vocabulary 128256: Llama-3-8B's shape), bf16, random weights, no download. --small is
a 4-layer, 1024-wide version for a quick check. Sections (each prints its table; --json keeps them all):

  prefix     one request prefills the shared prompt (--prefix tokens) through dmm.kv_transformers and the
             arena turns it into a prefix (its whole granules held once).
  decode     --requests requests open with the prefix; each gets its own first token and decodes --private
             tokens, batched: a decode step is the model's own modules (embedding, rotary, projections,
             MLP, head) with dmm.kv_kernels' two Triton kernels for attention: one writes the step's K and V at
             each request's position, one reads [0, length) of each request (split over the length, GQA,
             online softmax). The same step runs over the arena (rows at the requests' bases, growth between
             steps from the reserve, a refill thread topping it up) and over a pre-mapped buffer of the same
             layout (one torch tensor, a row per request, the prefix copied into each). Both are captured as
             one CUDA graph each; the tokens of the two must be identical. Timed: the decode loop's steps (CUDA
             events), then --rounds interleaved windows of 32 replays of each graph at a fixed length.
  static     transformers' StaticCache (SDPA) holding the same requests (the prefix copied into every row),
             fed the arena's tokens (teacher forcing): its decode step time, eager and, where transformers'
             forward can be captured, as a graph; greedy agreement with the arena's tokens.
  turnover   a graph captured once replays --steps decode steps while requests close and new ones open with
             the prefix (a request every 8 steps), over the arena and over the pre-mapped buffer: tokens
             identical.
  prefill    a new request with the prefix and 64 private prompt tokens: the forward computes 64 tokens;
             the same prompt without the prefix computes them all.
  preempt    offload and restore of one request's own KV (dmm_kv_offload / restore) against the pinned copy
             bandwidth of the same bytes.

Memory columns: the arena's own numbers (dmm.kv stats: the requests' private bytes, the prefix held once,
the reserve apart), against what StaticCache and a copy per request (DynamicCache, and transformers' paged
cache, which hold every token of every request) need for the same requests: their bytes are
requests × tokens × token bytes, and StaticCache's is its tensors as allocated.
Needs torch with a GPU, transformers and Triton; exits 77 without them.
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
MIB, GIB = 1 << 20, 1 << 30


def need(module):
    try:
        return __import__(module)
    except Exception as e:  # noqa: BLE001
        print("SKIP: %s is not importable (%s)" % (module, e))
        sys.exit(77)


torch = need("torch")
need("transformers")
need("triton")

if not torch.cuda.is_available():
    print("SKIP: no CUDA device")
    sys.exit(77)

import dmm.kv  # noqa: E402
import dmm.kv_kernels as kernels  # noqa: E402
import dmm.kv_transformers as hf  # noqa: E402


class Step:
    """A decode step of a Llama model over dmm.kv_kernels.Rows: the model's own modules, with dmm.kv_kernels'
    write and attention in place of the cache and SDPA (the same kernels over the arena and the buffer)."""

    def __init__(self, model, arena, splits=8):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        self.m, self.rope, self.arena, self.splits = model, apply_rotary_pos_emb, arena, splits
        c = model.config
        self.H, self.KVH, self.D = c.num_attention_heads, arena.kv_heads, arena.head_dim

    @torch.no_grad()
    def __call__(self, ids, rows):
        m, B = self.m, ids.shape[0]
        h = m.model.embed_tokens(ids)  # [B, 1, hidden]
        cos, sin = m.model.rotary_emb(h, rows.pos.to(torch.int64)[:, None])
        for li, layer in enumerate(m.model.layers):
            a = layer.self_attn
            x = layer.input_layernorm(h)
            q = a.q_proj(x).view(B, 1, self.H, self.D).transpose(1, 2)
            k = a.k_proj(x).view(B, 1, self.KVH, self.D).transpose(1, 2)
            v = a.v_proj(x).view(B, 1, self.KVH, self.D).transpose(1, 2)
            q, k = self.rope(q, k, cos, sin)
            kernels.write(k, v, rows, li, self.arena)
            att = kernels.attention(q, rows, li, self.arena, splits=self.splits)
            h = h + a.o_proj(att.to(h.dtype).reshape(B, 1, self.H * self.D))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return m.lm_head(m.model.norm(h))[:, -1].argmax(-1)


class Graphed:
    """One decode step captured once over static inputs (ids, Rows): replay() after the inputs change."""

    def __init__(self, step, rows, batch):
        self.ids = torch.zeros(batch, 1, dtype=torch.int64, device="cuda")
        self.rows = rows
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):  # warm up (Triton compiles, cuBLAS picks) outside the capture
                step(self.ids, rows)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.out = step(self.ids, rows)

    def __call__(self, ids):
        self.ids.copy_(ids)
        self.graph.replay()
        return self.out


class Eager:
    """The decode step without a graph (where a capture failed): the same interface as Graphed."""

    def __init__(self, step, rows):
        self.step, self.rows = step, rows

    def __call__(self, ids):
        return self.step(ids, self.rows)


def runner(step, rows, batch, out):
    """A Graphed step, or an Eager one where the capture fails (said, and kept in out["graph_error"])."""
    try:
        return Graphed(step, rows, batch)
    except Exception as e:  # noqa: BLE001
        out["graph_error"] = "%s: %s" % (type(e).__name__, str(e)[:500])
        print("graph capture failed (%s): the step runs eagerly" % out["graph_error"])
        torch.cuda.synchronize()
        return Eager(step, rows)


# ---------------------------------------------------------------- the run

def build_model(args):
    from transformers import LlamaConfig, LlamaForCausalLM

    if args.small:
        shape = dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=args.layers or 4, num_attention_heads=8,
                     num_key_value_heads=2, head_dim=128, vocab_size=32000)
    else:
        shape = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=args.layers or 32,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256)
    cfg = LlamaConfig(max_position_embeddings=16384, attn_implementation="sdpa", **shape)
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(old)
    return model, cfg


def cuda_ms(fn, n):
    """Per-call milliseconds of fn over n calls (CUDA events)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def pinned_bandwidth(nbytes):
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    for _ in range(2):
        host.copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    d2h = nbytes / (cuda_ms(lambda: host.copy_(dev, non_blocking=True), 5) / 1e3)
    h2d = nbytes / (cuda_ms(lambda: dev.copy_(host, non_blocking=True), 5) / 1e3)
    return d2h, h2d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=0, help="decoder layers (default 32; --small: 4)")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prefix", type=int, default=4096, help="tokens of the shared prompt")
    ap.add_argument("--private", type=int, default=512, help="tokens each request decodes after the prefix")
    ap.add_argument("--steps", type=int, default=1000, help="decode steps of the turnover section")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing windows")
    ap.add_argument("--small", action="store_true", help="a 4-layer, 1024-wide model (a quick check)")
    ap.add_argument("--skip", default="", help="sections to leave out, comma-separated (static, turnover, ...)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    out = {"args": vars(args), "device": torch.cuda.get_device_name(), "torch": torch.__version__}

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)

    model, cfg = build_model(args)
    R, P = args.requests, args.prefix
    max_tokens = P + max(args.private, args.steps) + 64
    arena = dmm.kv.Arena(layers=cfg.num_hidden_layers, kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                         dtype=torch.bfloat16, max_tokens=max_tokens, max_requests=2 * R + 2,
                         reserve_bytes=2 * R * (2 * MIB), refill_thread=True)
    tb = arena.token_bytes
    step = Step(model, arena)
    print("model: %d layers, %d heads (%d KV) of %d, %.2f B parameters; a token's KV %d KiB"
          % (cfg.num_hidden_layers, step.H, step.KVH, step.D, sum(p.numel() for p in model.parameters()) / 1e9,
             tb >> 10))

    # ---- prefix ----
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, cfg.vocab_size, (1, P + 64), generator=g).cuda()
    hf.use(model)
    sys_req = arena.open()
    with torch.no_grad():
        model(prompt[:, :P], past_key_values=hf.KVCache(arena, [sys_req]), use_cache=True, logits_to_keep=1)
    torch.cuda.synchronize()  # (the arena's calls take no stream: the prefill must be done before share)
    prefix = arena.share(sys_req, P)
    prefix_kv = sys_req.cache()[:P].clone()  # the pre-mapped buffer and StaticCache copy it into every row
    torch.cuda.synchronize()  # (and the copy before the owner's close unmaps its range)
    sys_req.close()
    st = arena.stats()
    out["prefix"] = {"tokens": P, "shared_bytes": st["shared_bytes"]}
    print("prefix: %d tokens held once in %.1f MiB" % (P, st["shared_bytes"] / MIB))

    # ---- decode: the arena against a pre-mapped buffer, one graph each ----
    first = torch.randint(3, cfg.vocab_size, (R,), generator=g).cuda()
    reqs = [arena.open(P + 1, prefix=prefix) for _ in range(R)]
    a_rows = kernels.Rows(R, arena)
    a_rows.ptrs.copy_(torch.tensor([r.base for r in reqs], dtype=torch.int64))
    T = P + args.private + 64
    buf = torch.empty(R, T, tb, dtype=torch.uint8, device="cuda")
    buf.view(R, T, -1).view(torch.bfloat16)[:, :P].copy_(prefix_kv.view(1, P, -1).expand(R, -1, -1))
    b_rows = kernels.Rows(R, arena)
    b_rows.ptrs.copy_(torch.arange(R, dtype=torch.int64, device="cuda") * (T * tb) + buf.data_ptr())
    for rows in (a_rows, b_rows):
        rows.pos.fill_(P)
        rows.lens.fill_(P + 1)
    ga, gb = runner(step, a_rows, R, out), runner(step, b_rows, R, out)

    def decode(graphed, rows, grow, n):
        """n steps from the prefix; per step (CUDA events) and the loop's wall time, growth between steps."""
        ids, toks, times, creates = first.clone()[:, None], [], [], 0
        t0 = time.perf_counter()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * n)]
        for i in range(n):
            length = P + i + 1
            if grow is not None:
                c0 = arena.stats()["driver_creates"]
                for r in reqs:
                    r.grow(length)  # a no-op but every granule's worth of tokens: from the reserve
                creates += arena.stats()["driver_creates"] - c0
            rows.pos.fill_(length - 1)
            rows.lens.fill_(length)
            ev[2 * i].record()
            nxt = graphed(ids)
            ev[2 * i + 1].record()
            toks.append(nxt.clone())
            ids = nxt[:, None]
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        times = [ev[2 * i].elapsed_time(ev[2 * i + 1]) for i in range(n)]
        return torch.stack(toks, 1), times, creates, wall

    st0 = arena.stats()
    ta, times_a, creates, wall_a = decode(ga, a_rows, True, args.private)
    st1 = arena.stats()
    tb_toks, times_b, _, wall_b = decode(gb, b_rows, None, args.private)
    same = bool(torch.equal(ta, tb_toks))
    infos = [r.info() for r in reqs]
    tokens = P + args.private
    waste = [inf["private_bytes"] - (tokens * tb - inf["shared_bytes"]) for inf in infos]
    kv_bytes = st1["private_bytes"] + st1["shared_bytes"]
    out["decode"] = {
        "requests": R, "tokens_each": tokens, "arena_kv_bytes": kv_bytes, "private_bytes": st1["private_bytes"],
        "shared_bytes": st1["shared_bytes"], "reserve_bytes": st1["reserve_bytes"],
        "copy_per_request_bytes": R * tokens * tb, "waste_max_bytes": max(waste), "waste_mean_bytes": sum(waste) / R,
        "creates_in_grow_calls": creates, "creates_total": st1["driver_creates"] - st0["driver_creates"],
        "grows": st1["grows"] - st0["grows"], "step_ms_arena": statistics.median(times_a),
        "step_ms_premapped": statistics.median(times_b), "loop_s_arena": wall_a, "loop_s_premapped": wall_b,
        "tokens_identical": same}
    print("decode: %d requests x %d tokens in %.2f GiB of KV (a copy per request: %.2f GiB); reserve %.0f MiB apart"
          % (R, tokens, kv_bytes / GIB, R * tokens * tb / GIB, st1["reserve_bytes"] / MIB))
    print("  waste: at most %.2f MiB committed-but-unused per request (mean %.2f); handles created while the decode "
          "thread grew the requests: %d (an upper bound: the refill thread's own count too if they overlap; all: "
          "%d)" % (max(waste) / MIB, sum(waste) / R / MIB, creates,
                                                                    st1["driver_creates"] - st0["driver_creates"]))
    print("  step (graph, loop medians): arena %.3f ms, pre-mapped %.3f ms; the loop (growth included) %.2f s vs "
          "%.2f s; tokens identical: %s" % (out["decode"]["step_ms_arena"], out["decode"]["step_ms_premapped"], wall_a,
                                           wall_b, same))
    wins = {"arena": [], "premapped": []}
    ids = ta[:, -1:].contiguous()
    order = gr = None
    for k in range(args.rounds):  # fixed length, interleaved, the order alternating
        order = (("arena", ga), ("premapped", gb)) if k % 2 == 0 else (("premapped", gb), ("arena", ga))
        for name, gr in order:
            wins[name].append(cuda_ms(lambda: gr(ids), 32))
    ra, rb = statistics.median(wins["arena"]), statistics.median(wins["premapped"])
    out["decode"].update({"window_ms_arena": wins["arena"], "window_ms_premapped": wins["premapped"],
                          "arena_over_premapped": ra / rb})
    print("  interleaved windows (%d x 32 replays): arena %.3f ms, pre-mapped %.3f ms: %.4f x"
          % (args.rounds, ra, rb, ra / rb))
    save()
    del gb, buf, order, gr  # the pre-mapped buffer and its graph go before StaticCache and the turnover's buffer
    torch.cuda.empty_cache()

    # ---- static: transformers' StaticCache on the same requests, teacher-forced with the arena's tokens ----
    if "static" not in skip:
        section(out, "static", static_section, out, model, cfg, prefix_kv, first, ta, R, P, args, step)
        save()

    # ---- turnover: one graph over the arena, requests closing and opening with the prefix ----
    if "turnover" not in skip:
        section(out, "turnover", turnover_section, out, step, arena, prefix, prefix_kv, reqs, ga, a_rows, first, R,
                P, tb, args)
        save()
    torch.cuda.synchronize()  # no replay may still read a request that closes
    for r in reqs:
        if r._r is not None:
            r.close()

    # ---- prefill from the held prefix ----
    if "prefill" not in skip:
        section(out, "prefill", prefill_section, out, model, arena, prefix, prompt, P)
        save()

    # ---- preemption ----
    if "preempt" not in skip:
        section(out, "preempt", preempt_section, out, arena, prefix, P, tb)
        save()
    prefix.release()
    arena.close()
    print(json.dumps(out["decode"]))


def section(out, name, fn, *args):
    """Runs one section; a failure is printed and kept (out[name]["error"]) and the next section runs, so
    that one broken section does not cost the others' numbers (GPU time is scarce). A CUDA error that
    poisons the context still ends the run at the next CUDA call."""
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        out[name] = {"error": "%s: %s" % (type(e).__name__, str(e)[:500])}
        print("%s: FAILED (%s); going on with the next section" % (name, out[name]["error"]))
        torch.cuda.synchronize()


def static_at(cache, pos):
    """Where StaticCache writes next: transformers 5 keeps a counter per layer (cache_position is gone), which
    a captured graph would otherwise advance on every replay."""
    for layer in getattr(cache, "layers", []):
        c = getattr(layer, "cumulative_length", None)
        if isinstance(c, torch.Tensor):
            c.fill_(pos)
        elif c is not None:
            layer.cumulative_length = pos


def static_section(out, model, cfg, prefix_kv, first, ta, R, P, args, step):
    from transformers import StaticCache

    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("sdpa")
    else:
        model.config._attn_implementation = "sdpa"
    n = args.private
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    cache = StaticCache(config=cfg, max_cache_len=P + n + 64)
    pos = torch.arange(P, device="cuda")
    for li in range(cfg.num_hidden_layers):
        k = prefix_kv[:, li, 0].transpose(0, 1).unsqueeze(0).expand(R, -1, -1, -1)  # [R, KVH, P, D]
        v = prefix_kv[:, li, 1].transpose(0, 1).unsqueeze(0).expand(R, -1, -1, -1)
        cache.update(k, v, li, {"cache_position": pos})  # (transformers 5: written at its counter, 0 here)
    static_at(cache, P)
    torch.cuda.synchronize()
    static_bytes = torch.cuda.memory_allocated() - before
    feed = torch.cat([first[:, None], ta[:, :-1]], 1)  # the arena's inputs, step by step
    agree, times = 0, []
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * n)]
    with torch.no_grad():
        for i in range(n):
            cp = torch.tensor([P + i], device="cuda")
            ev[2 * i].record()
            logits = model(input_ids=feed[:, i:i + 1], position_ids=cp.expand(R, 1), cache_position=cp,
                           past_key_values=cache, use_cache=True).logits
            ev[2 * i + 1].record()
            agree += int((logits[:, -1].argmax(-1) == ta[:, i]).sum())
    torch.cuda.synchronize()
    times = [ev[2 * i].elapsed_time(ev[2 * i + 1]) for i in range(n)]
    res = {"static_bytes": static_bytes, "step_ms_eager": statistics.median(times),
           "agreement": agree / (R * n)}
    # StaticCache's step as a graph, where transformers' forward can be captured
    try:
        ids = feed[:, -1:].contiguous()
        cp = torch.tensor([P + n - 1], device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(2):
                static_at(cache, P + n - 1)
                model(input_ids=ids, position_ids=cp.expand(R, 1), cache_position=cp, past_key_values=cache)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        static_at(cache, P + n - 1)
        with torch.cuda.graph(graph, capture_error_mode="thread_local"), torch.no_grad():
            model(input_ids=ids, position_ids=cp.expand(R, 1), cache_position=cp, past_key_values=cache)

        def replay():
            static_at(cache, P + n - 1)  # the same step every time (a counter left to run would pass the end)
            graph.replay()

        res["step_ms_graph"] = cuda_ms(replay, 32)
        del graph
    except Exception as e:  # noqa: BLE001
        res["graph_error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
    arena_ms = out["decode"]["window_ms_arena"]
    res["arena_over_static_graph"] = statistics.median(arena_ms) / res["step_ms_graph"] if "step_ms_graph" in res else None
    out["static"] = res
    print("static: StaticCache holds %.2f GiB for the same requests; step eager %.3f ms%s; greedy agreement with "
          "the arena (teacher-forced) %.4f" % (static_bytes / GIB, res["step_ms_eager"],
                                               ", graph %.3f ms (arena / static: %.4f x)"
                                               % (res["step_ms_graph"], res["arena_over_static_graph"])
                                               if "step_ms_graph" in res else " (graph: %s)" % res["graph_error"],
                                               res["agreement"]))
    del cache
    torch.cuda.empty_cache()
    hf.use(model)


def turnover_section(out, step, arena, prefix, prefix_kv, reqs, ga, a_rows, first, R, P, tb, args):
    """--steps replays of the graph captured in the decode section; every 8 steps one row's request closes and a
    new one opens with the prefix in its place (with its own first token), and before each step every request
    grows to its length (from the reserve); then the same schedule over a fresh pre-mapped buffer with its own
    graph: the tokens must be identical."""
    n = args.steps
    g = torch.Generator().manual_seed(7)
    fresh = torch.randint(3, step.m.config.vocab_size, (n // 8 + 1,), generator=g).tolist()
    T = P + n + 64

    def run(graphed, rows, place, grow):
        """place(b, k): the base of row b's k-th request (opening it); grow(lengths) before each step."""
        lengths = [P + 1] * R
        rows.ptrs.copy_(torch.tensor([place(b, 0) for b in range(R)], dtype=torch.int64))
        ids = first.clone()[:, None]
        toks, turned = [], 0
        for i in range(n):
            if i and i % 8 == 0:  # row (i / 8) mod R turns over: a new request with the prefix
                b = (i // 8) % R
                turned += 1
                rows.ptrs[b] = place(b, turned)
                lengths[b] = P + 1
                ids[b, 0] = fresh[turned - 1]
            grow(lengths)
            rows.pos.copy_(torch.tensor([x - 1 for x in lengths], dtype=torch.int32))
            rows.lens.copy_(torch.tensor(lengths, dtype=torch.int32))
            nxt = graphed(ids)
            toks.append(nxt.clone())
            ids = nxt[:, None].clone()
            lengths = [x + 1 for x in lengths]
        torch.cuda.synchronize()
        return torch.stack(toks, 1), turned

    live = list(reqs)

    def place_arena(b, k):
        if k > 0:
            torch.cuda.current_stream().synchronize()  # the last replay may still read the row: then close
            live[b].close()
            live[b] = arena.open(P + 1, prefix=prefix)
        return live[b].base

    def grow_arena(lengths):
        for r, length in zip(live, lengths):
            r.grow(length)

    c0 = arena.stats()["driver_creates"]
    t0 = time.perf_counter()
    ta, turned = run(ga, a_rows, place_arena, grow_arena)
    wall_a = time.perf_counter() - t0
    creates = arena.stats()["driver_creates"] - c0
    reqs[:] = live
    buf = torch.empty(R, T, tb, dtype=torch.uint8, device="cuda")
    buf.view(R, T, -1).view(torch.bfloat16)[:, :P].copy_(prefix_kv.view(1, P, -1).expand(R, -1, -1))
    rows = kernels.Rows(R, arena)
    rows.pos.fill_(P)
    rows.lens.fill_(P + 1)
    rows.ptrs.copy_(torch.arange(R, dtype=torch.int64, device="cuda") * (T * tb) + buf.data_ptr())
    gb = runner(step, rows, R, out)
    t0 = time.perf_counter()
    tbk, _ = run(gb, rows, lambda b, k: buf.data_ptr() + b * T * tb, lambda lengths: None)  # a row's new request reuses its row
    wall_b = time.perf_counter() - t0
    same = bool(torch.equal(ta, tbk))
    out["turnover"] = {"steps": n, "requests_turned_over": turned, "tokens_identical": same, "wall_s_arena": wall_a,
                       "wall_s_premapped": wall_b, "creates_during_replays": creates, "graphs_captured": 1}
    print("turnover: one graph, %d steps (%.2f s; pre-mapped %.2f s), %d requests closed and opened with the prefix, "
          "handles created meanwhile (refill thread included) %d; tokens identical to the pre-mapped buffer: %s"
          % (n, wall_a, wall_b, turned, creates, same))
    del gb, buf


def prefill_section(out, model, arena, prefix, prompt, P):
    hf.use(model)  # (again: the static section switches the model to SDPA, and may have failed half-way)
    seen = []

    def spy(module, query, *a, **k):
        seen.append(query.shape[2])
        return hf.attention(module, query, *a, **k)

    from transformers import AttentionInterface

    AttentionInterface.register(hf.NAME, spy)
    res = {}
    for name, req, ids in (("with the prefix", arena.open(P, prefix=prefix), prompt[:, P:]),
                           ("without", arena.open(), prompt)):
        cache = hf.KVCache(arena, [req])
        seen.clear()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            model(ids, past_key_values=cache, use_cache=True)
        torch.cuda.synchronize()
        res[name] = {"computed_tokens": seen[0] if seen else None, "ms": (time.perf_counter() - t0) * 1e3}
        del cache
        req.close()
    AttentionInterface.register(hf.NAME, hf.attention)
    out["prefill"] = res
    print("prefill of %d tokens: with the prefix held, %s tokens computed in %.1f ms; without, %s in %.1f ms"
          % (prompt.shape[1], res["with the prefix"]["computed_tokens"], res["with the prefix"]["ms"],
             res["without"]["computed_tokens"], res["without"]["ms"]))


def preempt_section(out, arena, prefix, P, tb):
    n = min(2048, arena.max_tokens - P)
    r = arena.open(P + n, prefix=prefix)
    view = r.cache()
    view[P:P + n].copy_(torch.randn(n, *view.shape[1:], device="cuda").to(view.dtype))
    want = view[P:P + n].clone()
    del view
    nbytes = r.info()["private_bytes"]
    torch.cuda.synchronize()
    off, res_ = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        r.offload()
        off.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        r.restore()
        torch.cuda.synchronize()
        res_.append(time.perf_counter() - t0)
    view = r.cache()
    same = bool(torch.equal(view[P:P + n], want))
    del view
    d2h, h2d = pinned_bandwidth(nbytes)
    o, s = nbytes / statistics.median(off), nbytes / statistics.median(res_)
    out["preempt"] = {"bytes": nbytes, "offload_GBps": o / 1e9, "restore_GBps": s / 1e9, "pinned_d2h_GBps": d2h / 1e9,
                      "pinned_h2d_GBps": h2d / 1e9, "offload_share": o / d2h, "restore_share": s / h2d,
                      "contents_kept": same}
    print("preempt: %.0f MiB offloaded at %.1f GB/s (%.0f %% of pinned %.1f), restored at %.1f GB/s (%.0f %% of %.1f); "
          "contents kept: %s" % (nbytes / MIB, o / 1e9, 100 * o / d2h, d2h / 1e9, s / 1e9, 100 * s / h2d, h2d / 1e9, same))
    r.close()


if __name__ == "__main__":
    main()
