# SPDX-License-Identifier: Apache-2.0
"""dmm.ort — ONNX Runtime sessions whose memory is dmm's, under the same governor as dmm.torch's and
dmm.cupy's tensors (docs/ort.md, "One budget with torch and CuPy").

    import dmm.ort
    dmm.ort.set_host_limit(2 << 30)               # the host tier's budget: ORT's CPU memory counts here
    s = dmm.ort.Session("model.onnx")             # ONNX Runtime's CPU provider, dmm host memory
    out = s.run({"X": (values, [4, 256])})        # {name: Output(data=array('f'), shape)}
    s.close()

libdmm_torch.so carries the ONNX Runtime adapter (adapters/ort) and builds its allocator over the library's
own governor, the one every device of dmm.torch and dmm.cupy is charged to: the session's initializers and
the tensors every Run makes are dmm host memory charged to that governor's host tier (the inputs stay the
caller's memory), so one process's torch, CuPy and ONNX Runtime memory answer to one governor. A Run that
would pass the host tier's limit fails with ONNX Runtime's own error (OrtError here), whose message carries
dmm's sentence.

ONNX Runtime itself is opened from `library` (default: $DMM_ORT_LIB, else libonnxruntime.so.1 where the
loader finds it; scripts/ort.sh puts one in the source tree's .ort/). This is the C API of that library,
not the onnxruntime Python package (which takes no outside allocator): float32 tensors in and out, the CPU
provider only. A value fed is a pair (buffer, shape): any contiguous float32 buffer (array.array('f'), a
numpy array, bytes of packed floats) and its dimensions.
"""

import array
import collections
import ctypes
import os
import stat
import threading

from . import _lib

__all__ = ["Session", "Output", "OrtError", "set_host_limit", "tier_usage", "usage"]

_P = ctypes.c_void_p
_U64 = ctypes.c_uint64


class _OrtConfig(ctypes.Structure):  # adapters/ort/dmm_ort.h: dmm_ort_config
    _fields_ = [("size", ctypes.c_uint32), ("name", ctypes.c_char_p), ("priority", ctypes.c_int32),
                ("va_bytes", ctypes.c_uint64), ("allocator_type", ctypes.c_int32), ("log", _P), ("log_user", _P),
                ("null_on_refusal", ctypes.c_uint32)]


_SIGNATURES = {
    "dmm_torch_ort_open": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "dmm_torch_ort_close": (None, [_P]),
    "dmm_torch_ort_api": (_P, [_P]),
    "dmm_torch_ort_use_dmm": (ctypes.c_int, [_P, _P]),
    "dmm_torch_ort_allocator_create": (ctypes.c_int, [_P, ctypes.c_int, ctypes.POINTER(_OrtConfig), ctypes.POINTER(_P)]),
    "dmm_torch_ort_allocator_destroy": (ctypes.c_int, [_P]),
    "dmm_torch_ort_register": (ctypes.c_int, [_P, _P]),
    "dmm_torch_ort_unregister": (ctypes.c_int, [_P, _P]),
    "dmm_torch_ort_usage": (ctypes.c_int, [_P, ctypes.POINTER(_U64), ctypes.POINTER(_U64), ctypes.POINTER(_U64)]),
    "dmm_torch_set_host_limit": (ctypes.c_int, [_U64]),
    "dmm_torch_tier_usage": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(_U64), ctypes.POINTER(_U64),
                                            ctypes.POINTER(_U64)]),
}

_S = _P  # an OrtStatus * (NULL: success)
# The OrtApi slots this module calls: (slot, restype, argtypes), as adapters/ort/dmm_ort_abi.h declares them.
_SLOTS = {
    "GetErrorCode": (1, ctypes.c_int, [_P]),
    "GetErrorMessage": (2, ctypes.c_char_p, [_P]),
    "CreateEnv": (3, _S, [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_P)]),
    "CreateSessionFromArray": (8, _S, [_P, ctypes.c_char_p, ctypes.c_size_t, _P, ctypes.POINTER(_P)]),
    "Run": (9, _S, [_P, _P, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(_P), ctypes.c_size_t,
                    ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t, ctypes.POINTER(_P)]),
    "CreateSessionOptions": (10, _S, [ctypes.POINTER(_P)]),
    "SetIntraOpNumThreads": (24, _S, [_P, ctypes.c_int]),
    "SessionGetInputCount": (30, _S, [_P, ctypes.POINTER(ctypes.c_size_t)]),
    "SessionGetOutputCount": (31, _S, [_P, ctypes.POINTER(ctypes.c_size_t)]),
    "SessionGetInputName": (36, _S, [_P, ctypes.c_size_t, _P, ctypes.POINTER(_P)]),
    "SessionGetOutputName": (37, _S, [_P, ctypes.c_size_t, _P, ctypes.POINTER(_P)]),
    "CreateTensorWithDataAsOrtValue": (49, _S, [_P, _P, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int64),
                                                ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(_P)]),
    "GetTensorMutableData": (51, _S, [_P, ctypes.POINTER(_P)]),
    "GetTensorElementType": (60, _S, [_P, ctypes.POINTER(ctypes.c_int)]),
    "GetDimensionsCount": (61, _S, [_P, ctypes.POINTER(ctypes.c_size_t)]),
    "GetDimensions": (62, _S, [_P, ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t]),
    "GetTensorTypeAndShape": (65, _S, [_P, ctypes.POINTER(_P)]),
    "CreateCpuMemoryInfo": (69, _S, [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_P)]),
    "AllocatorFree": (76, _S, [_P, _P]),
    "GetAllocatorWithDefaultOptions": (78, _S, [ctypes.POINTER(_P)]),
    "ReleaseEnv": (92, None, [_P]),
    "ReleaseStatus": (93, None, [_P]),
    "ReleaseSession": (95, None, [_P]),
    "ReleaseValue": (96, None, [_P]),
    "ReleaseTensorTypeAndShapeInfo": (99, None, [_P]),
    "ReleaseSessionOptions": (100, None, [_P]),
}
_FLOAT = 1  # ONNXTensorElementDataType float32
_LOG_FATAL = 4  # ONNX Runtime's own log: a Run's error is raised as OrtError, not printed as well
_DEVICE_ALLOCATOR, _MEM_DEFAULT = 0, 0

Output = collections.namedtuple("Output", "data shape")  # data: array.array('f'), shape: tuple of ints


class OrtError(_lib.DmmError):
    """ONNX Runtime refused a call; `code` is its OrtErrorCode, the message its text (with dmm's sentence
    when dmm refused the memory)."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def _calls():
    return _lib.bind("ort", _SIGNATURES)


_U64_END, _I63_END, _I31_END = 1 << 64, 1 << 63, 1 << 31


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool)


def set_host_limit(nbytes):
    """The budget of the governor's host tier (owned bytes; 0 = none): ONNX Runtime's CPU memory under
    dmm.ort, and the pinned copies of dmm.torch's offloads, count against it."""
    if not _whole(nbytes) or not 0 <= nbytes < _U64_END:
        raise ValueError("set_host_limit takes a number of bytes >= 0 and below 2**64 (0 = no limit), not %r"
                         % (nbytes,))
    _lib.check(_calls().dmm_torch_set_host_limit(nbytes), "dmm.ort.set_host_limit")


def tier_usage(device=None):
    """{used, peak, limit} (owned bytes; limit None when there is none) of the governor's host tier
    (device None) or of CUDA device `device`'s tier."""
    d = -1 if device is None else device
    if not _whole(d) or not -1 <= d < 64:
        raise ValueError("device must be None (the host tier) or a CUDA ordinal 0..63, not %r" % (device,))
    used, peak, limit = _U64(), _U64(), _U64()
    _lib.check(_calls().dmm_torch_tier_usage(d, ctypes.byref(used), ctypes.byref(peak), ctypes.byref(limit)),
           "dmm.ort.tier_usage")
    return {"used": used.value, "peak": peak.value, "limit": None if limit.value == _U64_END - 1 else limit.value}


class _Api:
    """The OrtApi slots of one runtime, as ctypes functions."""

    def __init__(self, table):
        slots = ctypes.cast(table, ctypes.POINTER(_P))
        for name, (slot, res, args) in _SLOTS.items():
            setattr(self, name, ctypes.CFUNCTYPE(res, *args)(slots[slot]))

    def check(self, status, what):
        if status:
            code = self.GetErrorCode(status)
            msg = (self.GetErrorMessage(status) or b"").decode("utf-8", "replace")
            self.ReleaseStatus(status)
            raise OrtError("%s: ONNX Runtime: %s" % (what, msg), code)


_MODEL_MAX_BYTES = 2 << 30  # protobuf's ceiling for one message: no single-file ONNX model is larger


def _model_bytes(model):
    """The model's bytes: given, or read whole from a regular file of at most 2 GiB (a FIFO, a device such
    as /dev/zero or a larger file is refused unread: opened without waiting for a writer, checked first)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError("model must be the ONNX file's path or its bytes, not %s" % type(model).__name__)
    fd = os.open(model, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("model %r is not a regular file (a FIFO, a device or a folder): pass an ONNX file's "
                             "path, or its bytes" % os.fspath(model))
        if st.st_size > _MODEL_MAX_BYTES:
            raise ValueError("model %r holds %d bytes, more than an ONNX model's 2 GiB (protobuf's ceiling; a larger "
                             "model keeps its weights as external data, which dmm.ort does not read)"
                             % (os.fspath(model), st.st_size))
        parts, got = [], 0
        while got <= _MODEL_MAX_BYTES:
            part = os.read(fd, min(64 << 20, _MODEL_MAX_BYTES + 1 - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
    finally:
        os.close(fd)
    blob = b"".join(parts)
    if len(blob) > _MODEL_MAX_BYTES:
        raise ValueError("model %r grew past 2 GiB while it was read" % os.fspath(model))
    return blob


def _feed(name, value):
    """(buffer, shape) -> (a ctypes buffer kept alive, its address, bytes, shape array, rank)."""
    if not (isinstance(value, tuple) and len(value) == 2):
        raise TypeError("input %r: pass (buffer, shape), e.g. (array.array('f', ...), [4, 256]), not %s"
                        % (name, type(value).__name__))
    data, shape = value
    if not isinstance(shape, (list, tuple)) or not all(_whole(d) and 0 <= d < _I63_END for d in shape):
        raise ValueError("input %r: the shape must be a list of ints from 0 to 2**63 - 1, not %r" % (name, shape))
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError("input %r: %s is not a buffer of float32 (array.array('f'), a numpy array)"
                        % (name, type(data).__name__)) from None
    if not view.c_contiguous:
        raise ValueError("input %r: the buffer is not contiguous (copy it first)" % name)
    packed = isinstance(data, (bytes, bytearray))  # bytes of packed float32
    if view.format not in ("f", "<f", "=f") and not packed:
        raise TypeError("input %r: the buffer holds %r items, not float32 ('f'; or bytes of packed float32)"
                        % (name, view.format))
    raw = view.cast("B")
    count = 1
    for d in shape:
        count *= d
    if raw.nbytes != 4 * count:
        raise ValueError("input %r: shape %s needs %d bytes of float32, the buffer has %d"
                         % (name, list(shape), 4 * count, raw.nbytes))
    if raw.nbytes == 0:
        keep = (ctypes.c_char * 1)()
    elif raw.readonly:  # ONNX Runtime does not write its inputs, but ctypes maps only writable memory in place
        keep = (ctypes.c_char * raw.nbytes).from_buffer_copy(raw)
    else:
        keep = (ctypes.c_char * raw.nbytes).from_buffer(raw)  # no copy: the caller's memory, for the Run
    return (keep, raw), ctypes.addressof(keep), raw.nbytes, (ctypes.c_int64 * max(len(shape), 1))(*shape), len(shape)


class _Runtime:
    """ONNX Runtime opened once per process, with its one environment (ONNX Runtime keeps one per process)
    and the one dmm allocator registered on it for CPU memory, which every Session uses. Kept until the
    process ends: ONNX Runtime is not made to be unloaded."""

    def __init__(self, library, name):
        lib = _calls()
        self.library = library
        rt = _P()
        path = None if library is None else os.fsencode(library)
        _lib.check(lib.dmm_torch_ort_open(path, ctypes.byref(rt)), "dmm.ort: opening ONNX Runtime")
        try:
            self.api = api = _Api(lib.dmm_torch_ort_api(rt))
            cfg = _OrtConfig(ctypes.sizeof(_OrtConfig), name.encode(), 0, 0, _DEVICE_ALLOCATOR, None, None, 0)
            alloc = _P()
            _lib.check(lib.dmm_torch_ort_allocator_create(rt, -1, ctypes.byref(cfg), ctypes.byref(alloc)),
                   "dmm.ort: the allocator")
            try:
                env = _P()
                api.check(api.CreateEnv(_LOG_FATAL, b"dmm.ort", ctypes.byref(env)), "dmm.ort: CreateEnv")
                try:
                    _lib.check(lib.dmm_torch_ort_register(alloc, env), "dmm.ort: registering the allocator")
                    cpu = _P()
                    api.check(api.CreateCpuMemoryInfo(_DEVICE_ALLOCATOR, _MEM_DEFAULT, ctypes.byref(cpu)),
                              "dmm.ort: CreateCpuMemoryInfo")
                except BaseException:
                    lib.dmm_torch_ort_unregister(alloc, env)
                    api.ReleaseEnv(env)
                    raise
            except BaseException:
                lib.dmm_torch_ort_allocator_destroy(alloc)
                raise
        except BaseException:
            lib.dmm_torch_ort_close(rt)
            raise
        self.lib, self.rt, self.alloc, self.env, self.cpu = lib, rt, alloc, env, cpu


_runtime = None
_runtime_lock = threading.Lock()


def _same_library(a, b):
    """Whether a Session asking for library `a` may use the one open from `b`: a None accepts whatever is
    open; otherwise both must name one file (b None: $DMM_ORT_LIB)."""
    def where(x):
        x = x if x is not None else os.environ.get("DMM_ORT_LIB")
        return os.path.realpath(os.fspath(x)) if x else None
    return a is None or where(a) == where(b)


def _open(library):
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = _Runtime(library, "ort")
        elif not _same_library(library, _runtime.library):
            raise _lib.DmmError("dmm.ort: ONNX Runtime is open from %s already; a process runs one ONNX Runtime "
                                "(pass the same library, or none)" % (_runtime.library or "$DMM_ORT_LIB or libonnxruntime.so.1"))
        return _runtime


def usage():
    """{in_use, max_in_use, refusals} of dmm.ort's allocator (bytes, bytes, count): the memory of every
    Session of the process. Zeros before the first Session."""
    if _runtime is None:
        return {"in_use": 0, "max_in_use": 0, "refusals": 0}
    a, b, c = _U64(), _U64(), _U64()
    _lib.check(_runtime.lib.dmm_torch_ort_usage(_runtime.alloc, ctypes.byref(a), ctypes.byref(b), ctypes.byref(c)),
           "dmm.ort.usage")
    return {"in_use": a.value, "max_in_use": b.value, "refusals": c.value}


class Session:
    """An ONNX Runtime session (CPU provider) whose memory comes from dmm.ort's allocator on the governor of
    dmm.torch (see the module's docstring). Runs may come from several threads at once (ONNX Runtime's
    Run is thread-safe); close() waits for the Runs in progress, and a session dropped without close() is
    closed when it is collected."""

    def __init__(self, model, *, library=None, threads=1):
        self._session = None
        self._cv = threading.Condition()
        self._running = 0  # Runs in progress: close() waits for them (under _cv)
        if not _whole(threads) or not 0 <= threads < _I31_END:
            raise ValueError("threads must be an int from 0 (ONNX Runtime's choice) to 2**31 - 1, not %r" % (threads,))
        blob = _model_bytes(model)
        self._rt = rt = _open(library)
        self._api = api = rt.api
        opts = _P()
        api.check(api.CreateSessionOptions(ctypes.byref(opts)), "dmm.ort.Session: CreateSessionOptions")
        try:
            if threads:
                api.check(api.SetIntraOpNumThreads(opts, threads), "dmm.ort.Session: SetIntraOpNumThreads")
            _lib.check(rt.lib.dmm_torch_ort_use_dmm(rt.rt, opts), "dmm.ort.Session: session options")
            sess = _P()
            api.check(api.CreateSessionFromArray(rt.env, blob, len(blob), opts, ctypes.byref(sess)),
                      "dmm.ort.Session: CreateSessionFromArray")
            self._session = sess
        finally:
            api.ReleaseSessionOptions(opts)
        try:
            self.inputs = self._names(api.SessionGetInputCount, api.SessionGetInputName)
            self.outputs = self._names(api.SessionGetOutputCount, api.SessionGetOutputName)
        except BaseException:
            self.close()
            raise

    def _names(self, count_fn, name_fn):
        api = self._api
        n = ctypes.c_size_t()
        api.check(count_fn(self._session, ctypes.byref(n)), "dmm.ort.Session: names")
        default = _P()
        api.check(api.GetAllocatorWithDefaultOptions(ctypes.byref(default)), "dmm.ort.Session: names")
        names = []
        for i in range(n.value):
            p = _P()
            api.check(name_fn(self._session, i, default, ctypes.byref(p)), "dmm.ort.Session: names")
            names.append(ctypes.string_at(p.value).decode("utf-8", "replace"))
            api.check(api.AllocatorFree(default, p), "dmm.ort.Session: names")
        return names

    def run(self, feeds):
        """Runs the model on {input name: (float32 buffer, shape)}; returns {output name: Output(data, shape)}
        with the data copied out of ONNX Runtime's (dmm's) memory. A writable input buffer is read in place
        (a read-only one is copied once); either way the inputs are the caller's memory, not dmm's."""
        if not isinstance(feeds, dict):
            raise TypeError("feeds must be a dict {input name: (buffer, shape)}, not %s" % type(feeds).__name__)
        unknown = sorted(set(feeds) - set(self.inputs))
        missing = [n for n in self.inputs if n not in feeds]
        if unknown or missing:
            raise ValueError("the model's inputs are %s; got %s (unknown: %s, missing: %s)"
                             % (self.inputs, sorted(feeds), unknown, missing))
        with self._cv:
            if self._session is None:
                raise _lib.DmmError("dmm.ort.Session: the session is closed")
            self._running += 1
        try:
            return self._run(feeds)
        finally:
            with self._cv:
                self._running -= 1
                self._cv.notify_all()

    def _run(self, feeds):
        api = self._api
        n_in, n_out = len(self.inputs), len(self.outputs)
        values = (_P * max(n_in, 1))()
        outs = (_P * max(n_out, 1))()
        kept = []
        try:
            for i, name in enumerate(self.inputs):
                keep, addr, nbytes, shape, rank = _feed(name, feeds[name])
                kept.append((keep, shape))
                value = _P()
                api.check(api.CreateTensorWithDataAsOrtValue(self._rt.cpu, addr, nbytes, shape, rank, _FLOAT,
                                                             ctypes.byref(value)),
                          "dmm.ort.Session.run: input %r" % name)
                values[i] = value
            in_names = (ctypes.c_char_p * max(n_in, 1))(*[n.encode() for n in self.inputs])
            out_names = (ctypes.c_char_p * max(n_out, 1))(*[n.encode() for n in self.outputs])
            api.check(api.Run(self._session, None, in_names, values, n_in, out_names, n_out, outs),
                      "dmm.ort.Session.run")
            return {name: self._copy_out(outs[i], name) for i, name in enumerate(self.outputs)}
        finally:
            for v in list(values) + list(outs):
                if v:
                    api.ReleaseValue(v)

    def _copy_out(self, value, name):
        api = self._api
        info = _P()
        api.check(api.GetTensorTypeAndShape(value, ctypes.byref(info)), "dmm.ort.Session.run: output %r" % name)
        try:
            kind, rank = ctypes.c_int(), ctypes.c_size_t()
            api.check(api.GetTensorElementType(info, ctypes.byref(kind)), "dmm.ort.Session.run")
            if kind.value != _FLOAT:
                raise _lib.DmmError("dmm.ort.Session.run: output %r is of ONNX element type %d; dmm.ort reads "
                                    "float32 (type 1) only" % (name, kind.value))
            api.check(api.GetDimensionsCount(info, ctypes.byref(rank)), "dmm.ort.Session.run")
            dims = (ctypes.c_int64 * max(rank.value, 1))()
            api.check(api.GetDimensions(info, dims, rank.value), "dmm.ort.Session.run")
        finally:
            api.ReleaseTensorTypeAndShapeInfo(info)
        shape = tuple(dims[i] for i in range(rank.value))
        count = 1
        for d in shape:
            count *= d
        p = _P()
        api.check(api.GetTensorMutableData(value, ctypes.byref(p)), "dmm.ort.Session.run")
        data = array.array("f")
        if count:
            data.frombytes((ctypes.c_char * (4 * count)).from_address(p.value))  # one copy, out of dmm's memory
        return Output(data, shape)

    def close(self):
        """Releases the session once the Runs in progress are done: its memory goes back to dmm's allocator."""
        cv = getattr(self, "_cv", None)
        if cv is None:  # __init__ refused its arguments before there was anything to release
            return
        with cv:
            cv.wait_for(lambda: self._running == 0)
            session, self._session = self._session, None
        if session is not None:
            self._api.ReleaseSession(session)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (at interpreter exit the runtime may be gone: nothing to release then)
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
