# SPDX-License-Identifier: Apache-2.0
"""dmm.buffer — raw device memory from dmm for any framework: torch, CuPy, JAX, Numba, without a copy.

    buf = dmm.buffer(64 << 20, device=0)                # 64 MiB of dmm memory on cuda:0
    t = torch.from_dlpack(buf)                           # uint8 tensor over it, no copy
    a = cupy.from_dlpack(buf)                            # or cupy.asarray(buf): __cuda_array_interface__
    x = jax.dlpack.from_dlpack(buf)                      # JAX (XLA_PYTHON_CLIENT_PREALLOCATE=false)

The memory comes from the same device front as dmm.torch's tensors (libdmm_torch.so: one pool and one
budget a device), so a buffer is charged to the budget torch's tensors are, and a refusal is a DmmError
with dmm's sentence. It is given back when the Buffer object and every DLPack consumer let go (a
consumer through __cuda_array_interface__ keeps the Buffer object itself alive).

Streams. The memory is ordered on the buffer's stream (the device's default stream unless given), as
an allocation of a stream-ordered allocator is: work on that stream may use it at once. A consumer that
names its own stream through __dlpack__(stream=...) gets it recorded (dmm_torch_record_stream), so the
memory is handed out again only after that stream's work too; work on another stream must itself be
ordered after the buffer stream's earlier work, as with torch's tensors.

Invariants: the memory is freed exactly once, when the last claim (the Buffer's own and one per DLPack
capsule not deleted yet) goes; a refused allocation leaves nothing behind.
"""

import ctypes
import threading

from . import _dlpack, _lib


class _Claims:
    """Who still uses one allocation; `free()` runs when the last one lets go."""

    def __init__(self, free):
        self._free, self._count, self._lock = free, 1, threading.Lock()

    def take(self):
        with self._lock:
            self._count += 1

    def drop(self):
        with self._lock:
            self._count -= 1
            last = self._count == 0
        if last:
            self._free()


def _stream_handle(stream):
    """A raw cudaStream_t (int) from None (the default stream), an int, a torch stream (cuda_stream) or a
    CuPy stream (ptr)."""
    if stream is None:
        return 0
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0 or stream >= 1 << 64:
        raise TypeError("stream must be None, a raw stream handle (int) or a torch/CuPy stream, not %r" % (stream,))
    return stream


class Buffer:
    """`nbytes` of memory at `ptr` on a device, exported by DLPack and __cuda_array_interface__."""

    def __init__(self, nbytes, device=None, stream=None):
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0 or nbytes >= 1 << 63:
            raise ValueError("nbytes must be an int from 1 to 2**63 - 1, not %r" % (nbytes,))
        index = 0 if device is None else device
        if hasattr(index, "index") and getattr(index, "type", "cuda") == "cuda":  # a torch.device
            index = index.index or 0
        if isinstance(index, str) and index.startswith("cuda"):
            index = int(index.partition(":")[2] or 0)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 64:
            raise ValueError("device must be a CUDA device index 0-63, 'cuda:N' or a torch.device, not %r"
                             % (device,))
        handle = _stream_handle(stream)
        lib = _lib.load()
        ptr = lib.dmm_torch_malloc_nothrow(nbytes, index, handle)
        if not ptr:
            error = _lib.DmmError("dmm.buffer(%d bytes, device %d): %s" % (nbytes, index, _lib.last_error()))
            error.status = int(lib.dmm_torch_last_status())  # dmm/status.h: 2 out of memory, 3 budget
            raise error

        def free():
            lib.dmm_torch_free(ptr, nbytes, index, handle)

        self._adopt(ptr, nbytes, _dlpack.DEVICE_CUDA, index, handle, free)

    @classmethod
    def _over(cls, ptr, nbytes, device_type, device_id, free, stream=0):
        """A Buffer over memory someone else allocated; free() runs once when the last claim goes."""
        self = cls.__new__(cls)
        self._adopt(ptr, nbytes, device_type, device_id, stream, free)
        return self

    def _adopt(self, ptr, nbytes, device_type, device_id, stream, free):
        self.ptr, self.nbytes, self.device, self.stream = ptr, nbytes, device_id, stream
        self._device_type = device_type
        self._claims = _Claims(free)

    def __del__(self):
        claims = getattr(self, "_claims", None)
        if claims is not None:
            self._claims = None
            claims.drop()

    def __dlpack_device__(self):
        return (self._device_type, self.device)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A capsule over the whole buffer (1-D uint8); each one holds the memory until its consumer lets go."""
        if copy:
            raise BufferError("dmm.buffer exports its memory without a copy; copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("dmm.buffer lives on %r, not %r" % (self.__dlpack_device__(), tuple(dl_device)))
        if self._device_type == _dlpack.DEVICE_CUDA and stream != -1:  # -1: the consumer asks for no ordering
            # DLPack's CUDA streams: None and 1 the legacy default stream (raw 0), 2 the per-thread default
            # (raw 2, as the driver spells it), above 2 a raw handle; 0 is not allowed
            if stream == 0:
                raise BufferError("__dlpack__(stream=0) is ambiguous in DLPack: pass 1 for the legacy default stream")
            consumer = 0 if stream in (None, 1) else _stream_handle(stream)
            if consumer != self.stream:
                _lib.load().dmm_torch_record_stream(self.ptr, consumer)
        self._claims.take()
        try:
            return _dlpack.capsule(self.ptr, self.nbytes, self._device_type, self.device,
                                   on_release=self._claims.drop)
        except BaseException:
            self._claims.drop()
            raise

    @property
    def __cuda_array_interface__(self):
        if self._device_type != _dlpack.DEVICE_CUDA:
            raise AttributeError("a host buffer has no __cuda_array_interface__")
        # version 3: "stream" names where the memory is ordered (1: the legacy default stream; 0 is not allowed)
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3,
                "strides": None, "stream": self.stream or 1}

    def __repr__(self):
        return "dmm.Buffer(%d bytes at %#x on %s:%d)" % (self.nbytes, self.ptr,
                                                         "cuda" if self._device_type == _dlpack.DEVICE_CUDA else "cpu",
                                                         self.device)


def buffer(nbytes, device=None, stream=None):
    """`nbytes` of dmm memory on CUDA device `device` (index, 'cuda:N' or torch.device; default 0), ordered on
    `stream` (default: the device's default stream), for any framework through DLPack or
    __cuda_array_interface__."""
    return Buffer(nbytes, device=device, stream=stream)
