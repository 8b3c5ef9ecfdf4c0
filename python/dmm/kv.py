# SPDX-License-Identifier: Apache-2.0
"""dmm.kv — the KV arena from Python: each request's KV cache one contiguous, growable range at an address
that never moves, prefixes held once physically and mapped into every request that starts with them
(docs/kv.md; the C API is dmm/kv.h, reached through libdmm_torch.so's dmm_torch_kv_* calls, so the
arena's memory is charged to the same governor and budget as torch's tensors).

Layout (token-major): token t of a request holds, for every layer l, K then V, each [kv_heads, head_dim]:
    cache()[t, l, 0] is K, cache()[t, l, 1] is V    (cache(): [max_tokens, layers, 2, kv_heads, head_dim])
keys(l, n) / values(l, n) are the views attention reads: [kv_heads, n, head_dim] (strided, no copy).

    arena = dmm.kv.Arena(layers=32, kv_heads=8, head_dim=128, dtype=torch.bfloat16, max_tokens=8192)
    sys = arena.open(prompt_len)            # backed for its first prompt_len tokens
    ... prefill writes sys.cache()[:prompt_len] ...
    prefix = arena.share(sys, prompt_len)   # held once, mapped read-only into each request opened with it
    r = arena.open(prompt_len + 1, prefix=prefix)
    r.grow(n)                               # each decode step; a no-op until a granule fills
    r.close(); prefix.release(); arena.close()

A view is valid while its request is open and only over backed tokens: reading past them reads unmapped
memory, and writing into a prefix's tokens writes read-only memory (both a CUDA fault, which ends the
process's CUDA context). With Arena(zero_tail=True) every granule a request does not back reads zeros (one
read-only granule of zeros mapped there), so a kernel captured once may read every request up to
max_tokens and mask the rest, as over a static cache (inside its last granule, the tokens past its length
hold old bytes until written: mask them by selection, or write zeros); info()["unreadable_bytes"] is 0
then, unless a failed call left a hole (its error says so). close() refuses while any view of the request (from cache(), keys() or values(),
or sliced from them) is still referenced: after close the range may be another request's. Close a
request only after the work that uses its views (on its streams) is done or ordered before the next use
of the memory, as with any allocator's free. Views are DLPack tensors that name the arena's device (no
numpy, no guess from the pointer).
Thread contract: one request is driven (grow, share, offload, restore, close) by one thread at a time.
"""

import ctypes

from . import _dlpack, _lib


class _Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("token_bytes", ctypes.c_uint64), ("max_tokens", ctypes.c_uint64),
                ("max_requests", ctypes.c_uint32), ("reserve_bytes", ctypes.c_uint64),
                ("refill_thread", ctypes.c_bool), ("flags", ctypes.c_uint64)]


_ZERO_TAIL = 1  # DMM_KV_ZERO_TAIL


class _RequestInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("base", ctypes.c_void_p), ("backed_tokens", ctypes.c_uint64),
                ("prefix_tokens", ctypes.c_uint64), ("private_bytes", ctypes.c_uint64),
                ("shared_bytes", ctypes.c_uint64), ("offloaded_bytes", ctypes.c_uint64),
                ("unreadable_bytes", ctypes.c_uint64)]


_STATS = ("granule", "range_bytes", "requests", "prefixes", "private_bytes", "shared_bytes", "mapped_shared_bytes",
          "reserve_bytes", "owned_bytes", "driver_creates", "grows", "refusals", "offloaded", "host_bytes", "refills",
          "unreleased")


class _Stats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32)] + [(n, ctypes.c_uint64) for n in _STATS]


class _Outcome(ctypes.Structure):
    _fields_ = [("state", ctypes.c_uint32), ("allocation_bytes", ctypes.c_uint64), ("unmapped_bytes", ctypes.c_uint64),
                ("residual_owned_bytes", ctypes.c_uint64), ("failure", ctypes.c_int), ("exported_bytes", ctypes.c_uint64)]


_STATES = {0: "COMPLETE", 1: "QUARANTINED", 2: "FAILED"}
_P = ctypes.c_void_p
_SIGNATURES = {
    "dmm_torch_kv_create": [ctypes.c_int, ctypes.POINTER(_Config), ctypes.POINTER(_P)],
    "dmm_torch_kv_destroy": [_P],
    "dmm_torch_kv_open": [_P, _P, ctypes.c_uint64, _P, ctypes.POINTER(_P)],
    "dmm_torch_kv_grow": [_P, _P, ctypes.c_uint64],
    "dmm_torch_kv_close": [_P, _P, ctypes.POINTER(_Outcome)],
    "dmm_torch_kv_share": [_P, _P, ctypes.c_uint64, _P, ctypes.POINTER(_P)],
    "dmm_torch_kv_prefix_release": [_P, _P, ctypes.POINTER(_Outcome)],
    "dmm_torch_kv_offload": [_P, _P, _P],
    "dmm_torch_kv_restore": [_P, _P, _P],
    "dmm_torch_kv_request_get": [_P, _P, ctypes.POINTER(_RequestInfo)],
    "dmm_torch_kv_stats": [_P, ctypes.POINTER(_Stats)],
    "dmm_torch_kv_refill": [_P, ctypes.POINTER(ctypes.c_uint64)],
}


def _calls():
    return _lib.bind("kv", {name: (ctypes.c_int, args) for name, args in _SIGNATURES.items()})


def _count(value, what, least=0):
    """value, an int from `least` to 2**64 - 1 (ctypes would cut a larger one silently)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be an int, not %s" % (what, type(value).__name__))
    if value < least or value >= 1 << 64:
        raise ValueError("%s must be from %d to 2**64 - 1, not %d" % (what, least, value))
    return value


def _positive_int(value, what):
    return _count(value, what, least=1)


class Arena:
    """A KV arena on one CUDA device (default: the current one). Its memory is budgeted with torch's."""

    def __init__(self, *, layers, kv_heads, head_dim, dtype, max_tokens, max_requests=0, reserve_bytes=0,
                 refill_thread=False, zero_tail=False, device=None):
        torch = _lib.import_torch("dmm.kv.Arena")
        if not isinstance(dtype, torch.dtype):
            raise TypeError("dtype must be a torch.dtype (e.g. torch.bfloat16), not %r" % (dtype,))
        self.layers = _positive_int(layers, "layers")
        self.kv_heads = _positive_int(kv_heads, "kv_heads")
        self.head_dim = _positive_int(head_dim, "head_dim")
        self.max_tokens = _positive_int(max_tokens, "max_tokens")
        self.dtype = dtype
        d = torch.device("cuda", device) if isinstance(device, int) else torch.device(device or "cuda")
        if d.type != "cuda":
            raise ValueError("dmm.kv.Arena lives on a CUDA device, not %s" % d)
        self.device = torch.device("cuda", d.index if d.index is not None else torch.cuda.current_device())
        self.token_bytes = 2 * self.layers * self.kv_heads * self.head_dim * torch.empty(0, dtype=dtype).element_size()
        if self.token_bytes * self.max_tokens >= 1 << 63:
            raise ValueError("a request's range (max_tokens %d × %d bytes a token) must stay below 2**63 bytes"
                             % (self.max_tokens, self.token_bytes))
        self._lib = _calls()
        cfg = _Config(ctypes.sizeof(_Config), self.token_bytes, self.max_tokens, _count(max_requests, "max_requests"),
                      _count(reserve_bytes, "reserve_bytes"), bool(refill_thread), _ZERO_TAIL if zero_tail else 0)
        kv = _P()
        with torch.cuda.device(self.device):
            _lib.check(self._lib.dmm_torch_kv_create(self.device.index, ctypes.byref(cfg), ctypes.byref(kv)),
                       "dmm.kv.Arena")
        self._kv = kv

    def _call(self, name, what, *args):
        """libdmm_torch's `name` on this arena, under the arena's device (the driver makes its context
        current; torch's current device is put back after), raising dmm's sentence as a DmmError."""
        torch = _lib.import_torch(what)
        with torch.cuda.device(self.device):
            _lib.check(getattr(self._lib, name)(self._handle(), *args), what)

    def _handle(self):
        if self._kv is None:
            raise _lib.DmmError("dmm.kv: the arena is closed")
        return self._kv

    def _stream(self, stream):
        torch = _lib.import_torch("dmm.kv")
        s = torch.cuda.current_stream(self.device) if stream is None else stream
        if not isinstance(s, torch.cuda.Stream):
            raise TypeError("stream must be a torch.cuda.Stream, not %r" % (s,))
        if s.device != self.device:
            raise ValueError("stream is on %s, the arena on %s: use a stream of the arena's device" % (s.device, self.device))
        return _P(s.cuda_stream)

    def open(self, tokens=0, prefix=None, stream=None):
        """A new request backed for its first `tokens` (counting the prefix's), starting with `prefix`."""
        if prefix is not None and (not isinstance(prefix, Prefix) or prefix._arena is not self):
            raise TypeError("prefix must be a Prefix of this arena (Arena.share), not %r" % (prefix,))
        out = _P()
        p = prefix._handle() if prefix is not None else None
        self._call("dmm_torch_kv_open", "dmm.kv.Arena.open", p, _count(tokens, "tokens"), self._stream(stream),
                   ctypes.byref(out))
        return Request(self, out)

    def share(self, request, tokens, stream=None):
        """Makes the first `tokens` of `request` (written by work on `stream`) a prefix."""
        if not isinstance(request, Request) or request._arena is not self:
            raise TypeError("request must be a Request of this arena, not %r" % (request,))
        out = _P()
        self._call("dmm_torch_kv_share", "dmm.kv.Arena.share", request._handle(), _positive_int(tokens, "tokens"),
                   self._stream(stream), ctypes.byref(out))
        return Prefix(self, out, tokens)

    def refill(self):
        """Tops the reserve of physical handles up (off the decode thread); returns the bytes created."""
        created = ctypes.c_uint64(0)
        self._call("dmm_torch_kv_refill", "dmm.kv.Arena.refill", ctypes.byref(created))
        return created.value

    def stats(self):
        """dmm_kv_stats as a dict (bytes and counts)."""
        st = _Stats(ctypes.sizeof(_Stats))
        self._call("dmm_torch_kv_stats", "dmm.kv.Arena.stats", ctypes.byref(st))
        return {n: getattr(st, n) for n in _STATS}

    def close(self):
        """Destroys the arena; every request and prefix must be closed first."""
        if self._kv is not None:
            self._call("dmm_torch_kv_destroy", "dmm.kv.Arena.close")
            self._kv = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
            return
        try:  # an exception is on its way: a refused close (requests still open) must not hide it
            self.close()
        except _lib.DmmError:
            pass


def _release(arena, name, handle, what):
    out = _Outcome()
    arena._call(name, what, handle, ctypes.byref(out))
    return _STATES.get(out.state, "QUARANTINED")


class Prefix:
    """The first `tokens` of a request, held once and mapped into each request opened with it."""

    def __init__(self, arena, handle, tokens):
        self._arena, self._p, self.tokens = arena, handle, tokens

    def _handle(self):
        if self._p is None:
            raise _lib.DmmError("dmm.kv: the prefix is released")
        return self._p

    def release(self):
        """Drops the prefix (its memory goes with the last request mapping it); returns the release state."""
        state = _release(self._arena, "dmm_torch_kv_prefix_release", self._handle(), "dmm.kv.Prefix.release")
        self._p = None
        return state


class Request:
    """One request's KV cache: a contiguous range at a fixed address, backed as it grows."""

    def __init__(self, arena, handle):
        self._arena, self._r, self._views = arena, handle, None
        self._claim = None  # the range's claim (dmm._dlpack): it counts the DLPack views torch still holds

    def _handle(self):
        if self._r is None:
            raise _lib.DmmError("dmm.kv: the request is closed")
        return self._r

    def info(self):
        """base (int address), backed_tokens, prefix_tokens, private_bytes, shared_bytes, offloaded_bytes,
        unreadable_bytes (of its range, what a read faults on)."""
        inf = _RequestInfo(ctypes.sizeof(_RequestInfo))
        self._arena._call("dmm_torch_kv_request_get", "dmm.kv.Request.info", self._handle(), ctypes.byref(inf))
        return {n: (getattr(inf, n) or 0) for n, _ in _RequestInfo._fields_ if n != "size"}

    @property
    def base(self):
        return self.info()["base"]

    def grow(self, tokens):
        """Backs the first `tokens` (a no-op when they are; never shrinks)."""
        self._arena._call("dmm_torch_kv_grow", "dmm.kv.Request.grow", self._handle(), _count(tokens, "tokens"))

    def cache(self):
        """The whole reserved range as [max_tokens, layers, 2, kv_heads, head_dim] of the arena's dtype (no copy;
        only the backed tokens may be touched)."""
        if self._views is None:
            torch = _lib.import_torch("dmm.kv")
            a, base = self._arena, self.base
            if self._claim is None:
                self._claim = _dlpack.Claim(base, a.max_tokens * a.token_bytes, a.device.index)
            from torch.utils import dlpack
            raw = dlpack.from_dlpack(self._claim.capsule(_dlpack.DEVICE_CUDA))
            if raw.data_ptr() != base or raw.device != a.device:
                raise _lib.DmmError("dmm.kv: torch placed the view at %#x on %s, not at the request's %#x on %s"
                                    % (raw.data_ptr(), raw.device, base, a.device))
            self._views = raw.view(a.dtype).view(a.max_tokens, a.layers, 2, a.kv_heads, a.head_dim)
        return self._views

    def keys(self, layer, tokens):
        """Layer `layer`'s K of the first `tokens` as [kv_heads, tokens, head_dim] (strided, no copy)."""
        return self.cache()[:tokens, layer, 0].transpose(0, 1)

    def values(self, layer, tokens):
        """Layer `layer`'s V of the first `tokens` as [kv_heads, tokens, head_dim] (strided, no copy)."""
        return self.cache()[:tokens, layer, 1].transpose(0, 1)

    def offload(self, stream=None):
        """Copies the request's own memory to budgeted host memory and gives the device memory back."""
        self._arena._call("dmm_torch_kv_offload", "dmm.kv.Request.offload", self._handle(), self._arena._stream(stream))

    def restore(self, stream=None):
        """Backs the same addresses again and copies the contents back."""
        self._arena._call("dmm_torch_kv_restore", "dmm.kv.Request.restore", self._handle(), self._arena._stream(stream))

    def close(self):
        """Gives the request's memory back; returns the release state (COMPLETE, QUARANTINED). Refused while a
        view of the request is still referenced (after close its range may be another request's)."""
        handle = self._handle()
        views, self._views = self._views, None  # our own view: not the caller's to delete
        del views
        held = self._claim.holders() - 1 if self._claim is not None else 0
        if held > 0:
            raise _lib.DmmError("dmm.kv.Request.close: %d view(s) of this request's cache (from cache(), keys() or "
                                "values(), or sliced from them) are still referenced; delete them first: after "
                                "close the range may be another request's memory" % held)
        state = _release(self._arena, "dmm_torch_kv_close", handle, "dmm.kv.Request.close")
        if self._claim is not None:
            self._claim.drop()
            self._claim = None
        self._r = None
        return state
