# SPDX-License-Identifier: Apache-2.0
"""dmm._dlpack — claims on memory and DLPack capsules over them (the C side: adapters/torch/dlpack.c in
libdmm_torch.so; contract: dmm_torch.h, "Claims and DLPack"). dmm.buffer and dmm.kv's views stand on it.

A Claim is memory with a count of holders: its creator and each DLPack tensor made from it that no
consumer has deleted yet. The memory is freed once, with the last holder, when the claim owns it
(dmm.buffer's); a claim that does not (a KV request's range) only counts its views. The DLPack tensor
and its deleter are plain C, so a consumer may delete one on any thread, with or without the GIL, while
an exception is pending or at interpreter exit: no Python runs in the deleter. A capsule describes a 1-D
uint8 tensor (stride 1) over the whole claim on a named device (DLPack's device types: 1 CPU, 2 CUDA),
so the consumer never guesses the device from the pointer.

Invariants: drop() gives the creator's hold back once (a second call does nothing); a capsule never
consumed gives its hold back when it goes (the C destructor).
"""

import ctypes

from . import _lib

DEVICE_CPU = 1
DEVICE_CUDA = 2
_NAME = b"dltensor"  # module-wide: the capsule keeps the pointer to these bytes

_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))

_SIGNATURES = {
    "dmm_torch_claim_create": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_void_p,
                                              ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]),
    "dmm_torch_claim_drop": (None, [ctypes.c_void_p]),
    "dmm_torch_claim_notify": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "dmm_torch_claim_dlpack_range": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                                                       ctypes.c_int]),
    "dmm_torch_claim_holders": (ctypes.c_uint64, [ctypes.c_void_p]),
    "dmm_torch_claims_live": (ctypes.c_uint64, []),
    "dmm_torch_claim_dlpack": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]),
}


def _calls():
    return _lib.bind("dlpack", _SIGNATURES)


def live():
    """Claims of the process not gone yet."""
    return int(_calls().dmm_torch_claims_live())


class Claim:
    """`nbytes` at `ptr` on device `device` (ordered on `stream`); with owns=True the memory is
    dmm_torch_malloc's and goes with the last holder; with unimports=True it is another process's
    memory mapped here (dmm_torch_import), unmapped with the last holder."""

    def __init__(self, ptr, nbytes, device, stream=0, owns=False, unimports=False):
        if isinstance(ptr, bool) or not isinstance(ptr, int) or ptr <= 0 or ptr >= 1 << 64:
            raise ValueError("a claim needs an address from 1 to 2**64 - 1, not %r" % (ptr,))
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 0 < nbytes < 1 << 63:
            raise ValueError("a claim needs 1 to 2**63 - 1 bytes, not %r" % (nbytes,))
        self._lib = _calls()
        handle = ctypes.c_void_p()
        release = 2 if unimports else 1 if owns else 0  # DMM_TORCH_CLAIM_UNIMPORTS, _FREES, _BORROWS
        if self._lib.dmm_torch_claim_create(ptr, nbytes, device, stream or None, release,
                                            ctypes.byref(handle)) != 0:
            raise MemoryError("dmm: no host memory for a claim on %d bytes at %#x" % (nbytes, ptr))
        self._c, self.ptr, self.nbytes, self.device = handle.value, ptr, nbytes, device
        self._destructor = ctypes.cast(self._lib.dmm_torch_dlpack_capsule_destructor, ctypes.c_void_p).value

    def holders(self):
        """The creator (until drop) and each DLPack tensor no consumer has deleted yet."""
        return int(self._lib.dmm_torch_claim_holders(self._c)) if self._c is not None else 0

    def capsule(self, device_type, offset=0, nbytes=None):
        """A "dltensor" capsule over the claim's [offset, offset + nbytes) (default: all of it), holding the
        claim until its consumer deletes it."""
        if self._c is None:
            raise _lib.DmmError("dmm: this memory was given back; it has no DLPack view any more")
        nbytes = self.nbytes - offset if nbytes is None else nbytes
        if not (0 <= offset and 0 < nbytes <= self.nbytes - offset):
            raise ValueError("dmm: a view of [%d, +%d) leaves the claim's %d bytes" % (offset, nbytes, self.nbytes))
        managed = self._lib.dmm_torch_claim_dlpack_range(self._c, offset, nbytes, device_type)
        if not managed:
            raise MemoryError("dmm: no host memory for a DLPack tensor")
        return _capsule_new(managed, _NAME, self._destructor)

    def notify(self, fd):
        """The claim takes descriptor fd and writes one 8-byte count of 1 there (then closes it) once its
        last holder has released the memory (dmm._share tells the sender so)."""
        if self._c is None or self._lib.dmm_torch_claim_notify(self._c, fd) != 0:
            raise _lib.DmmError("dmm: a claim already given back takes no descriptor to tell")

    def drop(self):
        """Gives the creator's hold back (the memory goes now if nothing else holds it)."""
        c, self._c = self._c, None
        if c is not None:
            self._lib.dmm_torch_claim_drop(c)
