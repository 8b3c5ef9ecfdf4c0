# SPDX-License-Identifier: Apache-2.0
"""Restore (and offload) bandwidth of dmm's tagged weights for several restore piece sizes (a measurement
for issue 6, not a test): one worker process per variant, DMM_TORCH_RESTORE_PIECE set per process.

  python tests/gpu/torch/restore_variants.py [--cycles N] [VARIANT ...]

A VARIANT is NAME=VALUE with VALUE as DMM_TORCH_RESTORE_PIECE takes it ("" = the default, 0 = one commit
per segment, BYTES = fixed pieces, MAX,FIRST = pieces from FIRST doubling up to MAX, MAX,FIRST,COPY = each
piece copied in parts of COPY bytes; FIRST 0 = fixed pieces). Each worker builds
the Llama weights of test_torch_offload.py in tag "weights", measures a pinned copy of the same size
both ways (the reference, as that test does: the best of its runs), runs one warm cycle, then N timed
offload/restore cycles, and prints each cycle, the medians and the minimum against the reference.
Exit 0, or 77 without torch/transformers/GPU.
"""

import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit, mib, require_torch_gpu, result_of, worker_env  # noqa: E402

M = 1 << 20
DEFAULT_VARIANTS = [
    "default=",
    "whole=0",
    "fixed64=%d" % (64 * M),
    "fixed32=%d" % (32 * M),
    "geo16to256=%d,%d" % (256 * M, 16 * M),
    "geo32to512=%d,%d" % (512 * M, 32 * M),
    "geo8to128=%d,%d" % (128 * M, 8 * M),
    "p256copy32=%d,0,%d" % (256 * M, 32 * M),  # few handles (fast offload), small copies: which one helps?
    "wholecopy32=0,0,%d" % (32 * M),
]


def worker(cycles):
    import dmm.torch as dt

    dt.enable()
    import torch

    from models import llama

    model, cfg, wbytes = llama(dt.tag("weights"))
    info = dt.tag_info("weights")
    buf = torch.empty(wbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(wbytes, dtype=torch.uint8, pin_memory=True)

    def timed(fn, reps):
        out = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            out.append(wbytes / (time.perf_counter() - t0) / 1e9)
        return out

    d2h = timed(lambda: host.copy_(buf, non_blocking=True), 3)
    h2d = timed(lambda: buf.copy_(host, non_blocking=True), 3)
    del buf, host
    dt.empty_cache()
    dt.offload("weights")
    dt.offload_wait("weights")
    dt.restore("weights")
    torch.cuda.synchronize()
    off, res, call_ms = [], [], []
    for _ in range(cycles):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dt.offload("weights")
        dt.offload_wait("weights")
        t1 = time.perf_counter()
        t2 = time.perf_counter()
        dt.restore("weights")
        t3 = time.perf_counter()
        torch.cuda.synchronize()
        t4 = time.perf_counter()
        off.append(wbytes / (t1 - t0) / 1e9)
        res.append(wbytes / (t4 - t2) / 1e9)
        call_ms.append((t3 - t2) * 1e3)
    emit({"bytes": wbytes, "segments": info["segments"], "committed": info["committed_bytes"], "d2h": d2h,
          "h2d": h2d, "offload": off, "restore": res, "restore_call_ms": call_ms})


def main():
    args = sys.argv[1:]
    cycles = 7
    if args[:1] == ["--cycles"]:
        cycles, args = int(args[1]), args[2:]
    if args[:1] == ["--worker"]:
        worker(int(args[1]))
        return 0
    require_torch_gpu(need_transformers=True)
    rows = []
    for v in args or DEFAULT_VARIANTS:
        name, _, value = v.partition("=")
        env = worker_env("dmm")
        env.pop("DMM_TORCH_RESTORE_PIECE", None)
        if value:
            env["DMM_TORCH_RESTORE_PIECE"] = value
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", str(cycles)], env=env,
                           capture_output=True, text=True)
        r = result_of(p.stdout)
        if p.returncode != 0 or r is None:
            print("%-12s FAILED (rc %d): %s" % (name, p.returncode, (p.stderr or p.stdout)[-800:]), flush=True)
            continue
        ref_d, ref_h = max(r["d2h"]), max(r["h2d"])
        res, off = r["restore"], r["offload"]
        print("%-12s %s in %d segment(s), committed %s; pinned D2H %s, H2D %s GB/s" % (
            name, mib(r["bytes"]), r["segments"], mib(r["committed"]), ["%.1f" % x for x in r["d2h"]],
            ["%.1f" % x for x in r["h2d"]]), flush=True)
        print("%-12s restore GB/s %s (%% of H2D: %s); restore call returned after ms %s" % (
            name, ["%.1f" % x for x in res], ["%.1f" % (100 * x / ref_h) for x in res],
            ["%.2f" % x for x in r["restore_call_ms"]]), flush=True)
        print("%-12s offload GB/s %s (%% of D2H: %s)" % (
            name, ["%.1f" % x for x in off], ["%.1f" % (100 * x / ref_d) for x in off]), flush=True)
        rows.append((name, 100 * statistics.median(res) / ref_h, 100 * min(res) / ref_h,
                     100 * statistics.median(off) / ref_d, 100 * min(off) / ref_d))
    print("SUMMARY %-12s %9s %9s %9s %9s" % ("variant", "res med%", "res min%", "off med%", "off min%"))
    for row in rows:
        print("SUMMARY %-12s %9.1f %9.1f %9.1f %9.1f" % row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
