# SPDX-License-Identifier: Apache-2.0
"""dmm as PyTorch's CUDA allocator: stats, a budget, empty_cache that trims, and sleep/wake in place.

    import dmm.torch
    dmm.torch.enable()                       # first thing: before any CUDA tensor exists
    with dmm.torch.tag("weights"):
        model = Model().cuda()
    dmm.torch.offload("weights")             # to pinned host memory; returns at once
    dmm.torch.restore("weights")             # back at the same addresses

What each call promises is in docs/torch.md. In short: allocations go to a dmm pool per device
(CUDA driver -> arena -> pool); allocations made inside `tag(name)` go to segments of that tag, so
`offload(name)` can copy them out and unmap them as whole ranges -- behind an event recorded after
the work already queued on the stream, never a device synchronize -- and `restore(name)` maps and
copies them back at the same virtual addresses, so tensors and CUDA graphs that point at them stay
valid. While a stream captures a CUDA graph, dmm serves it only from memory mapped before the
capture (`reserve_graph_memory`, or `graph(...)` which reserves for you) and never maps, unmaps or
queries an event: a capture that needs more fails with a sentence that says so.

After enable(), torch's own memory functions (torch.cuda.memory_stats, empty_cache, _snapshot, ...)
answer from dmm (_torch_calls.py) and record_stream is honoured. Without enable() -- CUDA already
initialized -- region(name) puts only the allocations inside it on dmm, through a torch.cuda.MemPool.
hold_create / attach / drop give tensors over regions a holder process (`dmm hold`) keeps.
"""

import atexit
import contextlib
import ctypes
import json
import logging
import os
import sys
import threading
import weakref

from . import _files, _lib, profile
from ._lib import DmmError

__all__ = [
    "DmmError", "enable", "is_enabled", "library_path", "memory_stats", "memory_stats_raw",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "reset_peak_memory_stats", "empty_cache", "warm", "warm_start", "layout", "warm_layout", "save_profile", "snapshot", "set_limit",
    "last_error", "tag", "untagged", "default_tag", "offload", "offload_wait", "restore", "release_host", "poll", "tag_info",
    "reserve_graph_memory", "graph", "capture_id", "release_graph", "graphs_sleep", "graphs_wake", "now_ns", "record", "start_recording",
    "stop_recording", "torch_snapshot",
    "dump_snapshot", "history", "track_blocks", "mem_pool", "region", "hold_create", "attach", "drop",
]

_enabled = False
_allocator = None
_switched_off_said = False


_MODES = {"host": 0, "discard": 1}


def library_path():
    """Where libdmm_torch.so was loaded from."""
    return _lib.library_path()


def last_error():
    """The sentence of dmm's last failure in this process ("" if none)."""
    return _lib.last_error()


def now_ns():
    """CLOCK_MONOTONIC in ns: the clock of the *_ns fields of tag_info()."""
    return int(_lib.load().dmm_torch_now_ns())


def is_enabled():
    return _enabled


def enable(limit=None, capture_check=True, track_blocks=False):
    """Makes dmm the CUDA allocator of this process. Must run before CUDA is initialized (before the
    first CUDA tensor, stream or device query); afterwards torch cannot swap its allocator, and this
    raises DmmError saying so (use mem_pool() then). torch's own memory calls (torch.cuda.memory_stats,
    memory_summary, empty_cache, set_per_process_memory_fraction, _record_memory_history, _snapshot,
    ...) answer from dmm from now on, and a budget refusal raises torch.cuda.OutOfMemoryError. `limit` (bytes) caps the device memory dmm may hold, on every device.
    track_blocks=True: keep every pool block for torch_snapshot() from the start (see track_blocks).
    With DMM_DISABLE=1 in the environment it does nothing but say so once (logger "dmm"): dmm is
    switched off without a change of code."""
    global _enabled, _allocator, _switched_off_said
    if _lib.switched_off():  # torch keeps its own allocator; said once, on the "dmm" logger
        if not _switched_off_said:
            _switched_off_said = True
            logging.getLogger("dmm").warning("dmm.torch.enable(): DMM_DISABLE=%s switches dmm off: torch keeps its "
                                             "own allocator (unset DMM_DISABLE to use dmm)",
                                             os.environ.get("DMM_DISABLE"))
        return
    lib = _lib.load()
    if _enabled:
        if limit is not None:
            set_limit(limit)
        return
    torch = _lib.import_torch("dmm.torch")

    if torch.cuda.is_initialized():
        raise DmmError("dmm.torch.enable() must run before CUDA is initialized in this process: torch's "
                       "caching allocator is already in use and cannot be replaced; call it first, right "
                       "after `import torch`")
    alloc = torch.cuda.memory.CUDAPluggableAllocator(library_path(), "dmm_torch_malloc", "dmm_torch_free")
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError as e:
        raise DmmError("dmm.torch.enable() could not replace torch's CUDA allocator (%s); call it before the "
                       "first CUDA allocation of the process" % e) from e
    _allocator = alloc
    hooks = alloc.allocator()
    if hasattr(hooks, "set_record_stream_fn"):  # Tensor.record_stream: hold the block back for that stream
        hooks.set_record_stream_fn(ctypes.cast(lib.dmm_torch_record_stream, ctypes.c_void_p).value)
    from . import _torch_calls

    _torch_calls.install(sys.modules[__name__])  # torch.cuda.memory_stats, empty_cache, ... answer from dmm
    from . import _share

    _share.install()  # CUDA tensors through torch.multiprocessing: dmm's export instead of CUDA IPC
    from . import _compile

    _compile.install()  # torch.compile's CUDA graph modes: the same kernels without graphs, said once
    lib.dmm_torch_set_capture_check(1 if capture_check else 0)
    if track_blocks:
        _track(-1)
    _enabled = True
    if limit is not None:
        set_limit(limit)


def _device(device):
    if device is None:
        torch = _lib.import_torch("dmm.torch")

        return torch.cuda.current_device()
    if hasattr(device, "index"):
        return device.index if device.index is not None else 0
    return int(device)


def _stream(stream):
    torch = _lib.import_torch("dmm.torch")

    if stream is None:
        stream = torch.cuda.current_stream()
    h = getattr(stream, "cuda_stream", stream)
    return ctypes.c_void_p(int(h) if h else 0)


def memory_stats_raw(device=None):
    """dmm's own stats of one device as a dict (allocations, committed, physical, pool, arena, tags,
    graphs); memory_stats() renames what torch also has."""
    lib = _lib.load()
    return json.loads(_lib.json_call(lib.dmm_torch_stats_json, _device(device)))


def _flatten(prefix, obj, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(prefix + "." + k if prefix else k, v, out)
    else:
        out[prefix] = obj


def memory_stats(device=None):
    """torch.cuda.memory_stats()'s flat dict, from dmm: the same keys with the same meaning where dmm
    has it (allocated_bytes.all.current, reserved_bytes.all.peak, allocation.large_pool.current,
    num_ooms, ...; docs/torch.md says what each means under dmm), then dmm's own counters under
    "dmm." keys. After enable(), torch.cuda.memory_stats() returns the same numbers."""
    from . import _torch_calls

    r = memory_stats_raw(device)
    out = _torch_calls.flatten({k: v for k, v in _torch_calls.nested(r).items() if k != "dmm"})
    extra = {}
    _flatten("dmm", {k: v for k, v in r.items() if k not in ("allocated_bytes", "requested_bytes",
                                                            "allocation", "reserved_bytes", "by_class")}, extra)
    out.update(extra)
    return out


def memory_allocated(device=None):
    return memory_stats_raw(device)["allocated_bytes"]["current"]


def max_memory_allocated(device=None):
    return memory_stats_raw(device)["allocated_bytes"]["peak"]


def memory_reserved(device=None):
    return memory_stats_raw(device)["reserved_bytes"]["current"]


def max_memory_reserved(device=None):
    return memory_stats_raw(device)["reserved_bytes"]["peak"]


def reset_peak_memory_stats(device=None):
    _lib.check(_lib.load().dmm_torch_reset_peaks(_device(device)), "dmm.torch.reset_peak_memory_stats")


def empty_cache(device=None):
    """Gives back every cached chunk of the pool, every empty tag segment and every idle graph
    segment (behind events: never under running work), after letting go of the tensors sent to other
    processes that their receivers have unmapped. Returns the bytes given back or queued to be."""
    from . import _share

    _share.sweep()
    released = ctypes.c_uint64(0)
    _lib.check(_lib.load().dmm_torch_empty_cache(_device(device), ctypes.byref(released)), "dmm.torch.empty_cache")
    return int(released.value)


def warm(nbytes, device=None, stream=None):
    """A warm start: the pool commits memory until it holds `nbytes` (e.g. the last run's
    memory_stats_raw()["physical_bytes"]["peak"]), at once and in handles of up to 1 GiB, so that the
    first step is served from mapped memory instead of growing in thousands of small handles. Call it
    after the model is loaded, before the first step; empty_cache() gives the memory back. Returns the
    bytes committed now (0 when the pool already holds that much)."""
    committed = ctypes.c_uint64(0)
    _lib.check(_lib.load().dmm_torch_warm(_device(device), int(nbytes), _stream(stream), ctypes.byref(committed)),
               "dmm.torch.warm")
    return int(committed.value)


def layout(device=None):
    """The handles the pool created for its growths, as a list of (offset, bytes, heap) in address order
    (dmm_pool_layout; heap: the stream's place in the order streams first allocated): what
    warm_layout() commits ahead in a later run of the same workload. JSON-able."""
    lib = _lib.load()
    dev = _device(device)
    count = ctypes.c_size_t(0)
    _lib.check(lib.dmm_torch_layout(dev, None, 0, ctypes.byref(count)), "dmm.torch.layout")
    while True:  # the pool may grow between the two calls: ask again with the new count
        cap = count.value + 16
        v = (ctypes.c_uint64 * (3 * cap))()
        rc = lib.dmm_torch_layout(dev, v, cap, ctypes.byref(count))
        if rc == 0:
            return [[int(v[3 * i]), int(v[3 * i + 1]), int(v[3 * i + 2])] for i in range(count.value)]
        if count.value <= cap:
            _lib.check(rc, "dmm.torch.layout")


def warm_layout(spans, device=None, stream=None):
    """A warm start that keeps the last run's layout (dmm_pool_warm_layout): commits each (offset, bytes)
    span of layout() from that run ahead, at its place, where the pool holds nothing yet; the growths of
    the first step take them without a driver call, at the last run's peak. Call it before the first
    step (after the model is loaded, or before). Returns the bytes committed ahead."""
    spans = list(spans)
    v = (ctypes.c_uint64 * (3 * len(spans) if spans else 1))()
    for i, span in enumerate(spans):
        if len(span) != 3 or any(type(x) is not int or x < 0 or x >= 1 << 64 for x in span):
            raise ValueError("dmm.torch.warm_layout: span %d is %r, not (offset, bytes, heap) as layout() gives "
                             "them; nothing was committed" % (i, span))
        v[3 * i], v[3 * i + 1], v[3 * i + 2] = span
    committed = ctypes.c_uint64(0)
    _lib.check(_lib.load().dmm_torch_warm_layout(_device(device), v, len(spans), _stream(stream),
                                                 ctypes.byref(committed)), "dmm.torch.warm_layout")
    return int(committed.value)


def _device_kind(dev):
    torch = _lib.import_torch("dmm.torch")
    props = torch.cuda.get_device_properties(dev)
    return props.name, int(props.total_memory)


def save_profile(path, device=None):
    """Writes the warm-start profile at `path` (dmm/profile.py: the device, this process's physical peak,
    memory_stats_raw()["physical_bytes"]["peak"], and the layout its pool grew through, layout()) whole,
    now. Returns the peak written."""
    dev = _device(device)
    name, total = _device_kind(dev)
    peak = int(memory_stats_raw(dev)["physical_bytes"]["peak"])
    spans = layout(dev)
    try:
        profile.write(path, name, total, peak, spans)
    except OSError as e:
        raise DmmError("dmm.torch.save_profile: writing %s failed (%s); pass a path in a folder you can write"
                       % (path, e.strerror)) from None
    return peak


_profiles = set()  # (path, device): written at exit
_profiles_lock = threading.Lock()


def _save_profiles_at_exit():
    for path, dev in list(_profiles):
        try:
            save_profile(path, dev)
        except Exception:  # noqa: BLE001 - at exit nothing can be reported; the old profile stays whole
            pass


def warm_start(path, device=None, stream=None):
    """A warm start from this workload's last run, in one line: reads the profile at `path` (absent on
    the first run) and commits the last run's memory at once, so the first step is served from mapped
    memory: its layout, each handle ahead at its own place (warm_layout(): the last run's peak, no more),
    or, from a profile without one, its peak in large handles (warm()). At exit the profile is written
    again from this run. Call it after the model is loaded, before the first step. Returns the bytes
    committed now (0 on a first run). A profile written on another kind of device, or not a profile at
    all, raises ValueError naming the file and the field, and nothing is committed. Delete the file when
    the workload changes (a larger batch, another model): its layout and peak are the last run's."""
    dev = _device(device)
    name, total = _device_kind(dev)
    peak = profile.read(path, name, total)
    spans = profile.read_layout(path, name, total) if peak else None
    with _profiles_lock:
        if not _profiles:
            atexit.register(_save_profiles_at_exit)
        _profiles.add((os.fspath(path), dev))
    if spans:
        return warm_layout(spans, dev, stream)
    return warm(peak, dev, stream) if peak else 0


def snapshot(device=None, format="dmm"):
    """format="dmm": a JSON-able dict: the stats, the pool's committed runs (pool_segments) and live
    blocks (pool_blocks: [address, bytes, requested, stream]), per tag its segments and blocks, the
    graph segments and theirs. format="torch": the same in PyTorch's snapshot layout (torch_snapshot)."""
    if format == "torch":
        return torch_snapshot(device)
    if format != "dmm":
        raise ValueError("dmm.torch.snapshot: format must be 'dmm' or 'torch', not %r" % (format,))
    lib = _lib.load()
    return json.loads(_lib.json_call(lib.dmm_torch_snapshot_json, _device(device)))


def _track(dev):
    _lib.check(_lib.load().dmm_torch_track_blocks(dev), "dmm.torch.track_blocks")


def track_blocks(device=None):
    """Block tracking: from now on dmm keeps every pool block's address, sizes and stream, which
    torch_snapshot() lays out (35-75 ns more per allocation and free pair; never turned off again).
    device=None or -1: every device, also those not used yet. Blocks live before it are not known:
    torch_snapshot() then says how many are missing (enable(track_blocks=True) avoids that)."""
    _track(-1 if device is None or device == -1 else _device(device))


_SKIPPABLE = {"alloc": 1 << 0, "free_requested": 0, "free_completed": 0, "segment_map": 1 << 2,
              "segment_unmap": 1 << 3, "segment_alloc": 0, "segment_free": 0, "snapshot": 0, "oom": 0,
              "user_defined": 0}  # PyTorch's trace actions -> the history's event kinds left out (0: none of dmm's)
_skip_actions = {}  # device -> the trace actions torch_snapshot() leaves out


def history(max_entries=100_000, device=None, context=None, stacks="python", skip_actions=()):
    """Keeps the pool's last `max_entries` events from now on (blocks handed out and freed, ranges
    mapped and unmapped), for the device_traces of torch_snapshot() -- what
    torch.cuda.memory._record_memory_history(max_entries=...) is for PyTorch's allocator. 0 or None
    keeps no events; a new call drops the events kept so far. Turns block tracking on (track_blocks)
    for the device.
    context: which pool blocks carry stack frames, as PyTorch's argument: None (none), "state" and
    "alloc" (each block and allocation event: the frames that allocated it; a free event shows its
    allocation's), "all" (a free event its own). With max_entries 0 and a context, the blocks alone
    carry frames (PyTorch's enabled="state").
    stacks: "python" (the Python frames) or "all" (the native frames from torch's allocator call up to
    the interpreter first). Frames cost a Python callback per allocation (and free with "all").
    skip_actions: PyTorch's trace actions not kept ("alloc", "free_requested", "free_completed",
    "segment_map", "segment_unmap"; the others are accepted: dmm records none of them)."""
    from . import _stacks

    n = 0 if max_entries is None else int(max_entries)
    if n < 0:
        raise ValueError("dmm.torch.history: max_entries must be >= 0 (0 or None: off), not %r" % (max_entries,))
    skip_actions = tuple(skip_actions or ())
    unknown = [a for a in skip_actions if a not in _SKIPPABLE]
    if unknown:
        raise ValueError("dmm.torch.history: unknown skip_actions %r; PyTorch's trace actions are %s"
                         % (unknown, ", ".join(sorted(_SKIPPABLE))))
    skip = 0
    for a in skip_actions:
        skip |= _SKIPPABLE[a]
    if "free_requested" in skip_actions and "free_completed" in skip_actions:
        skip |= 1 << 1  # both halves of dmm's free event
    _stacks.check(context, stacks)
    d = _device(device)
    _lib.check(_lib.load().dmm_torch_history(d, n), "dmm.torch.history")  # refused: nothing changed
    if context is not None:
        _track(d)  # frames ride with the blocks, also without a trace
    _stacks.on(d, context, stacks, skip)
    _skip_actions[d] = skip_actions


def torch_snapshot(device=None):
    """dmm's memory in the layout of torch.cuda.memory._snapshot(): `segments` (each run of memory dmm
    has mapped, its blocks tiling it in address order: active_allocated or inactive) and
    `device_traces` (the pool's recent events while history() is on). torch.cuda._memory_viz reads it
    (segsum, segments, memory, trace_plot, segment_plot); python/dmm/snapshot.py says what maps to what."""
    from . import _stacks
    from . import snapshot as layout

    return layout.to_torch(snapshot(device), frames=_stacks.frames,
                           skip_actions=_skip_actions.get(_device(device), ()))


def dump_snapshot(path, device=None):
    """Writes torch_snapshot() as a pickle, like torch.cuda.memory._dump_snapshot: the file PyTorch's
    web viewer (https://pytorch.org/memory_viz) and `python -m torch.cuda._memory_viz` open. The file
    appears whole or not at all. Returns its absolute path."""
    import pickle

    p = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(p)
    if not os.path.isdir(folder):
        raise DmmError("dmm.torch.dump_snapshot: the folder '%s' does not exist; create it or choose another "
                       "file" % folder)
    data = pickle.dumps(torch_snapshot(device), protocol=4)

    def write(f):
        f.write(data)

    try:
        _files.write_whole(p, write)
    except OSError as e:
        raise DmmError("dmm.torch.dump_snapshot: writing '%s' failed: %s" % (p, e.strerror or e)) from None
    return p


_pool_allocator = None  # the CUDAPluggableAllocator behind every mem_pool()
_region_pools = {}  # tag name -> the MemPool of region(name)


def mem_pool():
    """A torch.cuda.MemPool whose memory comes from dmm, for a process whose allocator is torch's own
    (dmm.torch.enable() not called, or CUDA already initialized): usable at any time. Allocations made
    inside `torch.cuda.use_mem_pool(pool)` come from dmm (torch's caching allocator keeps its blocks in
    segments dmm maps); the rest of the process stays on torch's allocator. Inside `tag(name)` too,
    the segments belong to the tag: offload(name) and restore(name) work on them. region(name) is
    both at once."""
    torch = _lib.import_torch("dmm.torch")

    global _pool_allocator
    if _enabled:
        raise DmmError("dmm.torch.mem_pool: dmm is already this process's allocator (enable() was called): every "
                       "allocation comes from dmm; use tag(name) to group memory for offload/restore")
    if _pool_allocator is None:
        _lib.load()
        _pool_allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path(), "dmm_torch_malloc",
                                                                   "dmm_torch_free")
    return torch.cuda.MemPool(_pool_allocator.allocator())


@contextlib.contextmanager
def region(name, pool=None):
    """with dmm.torch.region("kv_cache"): ... -- the tensors allocated inside (on this thread) live in
    dmm memory of tag `name`, so that offload(name) / restore(name) put them to sleep and wake them at
    the same addresses. After enable() this is tag(name); otherwise the allocations go through a
    dmm mem_pool() (one per name, kept for the process; `pool` picks another) while everything else
    stays on torch's allocator. Yields the pool (None after enable())."""
    if not isinstance(name, str) or not name:
        raise ValueError("dmm.torch.region: name must be a non-empty str, not %r" % (name,))
    if _enabled:
        with tag(name):
            yield None
        return
    torch = _lib.import_torch("dmm.torch")

    if pool is None:
        pool = _region_pools.get(name)
        if pool is None:
            pool = _region_pools[name] = mem_pool()
    with torch.cuda.use_mem_pool(pool), tag(name):
        yield pool


class _Region:
    """The memory of one attached region, for torch.as_tensor (__cuda_array_interface__): torch keeps
    this object alive as long as any tensor over it, and when it goes the mapping goes (detach)."""

    def __init__(self, dev, ptr, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None}
        self._detach = weakref.finalize(self, _detach, dev, ptr)


def _detach(dev, ptr):
    """The last tensor over the region is gone: unmap it once the device's queued work is done (a kernel
    may still read it). Runs from torch's deleter, at exit too: nothing here can be acted on."""
    try:
        torch = _lib.import_torch("dmm.torch")

        torch.cuda.synchronize(dev)
    except Exception:  # noqa: BLE001 - at interpreter exit torch may be gone; unmapping is still right
        pass
    _lib.load().dmm_torch_hold_detach(dev, ctypes.c_void_p(ptr))


def _tensor(dev, ptr, nbytes, shape, dtype):
    torch = _lib.import_torch("dmm.torch")

    region = _Region(dev, ptr, nbytes)
    t = torch.as_tensor(region, device="cuda:%d" % dev)
    need = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    if need > nbytes:
        raise ValueError("dmm.torch: a tensor of shape %s and dtype %s needs %d bytes; the region has %d"
                         % (tuple(shape), dtype, need, nbytes))
    return t[:need].view(dtype).view(shape)


def _token(token, what):
    if isinstance(token, str):
        try:
            token = bytes.fromhex(token)
        except ValueError:
            token = b""
    if not isinstance(token, (bytes, bytearray)) or len(token) != 16:
        raise ValueError("dmm.torch.%s: the token is the 32 hex digits hold_create returned, not %r" % (what, token))
    return bytes(token)


def hold_create(name, shape, dtype, socket, device=None):
    """A new region `name` kept by the holder process at `socket` (`dmm hold --socket PATH --cuda N`,
    docs/ipc.md): its memory stays on the device when this process exits or crashes, until
    drop(name, token, socket). Returns (tensor, token): a writable tensor of `shape` and `dtype` over it,
    and the region's token (32 hex digits: keep it, attach and drop need it)."""
    torch = _lib.import_torch("dmm.torch")

    dev = _device(device)
    nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    tok = ctypes.create_string_buffer(16)
    ptr, mapped = ctypes.c_void_p(0), ctypes.c_uint64(0)
    _lib.check(_lib.load().dmm_torch_hold_create(dev, os.fsencode(socket), name.encode(), nbytes, tok,
                                                 ctypes.byref(ptr), ctypes.byref(mapped)),
               "dmm.torch.hold_create(%r)" % name)
    return _tensor(dev, ptr.value, int(mapped.value), shape, dtype), tok.raw.hex()


def attach(name, shape, dtype, token, socket, writable=False, device=None):
    """A tensor of `shape` and `dtype` over region `name` of the holder at `socket`, mapped from the
    same physical memory (no copy: a second process serves from the first one's weights, a restarted
    one finds its weights still on the device). Read-only unless `writable` (a kernel that writes a
    read-only tensor faults). The mapping goes when the last tensor over it does."""
    dev = _device(device)
    ptr, nbytes = ctypes.c_void_p(0), ctypes.c_uint64(0)
    _lib.check(_lib.load().dmm_torch_hold_attach(dev, os.fsencode(socket), name.encode(), _token(token, "attach"),
                                                 1 if writable else 0, ctypes.byref(ptr), ctypes.byref(nbytes)),
               "dmm.torch.attach(%r)" % name)
    return _tensor(dev, ptr.value, int(nbytes.value), shape, dtype)


def drop(name, token, socket):
    """The holder lets region `name` go; its memory leaves the device once no process maps it."""
    _lib.check(_lib.load().dmm_torch_hold_drop(os.fsencode(socket), name.encode(), _token(token, "drop")),
               "dmm.torch.drop(%r)" % name)


def set_limit(limit, device=None):
    """Caps the device memory dmm may hold (physical bytes: pool, tags, graphs, handle cache). None =
    no limit; 0 or a negative number is refused (ValueError). device=None: every device, also those not used yet. A request beyond it raises an error
    naming the limit (after dmm gave back what it caches)."""
    if limit is not None and (int(limit) <= 0 or int(limit) >= 1 << 64):
        raise ValueError("dmm.torch.set_limit: limit must be a positive number of bytes below 2**64, or None "
                         "for no limit; got %r" % (limit,))
    dev = -1 if device is None else _device(device)
    _lib.check(_lib.load().dmm_torch_set_limit(dev, 0 if limit is None else int(limit)), "dmm.torch.set_limit")


_TAG_NAME_MAX = 63  # bytes of a tag's name (the device front keeps 64 with the NUL)


def _tag_name(name, op):
    """`name` as the bytes the library takes, or a TypeError / ValueError that says what a tag is."""
    if not isinstance(name, str):
        raise TypeError("dmm.torch.%s: a tag is a name, a str such as 'weights' or 'kv_cache'; got %r (%s)"
                        % (op, name, type(name).__name__))
    b = name.encode()
    if not b or len(b) > _TAG_NAME_MAX or b"\0" in b:
        raise ValueError("dmm.torch.%s: a tag's name is 1 to %d bytes of UTF-8 without NUL; got %r"
                         % (op, _TAG_NAME_MAX, name))
    return b


@contextlib.contextmanager
def tag(name):
    """Allocations made on this thread inside the block belong to tag `name` (offload/restore as one)."""
    b = _tag_name(name, "tag")
    lib = _lib.load()
    _lib.check(lib.dmm_torch_tag_begin(b), "dmm.torch.tag(%r)" % name)
    try:
        yield name
    finally:
        lib.dmm_torch_tag_end()


@contextlib.contextmanager
def untagged():
    """Allocations made on this thread inside the block come from the pool, in no tag, whatever tag()
    blocks around it and default_tag() say (torch_memory_saver's disable())."""
    lib = _lib.load()
    _lib.check(lib.dmm_torch_untagged_begin(), "dmm.torch.untagged()")
    try:
        yield
    finally:
        lib.dmm_torch_tag_end()


def default_tag(name):
    """Every allocation made outside all tag() and untagged() blocks, on any thread, belongs to tag `name`
    from now on (None: to no tag, as at start), so that offload(name) puts all of it to sleep
    (torch_memory_saver's TMS_INIT_ENABLE). Only what dmm allocates is tagged: after enable(), every
    tensor; before, only those of dmm's mem_pool()."""
    b = None if name is None else _tag_name(name, "default_tag")
    _lib.check(_lib.load().dmm_torch_tag_default(b), "dmm.torch.default_tag(%r)" % (name,))


def offload(name, to="host", device=None, stream=None, wait=False):
    """Sleep: copies the tag's memory to pinned host memory (to="host") or drops it (to="discard"), and
    unmaps it behind an event recorded on `stream` (default: the current one) after the work queued
    there -- kernels still reading the tensors finish first. Returns at once (no synchronize); the
    unmap happens in a later dmm call (poll, offload_wait, an allocation). Addresses stay reserved."""
    b = _tag_name(name, "offload")
    if to not in _MODES:
        raise ValueError("dmm.torch.offload: to must be 'host' or 'discard', not %r" % (to,))
    dev = _device(device)
    _lib.check(_lib.load().dmm_torch_offload(dev, b, _MODES[to], _stream(stream)),
               "dmm.torch.offload(%r)" % name)
    if wait:
        offload_wait(name, dev)


def offload_wait(name, device=None):
    """Waits until the tag's offload unmapped its memory (waits on dmm's own event, not the device)."""
    b = _tag_name(name, "offload_wait")
    _lib.check(_lib.load().dmm_torch_offload_wait(_device(device), b), "dmm.torch.offload_wait(%r)" % name)


def restore(name, device=None, stream=None):
    """Wake: maps the tag's memory again at the same addresses and copies its contents back, ordered
    on `stream` (default: the current one). Tensors and CUDA graphs that use them work as before."""
    b = _tag_name(name, "restore")
    _lib.check(_lib.load().dmm_torch_restore(_device(device), b, _stream(stream)),
               "dmm.torch.restore(%r)" % name)


def release_host(name, device=None):
    """Frees the pinned copies a resident tag keeps for its next offload."""
    b = _tag_name(name, "release_host")
    _lib.check(_lib.load().dmm_torch_release_host(_device(device), b), "dmm.torch.release_host(%r)" % name)


def poll(device=None):
    """Runs the unmaps whose events completed; returns how many still wait."""
    q = ctypes.c_uint64(0)
    _lib.check(_lib.load().dmm_torch_poll(_device(device), ctypes.byref(q)), "dmm.torch.poll")
    return int(q.value)


def tag_info(name, device=None):
    """The tag's state ("resident", "offloading", "offloaded"), bytes and timings, or None."""
    _tag_name(name, "tag_info")
    return memory_stats_raw(device)["tags"].get(name)


def reserve_graph_memory(nbytes, device=None, stream=None):
    """Maps `nbytes` now for the next CUDA graph capture (a capture never maps memory itself)."""
    _lib.check(_lib.load().dmm_torch_graph_reserve(_device(device), int(nbytes), _stream(stream)),
               "dmm.torch.reserve_graph_memory")


def capture_id(stream=None, device=None):
    """The id of the capture `stream` (of `device`) is in (0 when it is not capturing)."""
    cid = ctypes.c_uint64(0)
    _lib.check(_lib.load().dmm_torch_capture_id(_device(device), _stream(stream), ctypes.byref(cid)),
               "dmm.torch.capture_id")
    return int(cid.value)


def release_graph(cid, device=None, stream=None):
    """The graph of capture `cid` is gone: its memory may serve other captures (behind an event on
    `stream`). graph() registers this for you when the graph object dies."""
    _lib.check(_lib.load().dmm_torch_graph_release(_device(device), int(cid), _stream(stream)),
               "dmm.torch.release_graph")


def graphs_sleep(to="host", device=None, stream=None):
    """Graph memory asleep: the memory every CUDA graph captured through dmm (graph()) uses leaves the
    device -- copied to pinned host memory first (to="host") or dropped (to="discard": a graph that
    rewrites all it reads in each replay replays the same after wake) -- after the work queued on
    `stream` (default: the current one), waited for. The graphs stay valid: after graphs_wake() they
    replay without a new capture. Replaying one while asleep reads unmapped memory."""
    if to not in _MODES:
        raise ValueError("dmm.torch.graphs_sleep: to must be 'host' or 'discard', not %r" % (to,))
    _lib.check(_lib.load().dmm_torch_graphs_sleep(_device(device), _MODES[to], _stream(stream)),
               "dmm.torch.graphs_sleep")


def graphs_wake(device=None, stream=None):
    """Graph memory awake again at the same addresses, its bytes copied back (to="host"), waited for."""
    _lib.check(_lib.load().dmm_torch_graphs_wake(_device(device), _stream(stream)), "dmm.torch.graphs_wake")


def _release_quietly(dev, cid):
    try:
        release_graph(cid, dev)
    except Exception:  # noqa: BLE001 - a finalizer must not raise (e.g. at interpreter exit)
        pass


_graph_pools = {}  # (device, pool) -> the number dmm knows the shared pool by
_graph_pools_lock = threading.Lock()


def _graph_pool_key(dev, pool):
    """dmm's number for shared pool `pool` on device `dev` (any hashable: torch.cuda.graph_pool_handle(),
    a string)."""
    try:
        hash(pool)
    except TypeError:
        raise TypeError("dmm.torch.graph: pool must be hashable (torch.cuda.graph_pool_handle(), a name), not %r"
                        % (pool,)) from None
    with _graph_pools_lock:
        return _graph_pools.setdefault((dev, pool), len(_graph_pools) + 1)


@contextlib.contextmanager
def graph(cuda_graph, reserve_bytes=256 << 20, pool=None, **kwargs):
    """torch.cuda.graph(cuda_graph, **kwargs) with dmm's graph memory: reserves `reserve_bytes` before
    the capture (the capture is served from it, and only from it), gives back after it what its blocks
    never reached (the graph holds what it uses: dmm_device_graph_fit), and gives the rest back to dmm
    when the graph object is garbage collected. With `pool` (as torch.cuda.graph's: graph_pool_handle(), or any
    name), the captures of one pool share its memory: blocks an earlier capture freed serve the next, so
    graphs replayed one at a time (one per batch size: capture the largest first) hold the memory of the
    largest (a capture that the pool's memory serves gives its reserve back at once)."""
    torch = _lib.import_torch("dmm.torch")

    dev = torch.cuda.current_device()
    key = _graph_pool_key(dev, pool) if pool is not None else 0
    if reserve_bytes:
        _lib.check(_lib.load().dmm_torch_graph_reserve_pool(dev, int(reserve_bytes), key, _stream(None)),
                   "dmm.torch.graph")
    cid = 0
    try:
        with torch.cuda.graph(cuda_graph, **kwargs):  # (dmm shares the pool's memory: torch's pool is not asked)
            stream = torch.cuda.current_stream()
            cid = capture_id(stream, dev)
            if key:
                _lib.check(_lib.load().dmm_torch_graph_share(dev, _stream(stream), key), "dmm.torch.graph(pool=)")
            yield cuda_graph
        if cid and _lib.load().dmm_torch_graph_fit(dev, cid, _stream(None)) != 0:  # the graph is good: said, kept
            logging.getLogger("dmm").warning("dmm.torch.graph: giving back the graph memory capture %d did not use "
                                             "failed (it stays mapped): %s", cid, last_error())
    finally:
        if cid:  # also when the capture failed: its memory goes back with the graph object
            try:
                cuda_graph._dmm_capture_id = cid
                weakref.finalize(cuda_graph, _release_quietly, dev, cid)
            except (AttributeError, TypeError):  # not weak-referenceable: call release_graph(cid) by hand
                pass


# ---------------------------------------------------------------- recording a trace

_recording = {}  # device -> path, while a recording is on (stopped at exit, so the file is whole)
_recording_lock = threading.Lock()


def _trace_path(path):
    try:
        p = os.fspath(path)
    except TypeError:
        raise TypeError("dmm.torch.record: path must be a file name (str or os.PathLike), not %r" % (path,)) from None
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not p:
        raise ValueError("dmm.torch.record: the path is empty; pass the trace file to write, e.g. 'run.trace.gz'")
    return os.path.abspath(p)


def start_recording(path, device=None, workload=None):
    """Starts writing a dmm trace (`# dmm-trace v1`, gzip; docs/trace-format.md) of every allocation and
    free dmm serves on `device` (default: the current one) until stop_recording. The file is opened
    now: a path that cannot be written raises DmmError naming it, and nothing starts. One recording
    per device at a time. Replay it with `dmm replay PATH`."""
    p = _trace_path(path)
    dev = _device(device)
    w = (workload if workload is not None else os.path.basename(p).split(".")[0]).encode()
    with _recording_lock:
        _lib.check(_lib.load().dmm_torch_record_start(dev, p.encode(), w), "dmm.torch.start_recording(%r)" % p)
        if not _recording:
            atexit.register(_stop_all_at_exit)
        _recording[dev] = p
    return p


def stop_recording(device=None):
    """Ends the recording of `device` and closes its file. Returns a dict: path, allocations, frees,
    untracked_frees (blocks from before the start, left out), live_bytes, peak_live_bytes (what
    `dmm replay` will compute), streams, streams_folded. Raises DmmError when the recording failed (a
    write, host memory: the file is then incomplete, and the sentence says so) or none is on."""
    dev = _device(device)
    st = _lib.RecordStats()
    st.size = ctypes.sizeof(_lib.RecordStats)
    with _recording_lock:
        path = _recording.pop(dev, None)
        _lib.check(_lib.load().dmm_torch_record_stop(dev, ctypes.byref(st)), "dmm.torch.stop_recording")
    out = {"path": path}
    for name, _ in _lib.RecordStats._fields_[1:]:
        out[name] = int(getattr(st, name))
    return out


def _stop_all_at_exit():
    for dev in list(_recording):
        try:
            stop_recording(dev)
        except Exception:  # noqa: BLE001 - at exit nothing can be reported; the file says it is cut
            pass


class _Recording:
    def __init__(self, path):
        self.path = path
        self.stats = None  # stop_recording()'s dict, once the block is left


@contextlib.contextmanager
def record(path, device=None, workload=None):
    """with dmm.torch.record("run.trace.gz") as rec: ... -- a dmm trace of the allocations and frees
    dmm served inside the block (start_recording / stop_recording); rec.stats afterwards."""
    rec = _Recording(start_recording(path, device, workload))
    try:
        yield rec
    finally:
        rec.stats = stop_recording(device)
