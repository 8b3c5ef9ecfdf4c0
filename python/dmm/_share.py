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
is checked value by value there, as any untrusted one), wraps the storage's bytes in a claim whose
last holder unmaps the import (after the device's queued work: a kernel may still read it) and then
tells the sender, and returns a tensor of the same dtype, shape, strides and offset over the same
physical memory: writes on either side are seen on the other, once ordered (synchronize the stream
that wrote before the other side reads).

Lifetime, as torch's CUDA IPC keeps it: the sender holds the sent storage (an eventfd per send travels
with it) until the receiver has unmapped it, so `q.put(t); del t` is safe; sweep() lets go of the
acknowledged ones at every send and at dmm.torch.empty_cache(). A receiver that dies without
unmapping leaves its storage held in the sender. A tensor among a Process's arguments keeps its
descriptors open until the child is launched. Tag and graph memory is not sent (allocate what you
send outside tag scopes and captures), nor is a tensor received from another process (send a clone);
a device created with DMM_TORCH_SHAREABLE=0, or one that cannot export POSIX file descriptors,
refuses the send with dmm's sentence.
"""

import ctypes
import os
import sys
import threading
import weakref

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
    "dmm_torch_unimport": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p]),
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

    storage = tensor.untyped_storage()
    desc, fds, lead, ack = export(tensor)
    parameter = isinstance(tensor, torch.nn.parameter.Parameter)
    return (rebuild, (desc, fds, lead, storage.nbytes(), tensor.device.index, tensor.dtype, tuple(tensor.size()),
                      tuple(tensor.stride()), tensor.storage_offset(), tensor.requires_grad, parameter, ack))


_sent = []  # [eventfd, the storage kept alive, acknowledged]: storages a receiver may still map
_sent_lock = threading.Lock()


def sweep():
    """Lets go of every sent storage whose receiver has unmapped it (its eventfd counted the release).
    Called at every send and by dmm.torch.empty_cache(); returns how many are still held."""
    with _sent_lock:
        keep = []
        for entry in _sent:
            try:
                os.eventfd_read(entry[0])
                entry[2] = True
            except BlockingIOError:
                pass
            if entry[2]:
                os.close(entry[0])
            else:
                keep.append(entry)
        _sent[:] = keep
        return len(_sent)


def _hold_until_launched(fds):
    """Under a spawning Popen (a tensor among a Process's arguments) DupFd only names the descriptor:
    it must stay open until the child is launched; closed when that Popen goes."""
    from multiprocessing import context

    popen = context.get_spawning_popen()
    if popen is None:
        return False  # multiprocessing's resource sharer keeps its own copies: ours may close now
    kept = [os.dup(fd) for fd in fds]
    weakref.finalize(popen, lambda: [os.close(fd) for fd in kept])
    return kept


def export(tensor):
    """(description, DupFd list, where the storage begins in the export, the acknowledgement's DupFd) of
    the dmm pool block under `tensor`'s storage; the storage is held here until the receiver unmapped it.
    Raises DmmError with dmm's sentence when dmm refuses (not a pool block: tag or graph memory, a view
    of a KV request or a buffer, a tensor received from another process; a device that is not
    shareable)."""
    import torch
    from multiprocessing.reduction import DupFd

    if not hasattr(os, "eventfd"):
        raise _lib.DmmError("dmm: sending a CUDA tensor to another process needs Python >= 3.10 (os.eventfd, by "
                            "which the receiver says it let go); this is Python %d.%d" % sys.version_info[:2])
    sweep()
    device = tensor.device.index if tensor.device.index is not None else torch.cuda.current_device()
    torch.cuda.current_stream(device).synchronize()  # what was written before the send is there
    lib = _calls()
    ex, lead = _empty_export(), ctypes.c_uint64()
    storage = tensor.untyped_storage()
    rc = lib.dmm_torch_export(device, ctypes.c_void_p(storage.data_ptr()), 1, ctypes.byref(ex), ctypes.byref(lead))
    _lib.check(rc, "sending a CUDA tensor to another process (torch.multiprocessing; a tensor received from "
                   "another process is not sent on: send a clone)")
    ack = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    try:
        raw = [ex.fds[i] for i in range(ex.nchunks)] + [ack]
        kept = _hold_until_launched(raw)
        dup = [DupFd(fd) for fd in (kept or raw)]
    except BaseException:
        os.close(ack)
        raise
    finally:
        lib.dmm_torch_export_close(ctypes.byref(ex))
    with _sent_lock:
        _sent.append([ack, storage, False])
    desc = (ex.nchunks, ex.bytes, ex.granule, ex.device.tier, ex.device.index, ex.access, bytes(ex.token),
            tuple(ex.chunk_bytes[i] for i in range(ex.nchunks)))
    return desc, dup[:-1], lead.value, dup[-1]


def rebuild(desc, fds, lead, nbytes, device, dtype, size, stride, offset, requires_grad, parameter=False, ack=None):
    """The receiver's tensor over the sender's memory (see the module's docstring)."""
    import torch
    from torch.utils import dlpack

    taken = []
    try:
        for f in fds:
            taken.append(f.detach())
        told = ack.detach() if ack is not None else -1
    except BaseException:
        for fd in taken:
            os.close(fd)
        raise
    ptr = ctypes.c_void_p()
    try:
        nchunks, total, granule, tier, index, access, token, chunk_bytes = desc
        if not (isinstance(nchunks, int) and 0 < nchunks <= MAX_CHUNKS and len(chunk_bytes) == nchunks
                and len(taken) == nchunks and isinstance(token, bytes) and len(token) == 16):
            raise _lib.DmmError("dmm: a shared tensor's description is malformed (%r chunks); nothing was mapped"
                                % (nchunks,))
        if not (isinstance(lead, int) and isinstance(nbytes, int) and 0 <= lead <= total and 0 < nbytes <= total - lead):
            raise _lib.DmmError("dmm: a shared tensor's storage [%r, +%r) lies outside its %d mapped bytes; nothing "
                                "was mapped" % (lead, nbytes, total))
        ex = _empty_export()
        ex.nchunks, ex.bytes, ex.granule, ex.access = nchunks, total, granule, access
        ex.device.tier, ex.device.index = tier, index
        ctypes.memmove(ex.token, token, 16)
        for i in range(nchunks):
            ex.chunk_bytes[i], ex.fds[i] = chunk_bytes[i], taken[i]
        _lib.check(_calls().dmm_torch_import(device, ctypes.byref(ex), 1, ctypes.byref(ptr)),
                   "receiving a CUDA tensor from another process (torch.multiprocessing)")
    except BaseException:
        if told >= 0:
            os.close(told)
        raise
    finally:
        for fd in taken:
            os.close(fd)
    try:  # the claim covers the import; its last holder unmaps it, then tells the sender
        claim = _dlpack.Claim(ptr.value, total, device, unimports=True)
    except BaseException:
        _calls().dmm_torch_unimport(device, ptr)
        if told >= 0:
            os.close(told)
        raise
    if told >= 0:
        claim.notify(told)
    try:
        storage = dlpack.from_dlpack(claim.capsule(_dlpack.DEVICE_CUDA, lead, nbytes))  # uint8, the storage's bytes
    finally:
        claim.drop()  # the tensor holds it now
    t = torch.empty((0,), dtype=dtype, device=storage.device)
    t.set_(storage.untyped_storage(), offset, size, stride)
    if parameter:
        return torch.nn.parameter.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad)
