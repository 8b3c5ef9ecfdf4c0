# SPDX-License-Identifier: Apache-2.0
"""Finding and loading libdmm_torch.so, and its C signatures (adapters/torch/dmm_torch.h)."""

import ctypes
import glob
import os
import threading

_lock = threading.Lock()
_lib = None
_path = None


class DmmError(RuntimeError):
    """A dmm call failed; the message is dmm's own sentence (what, the values, what to do)."""


def _candidates():
    """Where to look, in order: DMM_LIB (the file or its folder) overrides everything; then the
    package's own copy (an installed wheel or `cmake --install` puts it beside this file); then, when
    this package is the source tree's python/dmm, the tree's build folders (build*/adapters/torch)."""
    env = os.environ.get("DMM_LIB")
    if env:
        yield os.path.join(env, "libdmm_torch.so") if os.path.isdir(env) else env
        return  # an override that is wrong is an error, never a silent fall-back to another copy
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libdmm_torch.so")
    root = os.path.dirname(os.path.dirname(here))  # python/dmm -> the source tree
    if os.path.isfile(os.path.join(root, "CMakeLists.txt")) and os.path.isdir(os.path.join(root, "adapters", "torch")):
        yield from sorted(glob.glob(os.path.join(root, "build*", "adapters", "torch", "libdmm_torch.so")))


class RecordStats(ctypes.Structure):
    """dmm_torch_record_stats (dmm_torch.h): what a recording wrote."""
    _fields_ = [("size", ctypes.c_uint32), ("allocations", ctypes.c_uint64), ("frees", ctypes.c_uint64),
                ("untracked_frees", ctypes.c_uint64), ("live_bytes", ctypes.c_uint64),
                ("peak_live_bytes", ctypes.c_uint64), ("streams", ctypes.c_uint64),
                ("streams_folded", ctypes.c_uint64)]


_SIGNATURES = {
    # name: (restype, argtypes)
    "dmm_torch_malloc_nothrow": (ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]),
    "dmm_torch_free": (None, [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]),
    "dmm_torch_record_stream": (None, [ctypes.c_void_p, ctypes.c_void_p]),
    "dmm_torch_stream_wait": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]),
    "dmm_torch_set_oom_observer": (None, [ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_uint64)]),
    "dmm_torch_host_copy": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64,
                                           ctypes.POINTER(ctypes.c_void_p)]),
    "dmm_torch_last_error": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
    "dmm_torch_last_status": (ctypes.c_int, []),
    "dmm_torch_set_limit": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint64]),
    "dmm_torch_stats_json": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                            ctypes.POINTER(ctypes.c_size_t)]),
    "dmm_torch_snapshot_json": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                               ctypes.POINTER(ctypes.c_size_t)]),
    "dmm_torch_reset_peaks": (ctypes.c_int, [ctypes.c_int]),
    "dmm_torch_reset_accumulated": (ctypes.c_int, [ctypes.c_int]),
    "dmm_torch_devices": (ctypes.c_int, [ctypes.POINTER(ctypes.c_uint64)]),
    "dmm_torch_hold_create": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64,
                                             ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                             ctypes.POINTER(ctypes.c_uint64)]),
    "dmm_torch_hold_attach": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                             ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                             ctypes.POINTER(ctypes.c_uint64)]),
    "dmm_torch_hold_detach": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p]),
    "dmm_torch_hold_drop": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]),
    "dmm_torch_empty_cache": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]),
    "dmm_torch_warm": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]),
    "dmm_torch_layout": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t,
                                        ctypes.POINTER(ctypes.c_size_t)]),
    "dmm_torch_warm_layout": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t,
                                             ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]),
    "dmm_torch_tag_begin": (ctypes.c_int, [ctypes.c_char_p]),
    "dmm_torch_tag_end": (ctypes.c_int, []),
    "dmm_torch_untagged_begin": (ctypes.c_int, []),
    "dmm_torch_tag_default": (ctypes.c_int, [ctypes.c_char_p]),
    "dmm_torch_offload": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p]),
    "dmm_torch_offload_wait": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p]),
    "dmm_torch_restore": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p]),
    "dmm_torch_release_host": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p]),
    "dmm_torch_poll": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]),
    "dmm_torch_graph_reserve": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p]),
    "dmm_torch_graph_release": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p]),
    "dmm_torch_graphs_sleep": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]),
    "dmm_torch_graphs_wake": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p]),
    "dmm_torch_graph_share": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64]),
    "dmm_torch_graph_fit": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p]),
    "dmm_torch_graph_reserve_pool": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]),
    "dmm_torch_capture_id": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]),
    "dmm_torch_set_capture_check": (None, [ctypes.c_int]),
    "dmm_torch_now_ns": (ctypes.c_uint64, []),
    "dmm_torch_record_start": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p]),
    "dmm_torch_record_stop": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(RecordStats)]),
    "dmm_torch_history": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint64]),
    "dmm_torch_history_context": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int,
                                                 ctypes.c_void_p]),
    "dmm_torch_native_symbol": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                               ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)]),
    "dmm_torch_track_blocks": (ctypes.c_int, [ctypes.c_int]),
}


def load():
    """The loaded library (loaded once per process)."""
    global _lib, _path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for p in _candidates():
            tried.append(p)
            if not os.path.exists(p):
                continue
            try:
                lib = ctypes.CDLL(p)
            except OSError as e:  # not a library of this machine, a sanitized build, a missing libz
                raise DmmError("libdmm_torch.so at %s does not load: %s" % (p, e)) from e
            _set(lib, p, _SIGNATURES)
            _lib, _path = lib, os.path.abspath(p)
            return _lib
        if os.environ.get("DMM_LIB"):
            raise DmmError("libdmm_torch.so was not found at DMM_LIB=%s: set DMM_LIB to the library or its "
                           "folder, or unset it to use the package's own copy" % os.environ["DMM_LIB"])
        raise DmmError("libdmm_torch.so was not found (tried: %s): install the package with the library, "
                       "`pip install --no-index ./python` from the dmm source tree (it builds it; needs cmake "
                       "and a C compiler), or set DMM_LIB to the file or its folder" % ", ".join(tried))


def _set(lib, path, signatures):
    for name, (res, args) in signatures.items():
        f = getattr(lib, name, None)
        if f is None:  # a library of an older build beside a newer package
            raise DmmError("libdmm_torch.so at %s has no %s: it is older than this package; rebuild it (or "
                           "point DMM_LIB at a library of the same version)" % (path, name))
        f.restype = res
        f.argtypes = args


_bound = set()  # the keys of the signature tables bind() has set


def bind(key, signatures):
    """The loaded library with a module's own table of {name: (restype, argtypes)} set (once per key)."""
    lib = load()
    with _lock:
        if key not in _bound:
            _set(lib, _path, signatures)
            _bound.add(key)
    return lib


def library_path():
    """The path of libdmm_torch.so (loading it if needed)."""
    load()
    return _path


def last_error():
    lib = load()
    buf = ctypes.create_string_buffer(4096)
    lib.dmm_torch_last_error(buf, len(buf))
    return buf.value.decode("utf-8", "replace")


def check(status, what):
    if status != 0:
        raise DmmError("%s: %s" % (what, last_error()))


def json_call(fn, device):
    """Calls a (device, buf, cap, needed) JSON function, growing the buffer as needed."""
    cap = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(cap)
        need = ctypes.c_size_t(0)
        s = fn(device, buf, cap, ctypes.byref(need))
        if s == 0:
            return buf.value.decode("utf-8", "replace")
        if need.value + 1 > cap:
            cap = need.value + 4096
            continue
        check(s, "dmm stats")


def switched_off():
    """DMM_DISABLE (docs/options.md): 1, true, yes or on switches dmm off without a change of code."""
    return os.environ.get("DMM_DISABLE", "").strip().lower() in ("1", "true", "yes", "on")


def served_devices(what):
    """The CUDA devices dmm serves in this process (those with a dmm context), without creating one."""
    mask = ctypes.c_uint64(0)
    check(load().dmm_torch_devices(ctypes.byref(mask)), what)
    return [i for i in range(64) if mask.value >> i & 1]


def import_torch(what):
    """torch, or a DmmError with the one-line install hint when it is missing (`what` names the call)."""
    try:
        import torch
    except ImportError as e:
        raise DmmError("%s needs PyTorch, which is not importable here (%s): install it, e.g. `pip install torch`, "
                       "in this Python environment" % (what, e)) from None
    return torch
