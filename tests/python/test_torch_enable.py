# SPDX-License-Identifier: Apache-2.0
"""dmm.torch.enable() wired into torch, checked without a GPU: a stand-in `torch` module (the parts of
torch's API that enable() and python/dmm/_torch_calls.py touch, each recording its calls) and the real
libdmm_torch.so (DMM_LIB).

What is proven: enable() refuses once CUDA is initialized, naming the remedy, and changes nothing;
otherwise it installs dmm's pair as torch's allocator and dmm_torch_record_stream as its
record_stream function; it replaces exactly the torch._C entries torch's memory functions call (those
this torch has, no others) and mem_get_info in both places torch exports it; each replaced entry
answers from dmm.torch (stats in torch's nested layout from dmm's stats, peaks and accumulated resets,
empty_cache on the devices dmm serves, the memory fraction as dmm's limit and back, the history's
size, the snapshot in torch's layout); mem_get_info's free is bounded by the limit; a device dmm does
not serve yet answers zeros without dmm being asked (which would create a context there). dmm.torch's
device-facing calls are replaced by recorders here (they need a GPU); the fixture's stats are those
unit/test_torch_snapshot wrote (DMM_TORCH_SNAPSHOT_FIXTURE).
Exit 0 = all held, 1 = a check failed, 77 = no fixture or no unsanitized library (run it through CTest).
"""

import contextlib
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

from _checks import check, failures, raises  # noqa: E402

fixture = os.environ.get("DMM_TORCH_SNAPSHOT_FIXTURE")
lib = os.environ.get("DMM_LIB")
if not fixture or not os.path.exists(fixture) or not lib or not os.path.exists(lib):
    print("SKIP: needs DMM_TORCH_SNAPSHOT_FIXTURE and an unsanitized DMM_LIB (run through CTest)")
    sys.exit(77)
with open(fixture) as f:
    RAW = json.load(f)

calls = []


def original(name):
    def fn(*a, **k):
        calls.append(("torch original", name))
        raise RuntimeError("CUDAPluggableAllocator does not yet support %s" % name)
    return fn


# ---- the stand-in torch ----
torch = types.ModuleType("torch")
torch._C = types.ModuleType("torch._C")
ENTRIES = ["_cuda_memoryStats", "_cuda_resetPeakMemoryStats", "_cuda_resetAccumulatedMemoryStats", "_cuda_emptyCache",
           "_cuda_setMemoryFraction", "_cuda_getMemoryFraction", "_cuda_record_memory_history",
           "_cuda_record_memory_history_legacy", "_cuda_memorySnapshot", "_accelerator_getDeviceStats",
           "_accelerator_resetPeakStats", "_accelerator_resetAccumulatedStats", "_accelerator_emptyCache",
           "_accelerator_isAllocatorInitialized",  # (torch >= 2.9; this stand-in lacks the older spelling)
           "_cuda_attach_out_of_memory_observer", "_accelerator_getMemoryInfo"]
for n in ENTRIES + ["_cuda_unrelated"]:
    setattr(torch._C, n, original(n))
torch.cuda = types.ModuleType("torch.cuda")
torch.cuda.memory = types.ModuleType("torch.cuda.memory")
state = {"initialized": False, "allocator": None, "record_stream_fn": None}
torch.cuda.is_initialized = lambda: state["initialized"]
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_properties = lambda d: types.SimpleNamespace(total_memory=1000 << 20)


class Hooks:
    def set_record_stream_fn(self, ptr):
        state["record_stream_fn"] = ptr


class PluggableAllocator:
    def __init__(self, path, malloc, free):
        self.path, self.names = path, (malloc, free)
        self._hooks = Hooks()

    def allocator(self):
        return self._hooks


def change_current_allocator(a):
    state["allocator"] = a


def mem_get_info(device=None):
    return (900 << 20, 1000 << 20)


compiled = []  # what the stand-in torch.compile was asked


def compile_standin(model=None, **kwargs):
    compiled.append((model, kwargs))
    return model


torch.compile = compile_standin
torch.cuda.memory.CUDAPluggableAllocator = PluggableAllocator
torch.cuda.memory.change_current_allocator = change_current_allocator
torch.cuda.memory.mem_get_info = mem_get_info
torch.cuda.mem_get_info = mem_get_info
sys.modules["torch"] = torch
sys.modules["torch._C"] = torch._C
sys.modules["torch.cuda"] = torch.cuda
sys.modules["torch.cuda.memory"] = torch.cuda.memory

import dmm.torch as dt  # noqa: E402
from dmm import _torch_calls  # noqa: E402

# dmm.torch's device-facing calls, recorded (they would create a CUDA context)
limit = {"bytes": None}
dt.memory_stats_raw = lambda device=None: dict(RAW, limit=limit["bytes"])
dt.reset_peak_memory_stats = lambda device=None: calls.append(("dmm", "reset_peaks", device))
dt.empty_cache = lambda device=None: calls.append(("dmm", "empty_cache", device))
dt.set_limit = lambda b, device=None: (calls.append(("dmm", "set_limit", b, device)), limit.update(bytes=b))
dt.history = lambda n, device=None, context=None, stacks="python", skip_actions=(): calls.append(
    ("dmm", "history", n, device, context, stacks, tuple(skip_actions)))
dt.snapshot = lambda device=None: RAW

# ---- a tag is a name: anything else is a TypeError that says so, before the library is asked ----
for fn in (lambda: dt.offload(3), lambda: dt.restore(b"w"), lambda: dt.tag(None).__enter__(),
           lambda: dt.offload_wait(["w"]), lambda: dt.release_host(1.5)):
    ok, msg = raises(TypeError, fn, "a tag is a name, a str")
    check(ok, "a tag that is not a str: TypeError naming what a tag is (%s)" % msg)
ok, msg = raises(ValueError, lambda: dt.offload(""), "1 to 63 bytes")
check(ok, "an empty tag: ValueError with the rule (%s)" % msg)
ok, msg = raises(ValueError, lambda: dt.offload("w" * 64), "1 to 63 bytes")
check(ok, "a tag of 64 bytes: ValueError with the rule (%s)" % msg)

# ---- the default tag and untagged blocks, through the library ----
ok, msg = raises(TypeError, lambda: dt.default_tag(3), "a tag is a name, a str")
check(ok, "a default tag that is not a str: TypeError (%s)" % msg)
ok, msg = raises(ValueError, lambda: dt.default_tag(""), "1 to 63 bytes")
check(ok, "an empty default tag: ValueError (%s)" % msg)
dt.default_tag("everything")
dt.default_tag(None)
with dt.untagged():
    with dt.tag("w"):
        pass
depth = []
try:
    with contextlib.ExitStack() as blocks:
        for _ in range(9):
            blocks.enter_context(dt.untagged())
            depth.append(1)
except dt.DmmError as e:
    check("at most 8 deep" in str(e), "a ninth nested block is refused with the rule: %s" % e)
check(len(depth) == 8, "eight untagged blocks nest, the ninth is refused (%d entered)" % len(depth))
with dt.untagged():  # every refused or closed block was ended: the thread's scopes are empty again
    pass

# ---- DMM_DISABLE=1 switches dmm off: enable() changes nothing and says so once ----
import logging  # noqa: E402

said = []
handler = logging.Handler()
handler.emit = lambda record: said.append(record.getMessage())
logging.getLogger("dmm").addHandler(handler)
os.environ["DMM_DISABLE"] = "1"
dt.enable()
dt.enable()
del os.environ["DMM_DISABLE"]
logging.getLogger("dmm").removeHandler(handler)
check(state["allocator"] is None and not _torch_calls._installed and not dt._enabled,
      "DMM_DISABLE=1: enable() installs nothing")
check(len(said) == 1 and "DMM_DISABLE=1 switches dmm off" in said[0], "DMM_DISABLE=1: said once (%s)" % said)

# ---- refused once CUDA is initialized ----
state["initialized"] = True
ok, msg = raises(dt.DmmError, dt.enable, "before CUDA is initialized", "import torch")
check(ok and state["allocator"] is None and not _torch_calls._installed,
      "enable() after CUDA init is refused with the remedy, and changes nothing (%s)" % msg)
state["initialized"] = False

# ---- enable ----
dt.enable()
check(state["allocator"] is not None and state["allocator"].names == ("dmm_torch_malloc", "dmm_torch_free") and
      os.path.realpath(state["allocator"].path) == os.path.realpath(lib),
      "enable() made dmm's pair torch's allocator (%s)" % (state["allocator"].path if state["allocator"] else None))
check(isinstance(state["record_stream_fn"], int) and state["record_stream_fn"] != 0,
      "dmm_torch_record_stream is torch's record_stream function")
replaced = [n for n in ENTRIES if getattr(torch._C, n).__module__ == "dmm._torch_calls"]
check(replaced == ENTRIES, "every torch._C entry of torch's memory calls is replaced (%d of %d)"
      % (len(replaced), len(ENTRIES)))
check(getattr(torch._C, "_cuda_unrelated").__module__ != "dmm._torch_calls", "nothing else in torch._C is touched")
check(torch.cuda.mem_get_info is not mem_get_info and torch.cuda.memory.mem_get_info is torch.cuda.mem_get_info,
      "mem_get_info replaced where torch exports it")

# ---- a device dmm does not serve (no allocation there yet): zeros, and dmm is not asked ----
asked = []
real_raw = dt.memory_stats_raw
dt.memory_stats_raw = lambda device=None: asked.append(device) or real_raw(device)
z = torch._C._cuda_memoryStats(0)
check(z["allocation"]["all"]["current"] == 0 and z["reserved_bytes"]["all"]["current"] == 0 and not asked,
      "a device dmm does not serve: zeros, without asking dmm (which would create its context there)")
check(torch.cuda.mem_get_info(0) == (900 << 20, 1000 << 20) and not asked, "mem_get_info there: the driver's")
dt.memory_stats_raw = real_raw
_torch_calls._devices = lambda: [0]  # from here on, device 0 is served

# ---- each entry answers from dmm ----
n = torch._C._cuda_memoryStats(0)
check(n["allocation"]["all"]["current"] == RAW["allocation"]["current"] and
      n["reserved_bytes"]["all"]["current"] == RAW["reserved_bytes"]["current"] and "segment" in n,
      "_cuda_memoryStats: torch's nested layout of dmm's stats")
torch._C._cuda_resetPeakMemoryStats(0)
check(("dmm", "reset_peaks", 0) in calls, "_cuda_resetPeakMemoryStats -> dmm's reset_peak_memory_stats")
torch._C._cuda_emptyCache()
check(("dmm", "empty_cache", 0) in calls, "_cuda_emptyCache -> dmm's empty_cache on every device dmm serves")
check(not any(c[0] == "torch original" for c in calls), "no call reached torch's own (raising) entries")
torch._C._cuda_setMemoryFraction(0.25, 0)
check(("dmm", "set_limit", 250 << 20, 0) in calls, "_cuda_setMemoryFraction(0.25) -> dmm's limit = 0.25 x total")
check(torch._C._cuda_getMemoryFraction(0) == 0.25, "_cuda_getMemoryFraction gives the fraction back")
free, total = torch.cuda.mem_get_info(0)
bound = (250 << 20) - RAW["physical_bytes"]["current"]
check(free == min(900 << 20, max(0, bound)) and total == 1000 << 20,
      "mem_get_info under the limit: free %d = min(driver's, limit - physical), total the device's" % free)
torch._C._cuda_record_memory_history("all", "all", "all", sys.maxsize)
torch._C._cuda_record_memory_history(None, None, "all", 5000)
torch._C._cuda_record_memory_history_legacy(True, True, 777)
torch._C._cuda_record_memory_history("all", "alloc", "python", 10, False, False, False, ["free_requested"])
torch._C._cuda_record_memory_history("all", "state", "all", 10, skip_actions=["alloc"])
torch._C._cuda_record_memory_history_legacy(True, True, 5, True, True)
torch._C._cuda_record_memory_history("state", "state", "python", 10)
hist = [c for c in calls if c[1] == "history"]
check(hist == [("dmm", "history", 1 << 20, 0, "all", "all", ()), ("dmm", "history", 0, 0, None, "all", ()),
               ("dmm", "history", 777, 0, "state", "python", ()),
               ("dmm", "history", 10, 0, "alloc", "python", ("free_requested",)),
               ("dmm", "history", 10, 0, "state", "all", ("alloc",)),
               ("dmm", "history", 5, 0, "alloc", "all", ()), ("dmm", "history", 0, 0, "state", "python", ())],
      "_record_memory_history: torch's default max_entries -> 2^20, None -> off, 'state' -> frames without a "
      "trace, context, stacks and skip_actions passed on (positional or named), the legacy form too (%s)" % hist)
snap = torch._C._cuda_memorySnapshot(None)
check(isinstance(snap, dict) and "segments" in snap and "device_traces" in snap,
      "_cuda_memorySnapshot: the snapshot in torch's layout")
a = torch._C._accelerator_getDeviceStats(0)
check(a["allocation"] == n["allocation"] and a["reserved_bytes"] == n["reserved_bytes"] and "segment" in a
      and torch._C._accelerator_isAllocatorInitialized() is True,
      "torch.accelerator (torch >= 2.9): getDeviceStats is dmm's nested stats, the allocator reads initialized")
calls.clear()
torch._C._accelerator_resetPeakStats(0)
torch._C._accelerator_emptyCache()
check(("dmm", "reset_peaks", 0) in calls and ("dmm", "empty_cache", 0) in calls,
      "_accelerator_resetPeakStats / _accelerator_emptyCache -> dmm's")
seen = []
torch._C._cuda_attach_out_of_memory_observer(lambda *a: seen.append(a))
torch._C._cuda_attach_out_of_memory_observer(lambda *a: 1 / 0)  # a failing observer does not stop the next
torch._C._cuda_attach_out_of_memory_observer(lambda *a: seen.append(("second",) + a))
check(_torch_calls._oom_hook is not None, "attaching an observer registers dmm's C callback")
_torch_calls._oom_hook(0, 4096)  # what libdmm_torch.so calls before raising a refusal
check(len(seen) == 2 and seen[0][:2] == (0, 4096) and seen[0][2] in (250 << 20, 1000 << 20)
      and seen[1][0] == "second", "the observers get (device, bytes, the limit or total, free), in order: %s" % seen)
check(torch._C._accelerator_getMemoryInfo(0) == torch.cuda.mem_get_info(0),
      "_accelerator_getMemoryInfo (torch.accelerator.get_memory_info) is mem_get_info under dmm's limit")
ok, msg = raises(TypeError, lambda: torch._C._cuda_attach_out_of_memory_observer(42), "callable")
check(ok, "a non-callable observer is refused: %s" % msg)
check(not any(c[0] == "torch original" for c in calls), "still no call reached torch's own entries")
dt.enable()  # a second enable() changes nothing
check(list(_torch_calls._installed) == ENTRIES + ["mem_get_info"], "a second enable() installs nothing twice")

# ---- torch.compile: the modes that capture CUDA graphs fall back to the same kernels without them ----
said.clear()
logging.getLogger("dmm").addHandler(handler)
m = object()
torch.compile(m, mode="reduce-overhead")
torch.compile(m, mode="reduce-overhead", fullgraph=True)
torch.compile(mode="max-autotune")
torch.compile(m)
logging.getLogger("dmm").removeHandler(handler)
check([c[1].get("mode", "absent") for c in compiled] == [None, None, "max-autotune-no-cudagraphs", "absent"]
      and compiled[1][1].get("fullgraph") is True and compiled[0][0] is m,
      "torch.compile under dmm: reduce-overhead -> the default mode, max-autotune -> max-autotune-no-cudagraphs, "
      "the other arguments kept (%s)" % [c[1] for c in compiled])
check(len(said) == 1 and "graph trees" in said[0] and "dmm.torch.graph" in said[0],
      "the fallback is said once, with the way to graphs under dmm (%s)" % said)
ok, msg = raises(RuntimeError, lambda: torch.compile(m, options={"triton.cudagraphs": True}), "dmm.torch.graph")
check(ok, "options={'triton.cudagraphs': True} is refused with the same sentence (%s)" % msg[:80])
ok, msg = raises(RuntimeError, lambda: torch.compile(m, backend="cudagraphs"), "dmm.torch.graph")
check(ok, "backend='cudagraphs' is refused with the same sentence (%s)" % msg[:80])
compiled.clear()
torch.compile(m, backend="eager", mode="reduce-overhead")
torch.compile(m, mode="reduce-overhead", options={"x": 1})
check([c[1].get("mode") for c in compiled] == ["reduce-overhead", "reduce-overhead"],
      "another backend, or mode with options (torch's own refusal), gets its arguments as they are")

print("\n%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
