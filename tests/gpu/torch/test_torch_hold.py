# SPDX-License-Identifier: Apache-2.0
"""Issue 14's acceptance 5 and the holder over CUDA: weights kept on the device by `dmm hold --cuda 0`
across the death of the process that made them, and served to another PyTorch process.

  - a client creates region "llama/weights" (256 MiB) through dmm.torch.hold_create, fills it, and is
    killed with SIGKILL; a new process attaches it (dmm.torch.attach; the time is printed) and reads the
    same bytes; its dmm stats count the region as mapped and imported, not as its own physical memory;
  - a write through a read-only attachment fails (the CUDA context of that process dies; the holder
    and the region do not);
  - drop: the region is gone (a later attach is refused with a sentence naming it), and the holder
    stops cleanly;
  - a Llama-style model (~1.7 GB of bf16 weights): a process loads its checkpoint from disk into a
    holder region, generates, and is killed; a restarted process attaches the weights, generates the
    same tokens, and does so with no copy of them (its own physical memory stays below the weights'
    bytes); attach time against load time is printed.

Exit 0 = all held, 1 = something did not, 77 = no torch/GPU or no dmm tool (DMM_CLI).
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import check, failures, mib, require_torch_gpu, result_of, SKIP, worker_env  # noqa: E402

require_torch_gpu()
cli = os.environ.get("DMM_CLI")
if not cli or not os.access(cli, os.X_OK):
    print("SKIP: the dmm tool is not built (DMM_CLI=%r)" % cli)
    sys.exit(SKIP)

PRELUDE = r"""
import os, signal, sys, time, torch
sys.path.insert(0, %r)
from _common import emit
import dmm.torch as dt
sock = sys.argv[1]
N = 64 << 20   # float32: 256 MiB
torch.zeros(1, device="cuda")   # the CUDA context exists before anything is timed
""" % os.path.dirname(os.path.abspath(__file__))

CREATE = PRELUDE + r"""
w, token = dt.hold_create("llama/weights", (N,), torch.float32, sock)
w.copy_(torch.arange(N, device="cuda", dtype=torch.float32).sin_())
torch.cuda.synchronize()
emit({"token": token})
os.kill(os.getpid(), signal.SIGKILL)          # a crash: nothing is cleaned up
"""

ATTACH = PRELUDE + r"""
token = sys.argv[2]
t0 = time.perf_counter()
w = dt.attach("llama/weights", (N,), torch.float32, token, sock)
torch.cuda.synchronize()
attach_ms = (time.perf_counter() - t0) * 1e3
same = bool(torch.equal(w, torch.arange(N, device="cuda", dtype=torch.float32).sin_()))
host = torch.arange(N, dtype=torch.float32).sin_().pin_memory()
t0 = time.perf_counter()
reload = host.to("cuda"); torch.cuda.synchronize()
reload_ms = (time.perf_counter() - t0) * 1e3
raw = dt.memory_stats_raw()
imported = raw["arena"].get("imported_bytes", -1)
imported = imported["current"] if isinstance(imported, dict) else imported
emit({"same": same, "attach_ms": attach_ms, "reload_ms": reload_ms, "physical": raw["physical_bytes"]["current"],
      "mapped": raw["reserved_bytes"]["current"], "imported": imported,
      "bytes": w.nbytes})
"""

WRITE = PRELUDE + r"""
w = dt.attach("llama/weights", (N,), torch.float32, sys.argv[2], sock)
try:
    w.fill_(0.0)
    torch.cuda.synchronize()
    emit({"write": "succeeded"})
except Exception as e:  # noqa: BLE001
    emit({"write": "failed: " + str(e).splitlines()[0][:200]})
    os._exit(0)   # the CUDA context is gone: leave without touching it again
"""

DROP = PRELUDE + r"""
token, name = sys.argv[2], sys.argv[3]   # the region to drop ("llama/weights", "llama/model")
dt.drop(name, token, sock)
try:
    dt.attach(name, (N,), torch.float32, token, sock)
    emit({"after_drop": "attached"})
except dt.DmmError as e:
    emit({"after_drop": "refused: " + str(e)[:300]})
"""


# ---- a Llama-style model's weights across a restart ----
# Every parameter and buffer lives in one region at a 256-byte aligned offset; a process binds the
# model (built on the meta device: no weights of its own) to views of that region.
LLAMA = PRELUDE + r"""
import json
from models import deterministic, generate, prompt
from transformers import LlamaConfig, LlamaForCausalLM
deterministic()
mode, ckpt = sys.argv[2], sys.argv[3]


def skeleton():
    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=1024)
    with torch.device("meta"):
        return LlamaForCausalLM(cfg).to(torch.bfloat16).eval(), cfg


def bind(model, region, layout):
    for name, kind, shape, dtype, off in layout:
        dtype = getattr(torch, dtype)
        n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        view = region[off:off + n].view(dtype).view(shape)
        mod, leaf = model.get_submodule(name.rpartition(".")[0]), name.rpartition(".")[2]
        if kind == "p":
            mod._parameters[leaf] = torch.nn.Parameter(view, requires_grad=False)
        else:
            mod._buffers[leaf] = view


t0 = time.perf_counter()
model, cfg = skeleton()
if mode == "load":   # the checkpoint from disk into a new holder region
    sd = torch.load(ckpt + ".pt", map_location="cpu", mmap=True)
    layout = json.load(open(ckpt + ".json"))
    total = max(off + sd[name].numel() * sd[name].element_size() for name, _, _, _, off in layout)
    region, token = dt.hold_create("llama/model", (total,), torch.uint8, sock)
    for name, _, _, _, off in layout:
        t = sd[name]
        region[off:off + t.numel() * t.element_size()].copy_(t.contiguous().view(-1).view(torch.uint8))
else:                # a restart: the weights are still on the device
    layout = json.load(open(ckpt + ".json"))
    token = sys.argv[4]
    total = max(off + torch.Size(shape).numel() * torch.empty((), dtype=getattr(torch, dt_)).element_size()
                for _, _, shape, dt_, off in layout)
    region = dt.attach("llama/model", (total,), torch.uint8, token, sock)
bind(model, region, layout)
torch.cuda.synchronize()
ready_ms = (time.perf_counter() - t0) * 1e3
tokens = generate(model, prompt(cfg))
raw = dt.memory_stats_raw()
emit({"token": token, "ready_ms": ready_ms, "tokens": tokens, "bytes": total,
      "physical": raw["physical_bytes"]["current"]})
if mode == "load":
    os.kill(os.getpid(), signal.SIGKILL)
"""

CHECKPOINT = PRELUDE + r"""
import json
from models import llama
model, cfg, nbytes = llama()
layout, sd, off = [], {}, 0
for kind, items in (("p", model.named_parameters()), ("b", model.named_buffers())):
    for name, t in items:
        layout.append([name, kind, list(t.shape), str(t.dtype).replace("torch.", ""), off])
        sd[name] = t.detach().cpu()
        off += (t.numel() * t.element_size() + 255) // 256 * 256
torch.save(sd, sys.argv[2] + ".pt")
json.dump(layout, open(sys.argv[2] + ".json", "w"))
emit({"bytes": off, "tensors": len(layout)})
"""


def child(code, *args):
    p = subprocess.run([sys.executable, "-c", code] + list(args), env=worker_env("native"), capture_output=True,
                       text=True, timeout=300)
    res = result_of(p.stdout)
    if res is None:
        print((p.stdout + p.stderr)[-2000:])
    return p.returncode, res


with tempfile.TemporaryDirectory() as tmp:
    os.chmod(tmp, 0o700)
    sock = os.path.join(tmp, "dmm.sock")
    holder = subprocess.Popen([cli, "hold", "--socket", sock, "--cuda", "0"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    line = holder.stdout.readline()
    print("holder: " + line.strip())
    if "listening" not in line:
        print(holder.stderr.read()[-2000:])
        check(False, "dmm hold --cuda 0 started")
    else:
        rc, r = child(CREATE, sock)
        check(rc == -signal.SIGKILL and r is not None, "the creating client filled the region and died of SIGKILL "
              "(rc %s)" % rc)
        token = r["token"] if r else "00" * 16
        rc, a = child(ATTACH, sock, token)
        if a is None:
            check(False, "a new process attached the region")
        else:
            print("  attach %.1f ms (a reload of the same bytes from pinned host memory: %.1f ms); mapped %s, "
                  "imported %s, own physical %s" % (a["attach_ms"], a["reload_ms"], mib(a["mapped"]),
                                                    mib(a["imported"]), mib(a["physical"])))
            check(a["same"], "the new process reads the dead one's bytes")
            check(a["imported"] == a["bytes"] and a["mapped"] >= a["bytes"] and a["physical"] < a["bytes"],
                  "its stats: the region mapped and imported, not its own physical memory")
        rc, wr = child(WRITE, sock, token)
        check(wr is not None and wr["write"].startswith("failed"), "a write through a read-only attachment "
              "failed (%s)" % (wr["write"] if wr else "no result, rc %s" % rc))
        rc, a2 = child(ATTACH, sock, token)
        check(a2 is not None and a2["same"], "the region survived the faulting writer, bytes intact")
        rc, d = child(DROP, sock, token, "llama/weights")
        check(d is not None and d["after_drop"].startswith("refused") and "llama/weights" in d["after_drop"],
              "after drop, attach is refused naming the region (%s)" % (d["after_drop"] if d else rc))
        ckpt = os.path.join(tmp, "llama")
        rc, c = child(CHECKPOINT, sock, ckpt)
        rc, ld = child(LLAMA, sock, "load", ckpt) if c else (None, None)
        check(c is not None and ld is not None and rc == -signal.SIGKILL,
              "a process loaded the Llama checkpoint (%s) into the holder, generated and died of SIGKILL (rc %s)"
              % (mib(c["bytes"]) if c else "?", rc))
        rc, at = child(LLAMA, sock, "attach", ckpt, ld["token"]) if ld else (None, None)
        if at is None:
            check(False, "a restarted process attached the Llama weights")
        else:
            print("  Llama weights %s: load from disk into the holder %.0f ms, attach after a restart %.0f ms "
                  "(%.1fx faster); the attaching process's own physical memory %s"
                  % (mib(at["bytes"]), ld["ready_ms"], at["ready_ms"], ld["ready_ms"] / max(at["ready_ms"], 1e-3),
                     mib(at["physical"])))
            check(at["tokens"] == ld["tokens"], "the restarted process generates the same %d x %d tokens"
                  % (len(at["tokens"]), len(at["tokens"][0])))
            check(at["physical"] < at["bytes"], "no second copy of the weights in the restarted process")
            rc, d = child(DROP, sock, ld["token"], "llama/model")
            check(d is not None and d["after_drop"].startswith("refused"), "the model's region dropped")
        holder.send_signal(signal.SIGTERM)
        try:
            hrc = holder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            holder.kill()
            hrc = "hung"
        err = holder.stderr.read()
        print("holder's log:\n" + "\n".join("  " + x for x in err.splitlines()[-12:]))
        check(hrc == 0, "the holder stopped cleanly on SIGTERM (rc %s)" % hrc)
    if holder.poll() is None:
        holder.kill()

print("\n%d failure(s)" % len(failures))
for f in failures:
    print("  - " + f)
sys.exit(1 if failures else 0)
