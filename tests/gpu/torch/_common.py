# SPDX-License-Identifier: Apache-2.0
"""Shared by the torch GPU tests: skip rules, PASS/FAIL lines, worker processes, result lines."""

import importlib
import json
import os
import subprocess
import sys

SKIP = 77  # CTest's SKIP_RETURN_CODE
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def import_or_skip(module, name=None):
    """The module, or exit 77 (skipped, never passed) saying that `name` is not importable."""
    try:
        return importlib.import_module(module)
    except Exception as e:  # noqa: BLE001
        print("SKIP: %s is not importable (%s)" % (name or module, e))
        sys.exit(SKIP)


def require_torch_gpu(need_transformers=False):
    """Exits 77 (skipped, never passed) without torch, a GPU or libdmm_torch.so."""
    import_or_skip("torch")
    if need_transformers:
        import_or_skip("transformers")
    sys.path.insert(0, os.path.join(ROOT, "python"))
    try:
        import dmm._lib

        dmm._lib.load()
    except Exception as e:  # noqa: BLE001
        print("SKIP: libdmm_torch.so is not available (%s)" % e)
        sys.exit(SKIP)
    # device count without initializing CUDA in this process (workers need a clean one)
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True)
    if out.returncode != 0 or int((out.stdout.strip() or "0").splitlines()[-1]) < 1:
        print("SKIP: no CUDA GPU visible to torch (%s)" % (out.stderr.strip()[-300:] or out.stdout.strip()))
        sys.exit(SKIP)


failures = []  # what check() found wrong so far: a test exits 1 when it is not empty


def check(ok, what):
    """One PASS/FAIL line; a failure is kept in `failures`."""
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def worker_env(alloc):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("DMM_TORCH_RETAIN", None)
    if alloc == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if alloc == "dmm-lb":  # every launch synchronous: the pool's fences are never pending (diagnostic)
        env["CUDA_LAUNCH_BLOCKING"] = "1"
    if alloc.startswith("dmm-r"):  # the pool's retention, per mille of the live peak (default 20)
        env["DMM_TORCH_RETAIN"] = alloc[len("dmm-r"):]
    return env


def result_of(text, tag="RESULT"):
    for line in text.splitlines():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1:])
    return None


def emit(obj, tag="RESULT"):
    print(tag + " " + json.dumps(obj), flush=True)


def mib(x):
    return "%.1f MiB" % (x / 2**20)
