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
memory (a CUDA fault). Close a request only after the work that uses its views (on its streams) is done
or ordered before the next use of the memory, as with any allocator's free.
Thread contract: one request is driven (grow, share, offload, restore, close) by one thread at a time.
"""

import ctypes

from . import _lib


class _Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("token_bytes", ctypes.c_uint64), ("max_tokens", ctypes.c_uint64),
                ("max_requests", ctypes.c_uint32), ("reserve_bytes", ctypes.c_uint64),
                ("refill_thread", ctypes.c_bool)]


class _RequestInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("base", ctypes.c_void_p), ("backed_tokens", ctypes.c_uint64),
                ("prefix_tokens", ctypes.c_uint64), ("private_bytes", ctypes.c_uint64),
                ("shared_bytes", ctypes.c_uint64), ("offloaded_bytes", ctypes.c_uint64)]


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
    lib = _lib.load()
    for name, args in _SIGNATURES.items():
        f = getattr(lib, name, None)
        if f is None:
            raise _lib.DmmError("libdmm_torch.so at %s has no %s: it is older than this package; rebuild it"
                                % (_lib.library_path(), name))
        f.restype = ctypes.c_int
        f.argtypes = args
    return lib


def _positive_int(value, what):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be an int, not %s" % (what, type(value).__name__))
    if value <= 0:
        raise ValueError("%s must be positive, not %d" % (what, value))
    return value


def _count(value, what):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be an int, not %s" % (what, type(value).__name__))
    if value < 0:
        raise ValueError("%s must be 0 or more, not %d" % (what, value))
    return value


class _Range:
    """A raw device range as a CUDA array (uint8), for torch.as_tensor; keeps its request alive."""

    def __init__(self, ptr, nbytes, owner):
        self._owner = owner
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


class Arena:
    """A KV arena on one CUDA device (default: the current one). Its memory is budgeted with torch's."""

    def __init__(self, *, layers, kv_heads, head_dim, dtype, max_tokens, max_requests=0, reserve_bytes=0,
                 refill_thread=True, device=None):
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
        self._lib = _calls()
        cfg = _Config(ctypes.sizeof(_Config), self.token_bytes, self.max_tokens, _count(max_requests, "max_requests"),
                      _count(reserve_bytes, "reserve_bytes"), bool(refill_thread))
        kv = _P()
        _lib.check(self._lib.dmm_torch_kv_create(self.device.index, ctypes.byref(cfg), ctypes.byref(kv)),
                   "dmm.kv.Arena")
        self._kv = kv

    def _handle(self):
        if self._kv is None:
            raise _lib.DmmError("dmm.kv: the arena is closed")
        return self._kv

    def _stream(self, stream):
        torch = _lib.import_torch("dmm.kv")
        s = torch.cuda.current_stream(self.device) if stream is None else stream
        return _P(s.cuda_stream)

    def open(self, tokens=0, prefix=None, stream=None):
        """A new request backed for its first `tokens` (counting the prefix's), starting with `prefix`."""
        if prefix is not None and (not isinstance(prefix, Prefix) or prefix._arena is not self):
            raise TypeError("prefix must be a Prefix of this arena (Arena.share), not %r" % (prefix,))
        out = _P()
        p = prefix._handle() if prefix is not None else None
        _lib.check(self._lib.dmm_torch_kv_open(self._handle(), p, _count(tokens, "tokens"), self._stream(stream),
                                               ctypes.byref(out)), "dmm.kv.Arena.open")
        return Request(self, out)

    def share(self, request, tokens, stream=None):
        """Makes the first `tokens` of `request` (written by work on `stream`) a prefix."""
        if not isinstance(request, Request) or request._arena is not self:
            raise TypeError("request must be a Request of this arena, not %r" % (request,))
        out = _P()
        _lib.check(self._lib.dmm_torch_kv_share(self._handle(), request._handle(), _positive_int(tokens, "tokens"),
                                                self._stream(stream), ctypes.byref(out)), "dmm.kv.Arena.share")
        return Prefix(self, out, tokens)

    def refill(self):
        """Tops the reserve of physical handles up (off the decode thread); returns the bytes created."""
        created = ctypes.c_uint64(0)
        _lib.check(self._lib.dmm_torch_kv_refill(self._handle(), ctypes.byref(created)), "dmm.kv.Arena.refill")
        return created.value

    def stats(self):
        """dmm_kv_stats as a dict (bytes and counts)."""
        st = _Stats(ctypes.sizeof(_Stats))
        _lib.check(self._lib.dmm_torch_kv_stats(self._handle(), ctypes.byref(st)), "dmm.kv.Arena.stats")
        return {n: getattr(st, n) for n in _STATS}

    def close(self):
        """Destroys the arena; every request and prefix must be closed first."""
        if self._kv is not None:
            _lib.check(self._lib.dmm_torch_kv_destroy(self._kv), "dmm.kv.Arena.close")
            self._kv = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _release(fn, arena, handle, what):
    out = _Outcome()
    _lib.check(fn(arena._handle(), handle, ctypes.byref(out)), what)
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
        state = _release(self._arena._lib.dmm_torch_kv_prefix_release, self._arena, self._handle(),
                         "dmm.kv.Prefix.release")
        self._p = None
        return state


class Request:
    """One request's KV cache: a contiguous range at a fixed address, backed as it grows."""

    def __init__(self, arena, handle):
        self._arena, self._r, self._views = arena, handle, None

    def _handle(self):
        if self._r is None:
            raise _lib.DmmError("dmm.kv: the request is closed")
        return self._r

    def info(self):
        """base (int address), backed_tokens, prefix_tokens, private_bytes, shared_bytes, offloaded_bytes."""
        inf = _RequestInfo(ctypes.sizeof(_RequestInfo))
        _lib.check(self._arena._lib.dmm_torch_kv_request_get(self._arena._handle(), self._handle(), ctypes.byref(inf)),
                   "dmm.kv.Request.info")
        return {n: (getattr(inf, n) or 0) for n, _ in _RequestInfo._fields_ if n != "size"}

    @property
    def base(self):
        return self.info()["base"]

    def grow(self, tokens):
        """Backs the first `tokens` (a no-op when they are; never shrinks)."""
        _lib.check(self._arena._lib.dmm_torch_kv_grow(self._arena._handle(), self._handle(), _count(tokens, "tokens")),
                   "dmm.kv.Request.grow")

    def cache(self):
        """The whole reserved range as [max_tokens, layers, 2, kv_heads, head_dim] of the arena's dtype (no copy;
        only the backed tokens may be touched)."""
        if self._views is None:
            torch = _lib.import_torch("dmm.kv")
            a = self._arena
            raw = torch.as_tensor(_Range(self.base, a.max_tokens * a.token_bytes, self), device=a.device)
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
        _lib.check(self._arena._lib.dmm_torch_kv_offload(self._arena._handle(), self._handle(),
                                                         self._arena._stream(stream)), "dmm.kv.Request.offload")

    def restore(self, stream=None):
        """Backs the same addresses again and copies the contents back."""
        _lib.check(self._arena._lib.dmm_torch_kv_restore(self._arena._handle(), self._handle(),
                                                         self._arena._stream(stream)), "dmm.kv.Request.restore")

    def close(self):
        """Gives the request's memory back; returns the release state (COMPLETE, QUARANTINED)."""
        state = _release(self._arena._lib.dmm_torch_kv_close, self._arena, self._handle(), "dmm.kv.Request.close")
        self._r, self._views = None, None
        return state
