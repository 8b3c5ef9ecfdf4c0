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
names its own stream through __dlpack__(stream=...) gets it ordered after the buffer stream's work so far
(an event it waits for) and recorded (dmm_torch_record_stream), so the memory is handed out again only
after that stream's work too; through __cuda_array_interface__ the consumer reads the buffer's stream
from its "stream" key and orders itself.

Invariants: the memory is freed exactly once, when the last holder of its claim (the Buffer, and each
DLPack tensor no consumer has deleted yet: dmm._dlpack) goes; a refused allocation leaves nothing behind.
"""

from . import _dlpack, _lib


def _device_index(device):
    """A CUDA device index from None (0), an int, 'cuda' / 'cuda:N' or a torch.device of type cuda."""
    index = 0 if device is None else device
    if isinstance(index, str):
        kind, _, number = index.partition(":")
        if kind != "cuda" or not (number == "" or number.isdigit()):
            raise ValueError("device must be a CUDA device: an index, 'cuda:N' or a torch.device, not %r" % (device,))
        index = int(number or 0)
    elif not isinstance(index, int) and getattr(index, "type", None) == "cuda":  # a torch.device
        index = index.index or 0
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 64:
        raise ValueError("device must be a CUDA device: an index 0-63, 'cuda:N' or a torch.device, not %r" % (device,))
    return index


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
    """`nbytes` of dmm memory at `ptr` on a CUDA device, exported by DLPack and __cuda_array_interface__."""

    def __init__(self, nbytes, device=None, stream=None):
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0 or nbytes >= 1 << 63:
            raise ValueError("nbytes must be an int from 1 to 2**63 - 1, not %r" % (nbytes,))
        index = _device_index(device)
        handle = _stream_handle(stream)
        lib = _lib.load()
        ptr = lib.dmm_torch_malloc_nothrow(nbytes, index, handle)
        if not ptr:
            error = _lib.DmmError("dmm.buffer(%d bytes, device %d): %s" % (nbytes, index, _lib.last_error()))
            error.status = int(lib.dmm_torch_last_status())  # dmm/status.h: 2 out of memory, 3 budget
            raise error
        try:
            claim = _dlpack.Claim(ptr, nbytes, index, handle, owns=True)
        except BaseException:
            lib.dmm_torch_free(ptr, nbytes, index, handle)
            raise
        self._adopt(claim, _dlpack.DEVICE_CUDA, handle)

    @classmethod
    def _over(cls, claim, device_type, stream=0):
        """A Buffer over a claim made elsewhere (tests: host memory the claim does not own)."""
        self = cls.__new__(cls)
        self._adopt(claim, device_type, stream)
        return self

    def _adopt(self, claim, device_type, stream):
        self.ptr, self.nbytes, self.device, self.stream = claim.ptr, claim.nbytes, claim.device, stream
        self._device_type, self._claim = device_type, claim

    def __del__(self):
        claim = getattr(self, "_claim", None)
        if claim is not None:
            self._claim = None
            claim.drop()

    def __copy__(self):
        raise TypeError("a dmm.Buffer is not copied (its memory has one owner): share the object, or export it "
                        "with __dlpack__")

    __deepcopy__ = __reduce__ = __reduce_ex__ = lambda self, *args: self.__copy__()

    def __dlpack_device__(self):
        return (self._device_type, self.device)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A capsule over the whole buffer (1-D uint8); it holds the memory until its consumer lets go."""
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
                lib = _lib.load()
                # the consumer's stream waits for the buffer stream's work so far, and the memory is handed
                # out again only after the consumer stream's work
                _lib.check(lib.dmm_torch_stream_wait(self.device, consumer, self.stream), "dmm.Buffer.__dlpack__")
                lib.dmm_torch_record_stream(self.ptr, consumer)
        return self._claim.capsule(self._device_type)
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
