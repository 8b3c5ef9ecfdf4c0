# SPDX-License-Identifier: Apache-2.0
"""CUDA tensors in dmm memory sent to other processes: torch.multiprocessing (its queues, pipes and
Process arguments), and anything pickled by multiprocessing's ForkingPickler.

PyTorch sends a CUDA tensor as a CUDA IPC handle of its allocator's segment, which a pluggable
allocator cannot give (and cudaIpcGetMemHandle does not cover memory mapped with cuMemMap). dmm sends
its own: dmm.torch.enable() registers reduce() for torch.Tensor and nn.Parameter in ForkingPickler,
where torch's own reduction sits, and keeps torch's for every tensor that is not a live dmm pool block
(CPU tensors, CUDA tensors of another allocator).

The sender: the work queued on the tensor's device's current stream is waited for (the receiver
reads what was written before the send, as torch orders its IPC by an event), the storage's pool
block is exported (dmm_torch_export: the whole handles under it, their descriptors as
multiprocessing DupFd objects, which multiprocessing passes as it passes torch's CPU storages),
and the description, where the storage begins in it and the tensor's shape travel as numbers.
The receiver: rebuild() maps the export into its own dmm device (dmm_torch_import: the description
is checked value by value there, as any untrusted one), wraps it in a claim that unmaps it with its
last holder, and returns a tensor of the same dtype, shape, strides and offset over the same
physical memory: writes on either side are seen on the other, once ordered (synchronize the stream
that wrote before the other side reads).

The rule torch gives for CUDA tensors holds here too: keep the tensor alive in the sender while a
receiver uses it (freed, its memory may be handed out again there). Tag and graph memory is not sent
(allocate what you send outside tag scopes and captures); a device created with
DMM_TORCH_SHAREABLE=0, or one that cannot export POSIX file descriptors, refuses the send with dmm's
sentence.
"""

import ctypes

from . import _dlpack, _lib

MAX_CHUNKS = 64  # DMM_EXPORT_MAX_CHUNKS


class _DeviceId(ctypes.Structure):
    _fields_ = [("tier", ctypes.c_int), ("index", ctypes.c_int32)]


class Export(ctypes.Structure):
    """dmm/share.h's dmm_export."""
    _fields_ = [("size", ctypes.c_uint32), ("nchunks", ctypes.c_uint32), ("bytes", ctypes.c_uint64),
                ("granule", ctypes.c_uint64), ("device", _DeviceId), ("access", ctypes.c_uint32),
                ("token", ctypes.c_uint8 * 16), ("chunk_bytes", ctypes.c_uint64 * MAX_CHUNKS),
                ("fds", ctypes.c_int * MAX_CHUNKS)]


_SIGNATURES = {
    "dmm_torch_export": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(Export),
                                        ctypes.POINTER(ctypes.c_uint64)]),
    "dmm_torch_import": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(Export), ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_void_p)]),
    "dmm_torch_export_close": (None, [ctypes.POINTER(Export)]),
}


def _calls():
    return _lib.bind("share", _SIGNATURES)


def _empty_export():
    ex = Export()
    ex.size = ctypes.sizeof(Export)
    for i in range(MAX_CHUNKS):
        ex.fds[i] = -1
    return ex


_torch_reduce = []  # torch's own reduction of tensors, kept by install()


def install():
    """Makes ForkingPickler send CUDA tensors through dmm (dmm.torch.enable() calls it: every CUDA tensor
    is then dmm's); CPU tensors keep torch's reduction. Idempotent."""
    if _torch_reduce:
        return
    import torch
    from multiprocessing.reduction import ForkingPickler

    try:
        import torch.multiprocessing.reductions as reductions  # torch registers its reductions on import
    except ImportError:  # a torch without multiprocessing support (a stand-in of the tests): nothing to send
        return

    _torch_reduce.append(reductions.reduce_tensor)
    for cls in (torch.Tensor, torch.nn.parameter.Parameter):
        ForkingPickler.register(cls, reduce)


def reduce(tensor):
    """ForkingPickler's reduction: dmm's export for a CUDA tensor, torch's own for the others."""
    if not tensor.is_cuda or tensor.is_sparse or tensor.untyped_storage().data_ptr() == 0:
        return _torch_reduce[0](tensor)
    if tensor.requires_grad and not tensor.is_leaf:
        raise RuntimeError("dmm: a tensor that autograd computed (not a leaf, requires_grad) cannot go to another "
                           "process: its graph stays here; send tensor.detach() for its data")
    import torch

    desc, fds, lead = export(tensor)
    device = tensor.device.index
    parameter = isinstance(tensor, torch.nn.parameter.Parameter)
    return (rebuild, (desc, fds, lead, tensor.untyped_storage().nbytes(), device, tensor.dtype, tuple(tensor.size()),
                      tuple(tensor.stride()), tensor.storage_offset(), tensor.requires_grad, parameter))


def export(tensor):
    """(description, DupFd list, where the storage begins in the export) of the dmm pool block under
    `tensor`'s storage. Raises DmmError with dmm's sentence when dmm refuses (not a pool block: tag or
    graph memory, a view of a KV request or a buffer; a device that is not shareable)."""
    import torch
    from multiprocessing.reduction import DupFd

    device = tensor.device.index if tensor.device.index is not None else torch.cuda.current_device()
    torch.cuda.current_stream(device).synchronize()  # what was written before the send is there
    lib = _calls()
    ex, lead = _empty_export(), ctypes.c_uint64()
    ptr = ctypes.c_void_p(tensor.untyped_storage().data_ptr())
    _lib.check(lib.dmm_torch_export(device, ptr, 1, ctypes.byref(ex), ctypes.byref(lead)),
               "sending a CUDA tensor to another process (torch.multiprocessing)")
    try:
        fds = [DupFd(ex.fds[i]) for i in range(ex.nchunks)]  # multiprocessing's own copies, sent with the pickle
    finally:
        lib.dmm_torch_export_close(ctypes.byref(ex))
    desc = (ex.nchunks, ex.bytes, ex.granule, ex.device.tier, ex.device.index, ex.access, bytes(ex.token),
            tuple(ex.chunk_bytes[i] for i in range(ex.nchunks)))
    return desc, fds, lead.value


def rebuild(desc, fds, lead, nbytes, device, dtype, size, stride, offset, requires_grad, parameter=False):
    """The receiver's tensor over the sender's memory (see the module's docstring)."""
    import os

    import torch

    taken = [f.detach() for f in fds]
    try:
        nchunks, total, granule, tier, index, access, token, chunk_bytes = desc
        if not (isinstance(nchunks, int) and 0 < nchunks <= MAX_CHUNKS and len(chunk_bytes) == nchunks
                and len(taken) == nchunks and isinstance(token, bytes) and len(token) == 16):
            raise _lib.DmmError("dmm: a shared tensor's description is malformed (%r chunks); nothing was mapped"
                                % (nchunks,))
        ex = _empty_export()
        ex.nchunks, ex.bytes, ex.granule, ex.access = nchunks, total, granule, access
        ex.device.tier, ex.device.index = tier, index
        ctypes.memmove(ex.token, token, 16)
        for i in range(nchunks):
            ex.chunk_bytes[i], ex.fds[i] = chunk_bytes[i], taken[i]
        if not 0 <= lead <= total or not 0 < nbytes <= total - lead:
            raise _lib.DmmError("dmm: a shared tensor's storage [%d, +%d) lies outside its %d mapped bytes; nothing "
                                "was mapped" % (lead, nbytes, total))
        ptr = ctypes.c_void_p()
        _lib.check(_calls().dmm_torch_import(device, ctypes.byref(ex), 1, ctypes.byref(ptr)),
                   "receiving a CUDA tensor from another process (torch.multiprocessing)")
    finally:
        for fd in taken:
            os.close(fd)
    from torch.utils import dlpack

    claim = _dlpack.Claim(ptr.value, total, device, unimports=True)
    try:
        whole = dlpack.from_dlpack(claim.capsule(_dlpack.DEVICE_CUDA))  # 1-D uint8 over every mapped byte
    finally:
        claim.drop()  # the tensor holds it now: the mapping goes with the last view of it
    itemsize = torch.empty((), dtype=dtype).element_size()
    if lead % itemsize:
        raise _lib.DmmError("dmm: a shared tensor's storage begins %d bytes into its mapping, not a multiple of its "
                            "%d-byte elements" % (lead, itemsize))
    t = torch.empty((0,), dtype=dtype, device=whole.device)
    t.set_(whole.untyped_storage(), lead // itemsize + offset, size, stride)
    if parameter:
        return torch.nn.parameter.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad)
