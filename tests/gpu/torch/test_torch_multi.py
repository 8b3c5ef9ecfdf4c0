# SPDX-License-Identifier: Apache-2.0
"""dmm under torch.distributed on two GPUs (issue 15's acceptance), against PyTorch's native allocator
in the same job: multi_worker.py run by torchrun --nproc-per-node 2, once per allocator.

  1. DDP training of GPT-2 small, 20 steps: losses identical to native's on every rank; each rank's
     peak physical memory <= native's peak reserved; step time (median of steps 3-20) printed
     against native's, not asserted (a time is a benchmark's number);
  2. tensor-parallel generation (weights split over the ranks, all_reduce after each layer): the same
     tokens as native; all_reduce bus bandwidth of a 256 MiB buffer from dmm printed against native's (not asserted);
  3. sleep/wake of the TP weights on both ranks between two generations: each rank frees >= 95 % of
     its weights and generates the same tokens after wake; no rank hangs (a timeout would fail).

Exit 0 = all held, 1 = something did not, 77 = fewer than two GPUs, or no torch, NCCL or transformers.
"""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import check, failures, HERE, require_torch_gpu, SKIP, worker_env  # noqa: E402

require_torch_gpu(need_transformers=True)
probe = subprocess.run([sys.executable, "-c", "import torch, torch.distributed as d; "
                        "print(torch.cuda.device_count(), int(d.is_nccl_available()))"], capture_output=True, text=True)
count, nccl = (probe.stdout.split() + ["0", "0"])[:2] if probe.returncode == 0 else ("0", "0")
if int(count) < 2 or nccl != "1":
    print("SKIP: needs two GPUs and NCCL (this machine: %s GPU(s), NCCL %s)" % (count, nccl == "1"))
    sys.exit(SKIP)


def run(mode):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ranks.json")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               os.path.join(HERE, "multi_worker.py"), mode, out]
        print("$ " + " ".join(cmd), flush=True)
        p = subprocess.run(cmd, env=worker_env(mode), capture_output=True, text=True, timeout=1200)
        if p.returncode != 0 or not os.path.exists(out):
            print((p.stdout + p.stderr)[-4000:])
            return None
        with open(out) as f:
            return json.load(f)


nat, dm = run("native"), run("dmm")
if nat is None or dm is None:
    check(False, "both torchrun jobs ran (native %s, dmm %s)" % (nat is not None, dm is not None))
else:
    for r in range(2):
        n, d = nat[r]["ddp"], dm[r]["ddp"]
        print("rank %d: step %.1f / %.1f ms (native / dmm, median of steps 3-20), peak %.0f / %.0f MiB, loss[-1] "
              "%.6f / %.6f" % (r, n["median_ms"], d["median_ms"], n["peak"] / 2**20, d["peak"] / 2**20,
                               n["losses"][-1], d["losses"][-1]))
        check(n["losses"] == d["losses"], "rank %d: DDP losses identical to native's" % r)
        check(d["peak"] <= n["peak"], "rank %d: peak physical %.0f MiB <= native's peak reserved %.0f MiB"
              % (r, d["peak"] / 2**20, n["peak"] / 2**20))
        print("rank %d: step time %.3f x native's (not asserted: a benchmark's number)"
              % (r, d["median_ms"] / n["median_ms"]))
        check(nat[r]["tp"]["tokens"] == dm[r]["tp"]["tokens"], "rank %d: TP tokens equal native's" % r)
        bw_n, bw_d = nat[r]["tp"]["busbw_gbs"], dm[r]["tp"]["busbw_gbs"]
        print("rank %d: all_reduce 256 MiB bus bandwidth %.1f / %.1f GB/s" % (r, bw_n, bw_d))
        print("rank %d: all_reduce bandwidth from dmm %.3f x native's (not asserted)" % (r, bw_d / bw_n))
        s = dm[r]["sleep"]
        check(s["freed"] >= 0.95 * s["weights_bytes"], "rank %d: sleep freed %.1f %% of the weights"
              % (r, 100.0 * s["freed"] / s["weights_bytes"]))
        check(s["tokens"] == dm[r]["tp"]["tokens"], "rank %d: the same tokens after wake" % r)

print("\n%d failure(s)" % len(failures))
for f in failures:
    print("  - " + f)
sys.exit(1 if failures else 0)
