# SPDX-License-Identifier: Apache-2.0
"""Who allocated each block: the stack frames of dmm.torch's history (what PyTorch records with
_record_memory_history(context=..., stacks=...)).

While on, libdmm_torch calls _gather (a ctypes callback) for each pool block it hands out or frees, on
the allocating thread with no lock of dmm held (adapters/torch/frames.c). _gather takes the GIL, walks
the thread's Python frames, interns them with the native return addresses it was given (stacks="all")
and returns the stack's number, which the device keeps with the block and with the event. frames(n)
turns a number back into PyTorch's frame dicts ({"filename", "line", "name"}, innermost first): the
native frames from torch's allocator call up to the interpreter (dmm's own left out; an object file
and a symbol each, line 0), then the Python frames.

Invariants: number n >= 1 is _table[n - 1] and never changes, so the numbers blocks and events hold
stay valid across history() calls; at most MAX_STACKS distinct stacks are numbered, a later new one
gets the number of one marker stack (counted in `overflowed`); a stack keeps at most MAX_DEPTH Python
frames (the innermost). _gather never raises into C: a failure numbers the event 0 (no frames).
"""

import ctypes
import os
import sys

from . import _lib

__all__ = ["on", "off", "frames", "CONTEXTS", "STACKS"]

CONTEXTS = (None, "state", "alloc", "all")  # PyTorch's: what gets frames (blocks; + allocs; + frees)
STACKS = ("python", "all")                  # PyTorch's: Python frames; + native (C/C++) frames
MAX_DEPTH = 128
MAX_STACKS = 1 << 18
NATIVE_DEPTH = 48
_EVENT_FREE = 1  # DMM_DEVICE_EVENT_FREE

_HOOK = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int)
_table = []     # number - 1 -> (python frames ((code, line), ...), native addresses (int, ...))
_numbers = {}   # the same key -> number
_symbols = {}   # native address -> frame dict, or None for dmm's own frames
_state = {"frees": False, "hook": None, "overflowed": 0}


def _number(key):
    n = _numbers.get(key)
    if n is not None:
        return n
    if len(_table) >= MAX_STACKS:
        _state["overflowed"] += 1
        key = ((), ())  # the marker: no frames
        n = _numbers.get(key)
        if n is not None:
            return n
    _table.append(key)
    n = _numbers[key] = len(_table)
    return n


def _gather(event, native, n):
    try:
        if event == _EVENT_FREE and not _state["frees"]:
            return 0
        py = []
        f = sys._getframe(0).f_back  # the frame that called into torch (none on a thread Python did not start)
        while f is not None and len(py) < MAX_DEPTH:
            py.append((f.f_code, f.f_lineno))
            f = f.f_back
        return _number((tuple(py), tuple(native[:n]) if n > 0 else ()))
    except BaseException:  # noqa: BLE001 - a callback from C: nothing may propagate
        return 0


def on(device, context="all", stacks="python", skip=0):
    """Frames from now on for `device`'s pool blocks: context "state" or "alloc" numbers allocations,
    "all" frees too (None: off). stacks "python" or "all" (native frames too). skip: the C mask of
    event kinds the history leaves out."""
    if context not in CONTEXTS:
        raise ValueError("dmm.torch.history: context must be one of %s, not %r" % (", ".join(map(repr, CONTEXTS)),
                                                                                  context))
    if stacks not in STACKS:
        raise ValueError("dmm.torch.history: stacks must be 'python' or 'all', not %r" % (stacks,))
    lib = _lib.load()
    if context is None:
        _lib.check(lib.dmm_torch_history_context(device, skip, 0, None), "dmm.torch.history")
        return
    if _state["hook"] is None:
        import atexit

        _state["hook"] = _HOOK(_gather)
        atexit.register(off, device)  # no event after exit calls into an interpreter that is gone
    _state["frees"] = context == "all"
    depth = NATIVE_DEPTH if stacks == "all" else 0
    _lib.check(lib.dmm_torch_history_context(device, skip, depth, _state["hook"]), "dmm.torch.history")


def off(device):
    """No frames from now on (the numbers already kept stay valid)."""
    _lib.load().dmm_torch_history_context(device, 0, 0, None)


def _native(addr):
    if addr in _symbols:
        return _symbols[addr]
    name, obj = ctypes.create_string_buffer(512), ctypes.create_string_buffer(512)
    off_ = ctypes.c_uint64()
    if _lib.load().dmm_torch_native_symbol(ctypes.c_void_p(addr), name, 512, obj, 512, ctypes.byref(off_)) != 0:
        frame = {"filename": "??", "line": 0, "name": "%#x" % addr}
    else:
        o = obj.value.decode(errors="replace")
        n = name.value.decode(errors="replace")
        if os.path.basename(o).startswith("libdmm_torch"):
            frame = None  # dmm's own
        else:
            frame = {"filename": o, "line": 0, "name": (n + "+%#x" % off_.value) if n else "%#x" % off_.value}
    _symbols[addr] = frame
    return frame


def _interpreter(frame):
    base = os.path.basename(frame["filename"])
    return base.startswith("python") or base.startswith("libpython")


def frames(n):
    """PyTorch's frames of stack number n (0 or unknown: [])."""
    if not isinstance(n, int) or not 1 <= n <= len(_table):
        return []
    py, native = _table[n - 1]
    out = []
    for addr in native:
        f = _native(addr) if addr else None
        if f is None:
            continue
        if _interpreter(f):
            break  # the interpreter's own frames: the Python frames below say where it was
        out.append(f)
    out.extend({"filename": code.co_filename, "line": line if line is not None else 0, "name": code.co_name}
               for code, line in py)
    return out


def stats():
    """{"stacks": distinct stacks numbered, "overflowed": events past MAX_STACKS}."""
    return {"stacks": len(_table), "overflowed": _state["overflowed"]}
