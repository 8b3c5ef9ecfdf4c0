# SPDX-License-Identifier: Apache-2.0
"""Who allocated each block: the stack frames of dmm.torch's history (what PyTorch records with
_record_memory_history(context=..., stacks=...)).

While on for a device, libdmm_torch calls _gather (a ctypes callback) for each pool block it hands out
(and, with context "all", frees), on the allocating thread with no lock of dmm held
(adapters/torch/frames.c). _gather takes the GIL, walks the thread's Python frames, interns the stack
with the native return addresses it was given (stacks="all") and returns the stack's number, which the
device keeps with the block and with the event. frames(n) turns a number back into PyTorch's frame
dicts ({"filename", "line", "name"}, innermost first): the native frames from torch's allocator call
up to the interpreter (dmm's own left out; an object file and a symbol each, line 0), then the Python
frames.

The cost per event is a walk of the thread's frames, keeping each one's code identity and bytecode
offset (the line is looked up when frames() is asked), and one dictionary lookup of that key (a code
object is kept alive once seen, so its identity is never reused).

Invariants (under _lock): number n >= 1 is _table[n - 1] and never changes, so the numbers blocks and
events hold stay valid across history() calls; at most MAX_STACKS distinct stacks are numbered, a later
new one gets the number of one marker stack with no frames (counted in `overflowed`); a stack keeps at
most MAX_DEPTH Python frames (the innermost); at most MAX_SYMBOLS native addresses are named and kept.
_gather never raises into C: a failure numbers the event 0 (no frames). The callback object is never
freed (a thread the library let in before an off() may still be in it at exit).
"""

import ctypes
import os
import sys
import threading

from . import _lib

__all__ = ["on", "off", "frames", "stats", "CONTEXTS", "STACKS"]

CONTEXTS = (None, "state", "alloc", "all")  # PyTorch's: what gets frames (blocks; + allocs; + frees)
STACKS = ("python", "all")                  # PyTorch's: Python frames; + native (C/C++) frames
MAX_DEPTH = 128
MAX_STACKS = 1 << 18
MAX_SYMBOLS = 1 << 16
NATIVE_DEPTH = 48
_ALLOC, _FREE = 1 << 0, 1 << 1  # the event kinds the hook is called for (1 << DMM_DEVICE_EVENT_*)

_HOOK = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int)
_lock = threading.RLock()  # re-entered when a collection inside frees a tensor (and calls the hook)
_codes = {}     # id(code) -> code: every code object a stack names, kept alive
_table = []     # number - 1 -> (python frames (id(code), bytecode offset, ...) flat, native addresses (int, ...))
_numbers = {}   # the same key -> number
_symbols = {}   # native address -> frame dict, or None for dmm's own frames
_state = {"hook": None, "overflowed": 0}


_MARKER = ((), ())  # the stack past MAX_STACKS: no frames


def _number(py, native):
    key = (py, native)
    with _lock:
        n = _numbers.get(key)
        if n is not None:
            return n
        if len(_table) >= MAX_STACKS:
            _state["overflowed"] += 1
            key = _MARKER
            n = _numbers.get(key)
            if n is not None:
                return n
        _table.append(key)
        n = _numbers[key] = len(_table)
        return n


def _gather(event, native, n):
    try:
        try:
            f = sys._getframe(1)  # the frame that called into torch
        except ValueError:  # a thread Python did not start: no Python frames
            f = None
        py, codes, left = [], _codes, MAX_DEPTH
        while f is not None and left:  # (code identity, bytecode offset) pairs: the line is found later
            code = f.f_code
            k = id(code)
            if k not in codes:
                codes[k] = code
            py.append(k)
            py.append(f.f_lasti)
            f = f.f_back
            left -= 1
        return _number(tuple(py), tuple(native[:n]) if n > 0 else ())
    except BaseException:  # noqa: BLE001 - a callback from C: nothing may propagate
        return 0


_lines = {}  # (id(code), bytecode offset) -> line


def _line(k, offset):
    line = _lines.get((k, offset))
    if line is None:
        line, code = 0, _codes[k]
        if hasattr(code, "co_lines"):  # Python >= 3.10
            for start, end, ln in code.co_lines():
                if start <= offset < end:
                    line = ln or 0
                    break
        else:
            import dis

            for start, ln in dis.findlinestarts(code):
                if start > offset:
                    break
                line = ln
        if len(_lines) < MAX_SYMBOLS:
            _lines[(k, offset)] = line
    return line


def _hook():
    if _state["hook"] is None:
        hook = _HOOK(_gather)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(hook))  # never freed: see the module's docstring
        _state["hook"] = hook
    return _state["hook"]


def check(context, stacks):
    """ValueError naming the argument when context or stacks is not one of PyTorch's values."""
    if context not in CONTEXTS:
        raise ValueError("dmm.torch.history: context must be one of %s, not %r" % (", ".join(map(repr, CONTEXTS)),
                                                                                  context))
    if stacks not in STACKS:
        raise ValueError("dmm.torch.history: stacks must be 'python' or 'all', not %r" % (stacks,))


def on(device, context="all", stacks="python", skip=0):
    """Frames from now on for `device`'s pool blocks: context "state" or "alloc" numbers allocations,
    "all" frees too (None: none). stacks "python" or "all" (native frames too). skip: the C mask of
    event kinds the history leaves out."""
    check(context, stacks)
    lib = _lib.load()
    if context is None:
        _lib.check(lib.dmm_torch_history_context(device, skip, 0, 0, None), "dmm.torch.history")
        return
    events = _ALLOC | (_FREE if context == "all" else 0)
    depth = NATIVE_DEPTH if stacks == "all" else 0
    _lib.check(lib.dmm_torch_history_context(device, skip, events, depth, _hook()), "dmm.torch.history")


def off(device):
    """No frames from now on for `device` (the numbers already kept stay valid); returns once no call into
    the hook is in flight."""
    _lib.load().dmm_torch_history_context(device, 0, 0, 0, None)


def _native(addr):
    with _lock:
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
    with _lock:
        if len(_symbols) < MAX_SYMBOLS:
            _symbols[addr] = frame
    return frame


def _interpreter(frame):
    base = os.path.basename(frame["filename"])
    return base.startswith("python") or base.startswith("libpython")


def frames(n):
    """PyTorch's frames of stack number n (0 or unknown: []), new dicts each call."""
    with _lock:
        if not isinstance(n, int) or not 1 <= n <= len(_table):
            return []
        py, native = _table[n - 1]
        codes = [(_codes[py[i]], _line(py[i], py[i + 1])) for i in range(0, len(py), 2)]
    out = []
    for addr in native:
        f = _native(addr) if addr else None
        if f is None:
            continue
        if _interpreter(f):
            break  # the interpreter's own frames: the Python frames below say where it was
        out.append(dict(f))
    out.extend({"filename": code.co_filename, "line": line, "name": code.co_name} for code, line in codes)
    return out


def stats():
    """{"stacks": distinct stacks numbered, "overflowed": events past MAX_STACKS}."""
    with _lock:
        return {"stacks": len(_table), "overflowed": _state["overflowed"]}
