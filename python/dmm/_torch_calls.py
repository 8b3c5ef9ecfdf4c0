# SPDX-License-Identifier: Apache-2.0
"""torch.cuda's own memory calls, answered by dmm while it is the process's CUDA allocator.

Under torch.cuda.memory.CUDAPluggableAllocator, torch's memory functions reach the allocator through
a handful of torch._C entries that raise "CUDAPluggableAllocator does not yet support ..." or do
nothing. dmm.torch.enable() calls install(), which replaces exactly those entries with dmm's answers,
in torch's own layout, so that every caller (training scripts, Lightning, Accelerate, serving
engines, torch.cuda.memory_summary) keeps working unchanged:

    torch._C entry                       what calls it                         dmm's answer
    _cuda_memoryStats(device)            memory_stats, memory_allocated,       nested()
                                         memory_reserved, max_*, memory_summary
    _cuda_resetPeakMemoryStats(device)   reset_peak_memory_stats               dmm_torch_reset_peaks
    _cuda_resetAccumulatedMemoryStats    reset_accumulated_memory_stats        dmm_torch_reset_accumulated
    _cuda_emptyCache()                   empty_cache                           dmm.torch.empty_cache, every device
    _cuda_setMemoryFraction(f, device)   set_per_process_memory_fraction       the governor's limit = f x total
    _cuda_getMemoryFraction(device)      get_per_process_memory_fraction       the last fraction set (1.0)
    _cuda_record_memory_history(...)     memory._record_memory_history         dmm.torch.history(max_entries,
                                                                               context, stacks, skip_actions)
    _cuda_record_memory_history_legacy   the same, with enabled=True/False
    _cuda_memorySnapshot(...)            memory._snapshot, _dump_snapshot,     dmm.torch.torch_snapshot(),
                                         memory_snapshot                       blocks from before tracking as free
    _accelerator_getDeviceStats(device)  torch.accelerator.memory_stats and the   nested()
                                         rest of torch >= 2.9's accelerator calls
    _accelerator_resetPeakStats(device)  torch.accelerator.reset_peak_memory_stats dmm_torch_reset_peaks
    _accelerator_resetAccumulatedStats   torch.accelerator.reset_accumulated_...   dmm_torch_reset_accumulated
    _accelerator_emptyCache()            torch.accelerator.empty_cache             as _cuda_emptyCache
    _accelerator_isAllocatorInitialized  (and the older _accelerator_allocatorInitialized): True, so that
                                         the accelerator calls ask the entries above instead of answering {}
    _accelerator_getMemoryInfo(device)   torch.accelerator.get_memory_info (torch >= 2.10): mem_get_info below
    _cuda_attach_out_of_memory_observer  (called as it is, torch._C.…: no wrapper)  observers dmm calls (from C,
                                         (observer(device, alloc, maximum, free))  on the allocating thread,
                                         once: not again for a refusal inside an observer) before a budget
                                         or memory refusal (also dmm.buffer's, CuPy's) is raised; maximum
                                         is dmm's limit when set, else the device's total (torch passes the
                                         allowed maximum or the total), free what mem_get_info says
and torch.cuda.mem_get_info, which asks the driver: under a dmm limit, `free` is at most what the
limit leaves (limit - dmm's physical bytes).

What the numbers mean (nested()): allocated_bytes / requested_bytes / allocation count the tensors
exactly as torch's caching allocator does (sizes rounded to 512 bytes; large_pool = blocks above
1 MiB, small_pool = the others); active_* = allocated_* (dmm holds a block freed on another stream
in its own pending list, not as an active block); reserved_bytes = device memory dmm has mapped
(pool chunks, tag and graph segments: what the snapshot's segments tile), all in large_pool (dmm
has one pool for every size); segment = dmm's mapped chunks and segments (current only: the peak
is the current count); inactive_split_bytes = the free bytes inside mapped memory; oversize_* = 0
and max_split_size = -1 (dmm splits every block). dmm's own numeric counters follow under "dmm".
"""

import sys

from . import _lib

_HISTORY_DEFAULT_MAX = 1 << 20  # torch's default max_entries is sys.maxsize: dmm keeps 2^20 (40 MiB)
_fractions = {}  # device -> the fraction last set through set_per_process_memory_fraction
_installed = []  # the torch._C names replaced, in order
_oom_observers = []  # torch's out-of-memory observers, in the order attached
_oom_hook = None     # the C callback that calls them (kept alive: the library holds its address)


def _stat(d):
    return {"current": int(d["current"]), "peak": int(d["peak"]), "allocated": int(d.get("allocated", 0)),
            "freed": int(d.get("freed", 0))}


def _zero():
    return {"current": 0, "peak": 0, "allocated": 0, "freed": 0}


def _numeric(prefix_obj):
    """dmm's own counters, the numeric ones only (torch documents every stat as an integer)."""
    out = {}
    for k, v in prefix_obj.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, int):
            out[k] = v
        elif isinstance(v, dict):
            sub = _numeric(v)
            if sub:
                out[k] = sub
    return out


def nested(raw):
    """torch._C._cuda_memoryStats's nested dict from dmm's stats (dmm.torch.memory_stats_raw)."""
    cls = raw["by_class"]
    out = {}
    for key, src in (("allocated_bytes", "allocated_bytes"), ("active_bytes", "allocated_bytes"),
                     ("requested_bytes", "requested_bytes"), ("allocation", "allocation"),
                     ("active", "allocation")):
        out[key] = {"all": _stat(raw[src]), "large_pool": _stat(cls["large_pool"][src]),
                    "small_pool": _stat(cls["small_pool"][src])}
    reserved = _stat(raw["reserved_bytes"])
    out["reserved_bytes"] = {"all": reserved, "large_pool": dict(reserved), "small_pool": _zero()}
    pool = raw.get("pool") or {}
    chunks = max(0, int(pool.get("chunks_committed", 0)) - int(pool.get("chunks_decommitted", 0)))
    tag_segs = sum(int(t.get("segments", 0)) for t in raw.get("tags", {}).values())
    graph_segs = int((raw.get("graphs") or {}).get("segments", 0))
    n = chunks + tag_segs + graph_segs
    seg = {"current": n, "peak": n, "allocated": int(pool.get("chunks_committed", 0)) + tag_segs + graph_segs,
           "freed": int(pool.get("chunks_decommitted", 0))}
    out["segment"] = {"all": seg, "large_pool": dict(seg), "small_pool": _zero()}
    free_inside = max(0, (raw["pool_committed_bytes"] - raw["pool_live_bytes"]) +
                      (raw["tag_committed_bytes"] - raw["tag_live_bytes"]) +
                      (raw["graph_committed_bytes"] - raw["graph_live_bytes"]))
    inactive = {"current": free_inside, "peak": free_inside, "allocated": 0, "freed": 0}
    out["inactive_split_bytes"] = {"all": inactive, "large_pool": dict(inactive), "small_pool": _zero()}
    out["inactive_split"] = {"all": _zero(), "large_pool": _zero(), "small_pool": _zero()}
    out["oversize_allocations"] = _zero()
    out["oversize_segments"] = _zero()
    out["max_split_size"] = -1
    for k in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free"):
        out[k] = int(raw[k])
    out["num_sync_all_streams"] = 0
    out["num_oom_rejections"] = 0
    out["dmm"] = _numeric({k: v for k, v in raw.items() if k not in ("allocated_bytes", "requested_bytes",
                                                                     "allocation", "reserved_bytes", "by_class")})
    return out


def flatten(obj, prefix="", out=None):
    """torch.cuda.memory_stats's flat keys ("allocated_bytes.all.current", ...) of a nested dict."""
    out = {} if out is None else out
    for k, v in obj.items():
        key = prefix + "." + k if prefix else k
        if isinstance(v, dict):
            flatten(v, key, out)
        else:
            out[key] = v
    return out


def _zero_raw():
    """dmm's stats of a device it does not serve: every count zero (what nested() reads)."""
    c = {"current": 0, "peak": 0, "allocated": 0, "freed": 0}
    cls = {k: dict(c) for k in ("allocated_bytes", "requested_bytes", "allocation")}
    raw = {k: dict(c) for k in ("allocated_bytes", "requested_bytes", "allocation", "reserved_bytes", "physical_bytes")}
    raw.update(by_class={"large_pool": dict(cls), "small_pool": dict(cls)}, pool={}, tags={}, graphs={}, limit=None)
    for k in ("pool_committed_bytes", "pool_live_bytes", "tag_committed_bytes", "tag_live_bytes", "graph_committed_bytes",
              "graph_live_bytes", "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free"):
        raw[k] = 0
    return raw


def _devices():
    return _lib.served_devices("torch.cuda's memory calls")


def install(dt):
    """Replaces torch's allocator entries listed above (those this torch has) with answers from `dt`,
    the dmm.torch module (enable() passes itself: this module stays below it). Returns their names."""
    torch = _lib.import_torch("dmm.torch")

    def dev(device):
        return torch.cuda.current_device() if device is None else dt._device(device)

    # a device dmm does not serve yet (no allocation there) answers zeros: asking dmm would create its
    # context there, and with it a CUDA context on a GPU this process may never use (another rank's)
    def memory_stats(device=None, *_):
        d = dev(device)
        return nested(dt.memory_stats_raw(d) if d in _devices() else _zero_raw())

    def reset_peak(device=None, *_):
        d = dev(device)
        if d in _devices():
            dt.reset_peak_memory_stats(d)

    def reset_accumulated(device=None, *_):
        d = dev(device)
        if d in _devices():
            _lib.check(_lib.load().dmm_torch_reset_accumulated(d), "torch.cuda.reset_accumulated_memory_stats")

    def empty_cache(*_):
        for d in _devices():
            dt.empty_cache(d)

    def set_fraction(fraction, device=None, *_):
        d = dev(device)
        total = torch.cuda.get_device_properties(d).total_memory
        dt.set_limit(max(1, int(float(fraction) * total)), d)
        _fractions[d] = float(fraction)

    def get_fraction(device=None, *_):
        return _fractions.get(dev(device), 1.0)

    def history_entries(enabled, max_entries):
        if not enabled:
            return 0
        n = int(max_entries) if max_entries is not None else sys.maxsize
        return _HISTORY_DEFAULT_MAX if n >= sys.maxsize else max(1, n)

    def record_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, *rest, **kw):
        # after max_entries torch passes clear_history, compile_context, global_record_annotations (flags dmm
        # has no use for) and skip_actions, the one list among them, in an order that moved between releases
        skip = kw.get("skip_actions") or next((a for a in rest if isinstance(a, (list, tuple))), None) or ()
        trace = enabled == "all"  # "state": the blocks' frames alone, no trace; None: off
        dt.history(history_entries(trace, max_entries), torch.cuda.current_device(),
                   context=context if enabled is not None else None, stacks=stacks or "python", skip_actions=skip)

    def record_history_legacy(enabled, record_context=True, trace_alloc_max_entries=1,
                              trace_alloc_record_context=False, record_cpp_context=False, *_, **__):
        context = ("alloc" if trace_alloc_record_context else "state") if enabled and record_context else None
        dt.history(history_entries(bool(enabled), trace_alloc_max_entries), torch.cuda.current_device(),
                   context=context, stacks="all" if record_cpp_context else "python")

    def memory_snapshot(*_, **__):
        # torch's allocator knows every block; dmm knows those allocated since tracking began (history(),
        # or enable(track_blocks=True)): the others show as free space in their segments
        from . import snapshot as layout

        from . import _stacks

        d = torch.cuda.current_device()
        return layout.to_torch(dt.snapshot(d), strict=False, frames=_stacks.frames,
                               skip_actions=dt._skip_actions.get(d, ()))

    real_mem_get_info = torch.cuda.memory.mem_get_info

    def mem_get_info(device=None):
        free, total = real_mem_get_info(device)
        d = dev(device)
        if d not in _devices():
            return free, total
        raw = dt.memory_stats_raw(d)
        limit = raw.get("limit")
        if limit is not None:
            free = min(free, max(0, int(limit) - int(raw["physical_bytes"]["current"])))
        return free, total

    def fire_oom(device, nbytes):
        """The library's out-of-memory callback: each observer, with torch's arguments (device, the bytes
        asked, the most the device may hold: dmm's limit when set, else the device's total, and the free
        bytes mem_get_info reports). Never raises into C."""
        try:
            free, total = mem_get_info(device)
            limit = dt.memory_stats_raw(device).get("limit")
            maximum = int(limit) if limit is not None else int(total)
        except Exception:  # noqa: BLE001 - the refusal is raised next whatever happens here
            maximum, free = 0, 0
        for observer in list(_oom_observers):
            try:
                observer(device, int(nbytes), maximum, free)
            except Exception:  # noqa: BLE001 - torch's own allocator also keeps going past a failing observer
                import traceback

                traceback.print_exc()

    def attach_oom_observer(observer, *_):
        global _oom_hook
        if not callable(observer):
            raise TypeError("_attach_out_of_memory_observer: the observer must be callable, not %r" % (observer,))
        if _oom_hook is None:
            import ctypes

            import atexit

            setter = _lib.load().dmm_torch_set_oom_observer
            _oom_hook = setter.argtypes[0](fire_oom)
            setter(_oom_hook)
            atexit.register(setter, None)  # no refusal after exit calls a callback Python has freed
        _oom_observers.append(observer)

    names = {
        "_cuda_memoryStats": memory_stats, "_cuda_resetPeakMemoryStats": reset_peak,
        "_cuda_resetAccumulatedMemoryStats": reset_accumulated, "_cuda_emptyCache": empty_cache,
        "_cuda_setMemoryFraction": set_fraction, "_cuda_getMemoryFraction": get_fraction,
        "_cuda_record_memory_history": record_history, "_cuda_record_memory_history_legacy": record_history_legacy,
        "_cuda_memorySnapshot": memory_snapshot,
        "_accelerator_getDeviceStats": memory_stats, "_accelerator_resetPeakStats": reset_peak,
        "_accelerator_resetAccumulatedStats": reset_accumulated, "_accelerator_emptyCache": empty_cache,
        "_accelerator_isAllocatorInitialized": lambda: True, "_accelerator_allocatorInitialized": lambda: True,
        "_cuda_attach_out_of_memory_observer": attach_oom_observer,
        "_accelerator_getMemoryInfo": lambda device=None, *_: mem_get_info(device),
    }
    for name, fn in names.items():
        if hasattr(torch._C, name) and name not in _installed:
            setattr(torch._C, name, fn)
            _installed.append(name)
    for module in (torch.cuda.memory, torch.cuda):
        if getattr(module, "mem_get_info", None) is real_mem_get_info:
            module.mem_get_info = mem_get_info
    if "mem_get_info" not in _installed:
        _installed.append("mem_get_info")
    return list(_installed)
