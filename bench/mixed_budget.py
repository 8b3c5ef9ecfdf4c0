# SPDX-License-Identifier: Apache-2.0
"""One budget for two frameworks against a static split (issue 39, acceptance 3): a bursty process of
torch model steps and CuPy FFT / matmul bursts, under

  dmm     dmm.torch.enable() and dmm.cupy.enable() with one device limit B for both (dmm.torch.set_limit);
  split   each framework's own pool with half of B each: torch.cuda.set_per_process_memory_fraction(B/2 ÷
          the device's memory) and CuPy's pool set_limit(B/2);

  python3 bench/mixed_budget.py [--budget-mib 3072] [--rounds 60] [--runs 3] [--seed 1] [--json FILE]

Each run is a process of its own, the two setups alternating (split first in odd runs), with the same
seeded sequence: a round is one training step of a small transformer encoder whose batch swings between
small and large (torch's share of memory swings with it), then a CuPy burst (an FFT and a matmul over
arrays of random size, sometimes large). A step or a burst that runs out of memory (each framework's own
OutOfMemoryError) is counted as failed and the round goes on. Prints per setup: steps and bursts
completed (medians over runs), peak device memory held (dmm: its peak reserved; split: torch's peak
reserved + CuPy's pool peak total), and wall time of the loop. Needs torch with a GPU and CuPy; exits 77
(skipped) without them.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MIB = 1 << 20


def worker(mode, budget, rounds, seed):
    import random
    import time

    import torch

    if mode == "dmm":
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import dmm.torch

        dmm.torch.enable()
        import dmm.cupy

        dmm.torch.set_limit(budget)
    import cupy

    if mode == "dmm":
        dmm.cupy.enable()
    else:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(budget / 2 / total)
        cupy.get_default_memory_pool().set_limit(size=budget // 2)

    rng = random.Random(seed)
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=6).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    steps = bursts = 0
    cupy_peak = 0
    t0 = time.perf_counter()
    for _ in range(rounds):
        batch = rng.choice([4, 8, 16, 48, 96])
        try:
            x = torch.randn(batch, 256, 1024, device="cuda")
            loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del x, loss
            steps += 1
        except torch.cuda.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
        n = rng.choice([1 << 20, 1 << 22, 1 << 24, 3 << 24])
        try:
            a = cupy.random.standard_normal(n, dtype=cupy.float32)
            f = cupy.fft.fft(a)
            side = int((n // 4) ** 0.5)
            m = a[: side * side].reshape(side, side)
            p = m @ m
            cupy.cuda.get_current_stream().synchronize()
            del a, f, m, p
            bursts += 1
        except cupy.cuda.memory.OutOfMemoryError:
            pass
        if mode != "dmm":
            cupy_peak = max(cupy_peak, cupy.get_default_memory_pool().total_bytes())
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    if mode == "dmm":
        peak = dmm.torch.memory_stats()["reserved_bytes.all.peak"]
    else:
        peak = torch.cuda.max_memory_reserved() + cupy_peak
    print("RESULT " + json.dumps({"mode": mode, "steps": steps, "bursts": bursts, "peak": peak, "wall": wall}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-mib", type=int, default=3072)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    budget = args.budget_mib * MIB
    if args.worker:
        worker(args.worker, budget, args.rounds, args.seed)
        return 0
    try:
        import cupy  # noqa: F401
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA GPU visible to torch")
    except Exception as e:  # noqa: BLE001
        print("SKIP: needs torch with a GPU and CuPy (%s)" % e)
        return 77
    results = {"dmm": [], "split": []}
    for run in range(args.runs):
        order = ["split", "dmm"] if run % 2 == 0 else ["dmm", "split"]
        for mode in order:
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", mode, "--budget-mib",
                                  str(args.budget_mib), "--rounds", str(args.rounds), "--seed", str(args.seed)],
                                 capture_output=True, text=True)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode != 0 or not lines:
                print("run %d, %s failed (exit %d): %s" % (run, mode, out.returncode, out.stderr.strip()[-2000:]))
                return 1
            results[mode].append(json.loads(lines[-1][7:]))
    print("budget %d MiB, %d rounds, %d runs (medians):" % (args.budget_mib, args.rounds, args.runs))
    print("| setup | steps done | bursts done | peak held (MiB) | wall (s) |")
    print("|---|---|---|---|---|")
    summary = {}
    for mode in ("split", "dmm"):
        rs = results[mode]
        row = {k: statistics.median(r[k] for r in rs) for k in ("steps", "bursts", "peak", "wall")}
        summary[mode] = row
        print("| %s | %d / %d | %d / %d | %.0f | %.2f |" % (mode, row["steps"], args.rounds, row["bursts"], args.rounds,
                                                         row["peak"] / MIB, row["wall"]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"budget_mib": args.budget_mib, "rounds": args.rounds, "runs": results, "medians": summary}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
