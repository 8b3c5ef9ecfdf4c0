# SPDX-License-Identifier: Apache-2.0
"""The memory CUDA graphs hold, and graph memory that sleeps (issue 37, acceptance 3), on the GPU:

  python3 bench/graph_memory.py [--runs N] [--batches 1,2,4,8,16,24,32,48] [--json FILE]

A small transformer decoder (random bf16 weights; per batch size a static KV cache of --max-len tokens)
has its decode step captured as one CUDA graph per batch size, largest first, in four modes, each run a
process of its own, the runs interleaved and the order alternating:
  native-private  torch.cuda.graph(g): a private pool per capture (PyTorch's default)
  native-shared   torch.cuda.graph(g, pool=graph_pool_handle()): one pool shared by hand
  dmm-private     dmm.torch.graph(g): a graph segment per capture
  dmm-shared      dmm.torch.graph(g, pool="decode"): one shared dmm pool (the one line changed)
It prints the graph memory each mode holds (native: the reserved bytes the captures added; dmm: its graph
segments: each capture is served from a reserve made before it, --reserve-mib per capture, once per shared
pool, whose 2 MiB pieces no block reached go back after the capture) as a median over the runs and a
ratio to native-shared. In the dmm modes it then measures the
engine's sleep and wake (weights and KV caches offloaded to pinned host memory, restored), first with no
graph captured, then with the graphs' memory discarded (graphs_sleep(to="discard")) and offloaded
(to="host"), and replays every graph after each wake against its output before the sleep (bit for bit).
The targets: wake with graph memory discarded <= 1.1 x the wake without graphs; offloaded <= 1.1 x (that
wake + graph bytes / the pinned host-to-device bandwidth measured in the same process). Printed, never
asserted: they are measured times. Exits 77 without torch and a GPU.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODES = ("native-private", "native-shared", "dmm-private", "dmm-shared")


def child(mode, batches, max_len, cycles, reserve, layout=False):
    if mode.startswith("dmm"):
        import dmm.torch as dt

        dt.enable()
    import torch

    torch.manual_seed(0)
    dtype, dev = torch.bfloat16, "cuda"
    hidden, heads, layers, vocab, ffn = 1024, 16, 8, 32000, 4096
    hd = hidden // heads

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False)
            self.o = torch.nn.Linear(hidden, hidden, bias=False)
            self.up = torch.nn.Linear(hidden, ffn, bias=False)
            self.down = torch.nn.Linear(ffn, hidden, bias=False)

        def forward(self, x, k_cache, v_cache, pos, mask):
            b = x.shape[0]
            q, k, v = self.qkv(x).view(b, 1, 3, heads, hd).unbind(2)
            k_cache.index_copy_(2, pos, k.transpose(1, 2))  # [b, heads, max_len, hd], written at pos
            v_cache.index_copy_(2, pos, v.transpose(1, 2))
            a = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k_cache, v_cache, attn_mask=mask)
            x = x + self.o(a.transpose(1, 2).reshape(b, 1, hidden))
            return x + self.down(torch.nn.functional.gelu(self.up(x)))

    def build():
        emb = torch.nn.Embedding(vocab, hidden)
        body = torch.nn.ModuleList(Layer() for _ in range(layers))
        head = torch.nn.Linear(hidden, vocab, bias=False)
        m = torch.nn.ModuleDict({"emb": emb, "body": body, "head": head}).to(dev, dtype)
        caches = {b: [(torch.zeros(b, heads, max_len, hd, device=dev, dtype=dtype),
                       torch.zeros(b, heads, max_len, hd, device=dev, dtype=dtype)) for _ in range(layers)]
                  for b in batches}
        return m, caches

    if mode.startswith("dmm"):
        with dt.tag("engine"):  # weights and KV caches: what the engine's sleep offloads
            model, caches = build()
    else:
        model, caches = build()
    pos = torch.tensor([max_len // 2], device=dev)
    mask = (torch.arange(max_len, device=dev) <= pos).view(1, 1, 1, max_len)
    inputs = {b: torch.randint(0, vocab, (b, 1), device=dev) for b in batches}

    def step(b):
        x = model["emb"](inputs[b])
        for layer, (kc, vc) in zip(model["body"], caches[b]):
            x = layer(x, kc, vc, pos, mask)
        return model["head"](x)

    def sleep_wake(graphs_to):
        """One engine sleep and wake; returns the wake's seconds (restores and graph wake, synchronized)."""
        torch.cuda.synchronize()
        dt.offload("engine", to="host", wait=True)
        if graphs_to is not None:
            dt.graphs_sleep(to=graphs_to)
        t0 = time.perf_counter()
        dt.restore("engine")
        if graphs_to is not None:
            dt.graphs_wake()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    out = {"mode": mode}
    with torch.no_grad():
        if mode.startswith("dmm"):
            out["wake_no_graphs_s"] = statistics.median(sleep_wake(None) for _ in range(cycles))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for b in batches:
                for _ in range(2):
                    step(b)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        reserved0 = torch.cuda.memory_reserved()
        pool = torch.cuda.graph_pool_handle() if mode == "native-shared" else None
        if layout and not mode.startswith("dmm"):
            torch.cuda.memory._record_memory_history(context=None, max_entries=1 << 20)
        graphs, outs = {}, {}
        for b in sorted(batches, reverse=True):  # largest first, as engines capture
            g = torch.cuda.CUDAGraph()
            if mode == "native-private":
                ctx = torch.cuda.graph(g)
            elif mode == "native-shared":
                ctx = torch.cuda.graph(g, pool=pool)
            elif mode == "dmm-private":
                ctx = dt.graph(g, reserve_bytes=reserve)
            else:
                ctx = dt.graph(g, reserve_bytes=reserve, pool="decode")
            with ctx:
                outs[b] = step(b)
            graphs[b] = g
        torch.cuda.synchronize()
        if mode.startswith("dmm"):
            out["graph_bytes"] = dt.memory_stats_raw()["graphs"]["reserved_bytes"]
        else:
            out["graph_bytes"] = torch.cuda.memory_reserved() - reserved0
        if layout:  # where graph memory lies: [bytes, live bytes, live blocks, end of the last live block]
            if mode.startswith("dmm"):
                segs = [(s["bytes"], s["blocks"]) for s in dt.snapshot()["graphs"]["segment_list"]]
                rows = [[n, sum(b[1] for b in bl), len(bl), max((b[0] + b[1] for b in bl), default=0)
                         - (min(b[0] for b in bl) if bl else 0)] for n, bl in segs]
            else:
                rows = [[s["total_size"], s["allocated_size"], sum(b["state"] == "active_allocated" for b in s["blocks"]),
                         s["segment_type"]] for s in torch.cuda.memory_snapshot() if tuple(s["segment_pool_id"]) != (0, 0)]
            out["layout"] = rows
            if not mode.startswith("dmm"):  # the captures' allocations and frees, in order: [a|f, address, bytes]
                ev = torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]
                out["capture_events"] = [[e["action"][0], e["addr"], e["size"]] for e in ev
                                         if e["action"] in ("alloc", "free_requested")]
                torch.cuda.memory._record_memory_history(enabled=None)
        refs = {}
        for b in batches:
            graphs[b].replay()
            torch.cuda.synchronize()
            refs[b] = outs[b].clone()
        out["replays_match_eager"] = all(torch.equal(refs[b], step(b)) for b in batches)
        if mode.startswith("dmm"):
            for to in ("discard", "host"):
                waits, same = [], True
                for _ in range(cycles):
                    waits.append(sleep_wake(to))
                    for b in batches:  # each output read right after its own replay: in a shared pool a later
                        graphs[b].replay()  # graph's replay may write where an earlier graph's output lies
                        torch.cuda.synchronize()
                        same = same and torch.equal(outs[b], refs[b])
                out["wake_graphs_%s_s" % to] = statistics.median(waits)
                out["identical_after_%s" % to] = same
            n = max(out["graph_bytes"], 1 << 20)
            src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
            dst = torch.empty(n, dtype=torch.uint8, device=dev)
            times = []
            for _ in range(5):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                dst.copy_(src, non_blocking=True)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            out["pinned_h2d_bytes_per_s"] = n / statistics.median(times)
    print("RESULT " + json.dumps(out), flush=True)


def run_child(mode, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--batches", args.batches,
           "--max-len", str(args.max_len), "--cycles", str(args.cycles), "--reserve-mib", str(args.reserve_mib)]
    if args.layout:
        cmd.append("--layout")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    sys.stderr.write("%s failed (exit %d):\n%s\n" % (mode, p.returncode, (p.stdout + p.stderr)[-3000:]))
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batches", default="1,2,4,8,16,24,32,48")
    ap.add_argument("--max-len", type=int, default=2048)
    ap.add_argument("--cycles", type=int, default=5, help="sleep/wake cycles per process (median)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--reserve-mib", type=int, default=64, help="dmm's graph reserve per capture (a shared pool: once)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--layout", action="store_true", help="print where each mode's graph memory lies (segments)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.child:
        child(args.child, batches, args.max_len, args.cycles, args.reserve_mib << 20, args.layout)
        return 0
    try:
        import torch
    except ImportError:
        print("skipped: no torch")
        return 77
    if not torch.cuda.is_available():
        print("skipped: no GPU")
        return 77
    modes = args.modes.split(",")
    results = {m: [] for m in modes}
    for r in range(args.runs):
        for m in (modes if r % 2 == 0 else list(reversed(modes))):  # none always first on a cold GPU
            res = run_child(m, args)
            if res is not None:
                results[m].append(res)
                shown = {k: v for k, v in res.items() if k != "capture_events"}  # (in --json)
                print("run %d %s: %s" % (r + 1, m, json.dumps(shown)), flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1)

    def med(m, key):
        v = [x[key] for x in results.get(m, []) if key in x]
        return statistics.median(v) if v else None

    ref = med("native-shared", "graph_bytes")
    print("\ngraph memory held by %d graphs (medians of %d runs):" % (len(batches), args.runs))
    for m in modes:
        gb = med(m, "graph_bytes")
        if gb is None:
            continue
        ok = all(x.get("replays_match_eager") for x in results[m])
        print("  %-15s %9.1f MiB  %s  replays == eager: %s" % (m, gb / 2**20, "(%.3f x native-shared)" % (gb / ref)
                                                               if ref else "", ok))
    for m in ("dmm-private", "dmm-shared"):
        if not results.get(m):
            continue
        w0, wd, wh = med(m, "wake_no_graphs_s"), med(m, "wake_graphs_discard_s"), med(m, "wake_graphs_host_s")
        gb, bw = med(m, "graph_bytes"), med(m, "pinned_h2d_bytes_per_s")
        bound = w0 + gb / bw
        same = all(x.get("identical_after_discard") and x.get("identical_after_host") for x in results[m])
        print("  %s wake: no graphs %.1f ms; graph memory discarded %.1f ms (%.3f x, target <= 1.1); offloaded "
              "%.1f ms (%.3f x of %.1f ms = that wake + %.0f MiB at %.1f GB/s, target <= 1.1); outputs identical: %s"
              % (m, w0 * 1e3, wd * 1e3, wd / w0, wh * 1e3, wh / bound, bound * 1e3, gb / 2**20, bw / 1e9, same))
    return 0


if __name__ == "__main__":
    sys.exit(main())
