# SPDX-License-Identifier: Apache-2.0
"""dmm._dlpack — raw memory as a DLPack capsule, with ctypes only (no numpy, no compiled extension).

What it owns: the DLManagedTensor structs of the capsules it made and not yet deleted, and the one
deleter and capsule destructor every capsule shares. A capsule describes a 1-D uint8 tensor (stride 1)
of `nbytes` at `ptr` on a named device (DLPack's device types: 1 CPU, 2 CUDA), so the consumer never guesses the
device from the pointer (torch's __cuda_array_interface__ path asks the driver, which does not know
reserved but unmapped address space, and needs numpy). The consumer takes it with
torch.utils.dlpack.from_dlpack (or numpy.from_dlpack through an object's __dlpack__) and calls the
deleter when its last tensor goes; a capsule never consumed is deleted with the capsule itself.

Invariants: `on_release` runs exactly once per capsule, from the deleter (the consumer's thread, with
the GIL taken by ctypes); a struct stays in _LIVE, so its memory stays valid, until its deleter ran.
The memory itself is never freed here: on_release tells its owner that this view is gone.
"""

import ctypes
import threading

DEVICE_CPU = 1
DEVICE_CUDA = 2
_NAME = b"dltensor"
_USED = b"used_dltensor"


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_lock = threading.Lock()
_LIVE = {}  # address of a _Managed -> (the struct, its shape array, on_release)

# Own prototypes (not ctypes.pythonapi's shared ones, whose argtypes other code may set). The destructor's
# calls take the capsule as a plain address: it is being deallocated, and must not be made an object again.
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def _delete(managed):
    address = ctypes.cast(managed, ctypes.c_void_p).value
    with _lock:
        entry = _LIVE.pop(address, None)
    if entry is not None and entry[2] is not None:
        entry[2]()


_deleter = _DELETER(_delete)


def _destroy(capsule):
    # a capsule that no consumer renamed to "used_dltensor" still owns its tensor
    if _capsule_is_valid(capsule, _NAME):
        _delete(ctypes.cast(_capsule_pointer(capsule, _NAME), ctypes.POINTER(_Managed)))


_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_destructor = _DESTRUCTOR(_destroy)


def live():
    """How many capsules' tensors are not deleted yet (tests)."""
    with _lock:
        return len(_LIVE)


def capsule(ptr, nbytes, device_type, device_id, on_release=None):
    """A DLPack capsule of `nbytes` bytes at `ptr` on (device_type, device_id), as a 1-D uint8 tensor;
    on_release() runs once, when the consumer deletes it (or the unconsumed capsule goes)."""
    if not isinstance(ptr, int) or not isinstance(nbytes, int) or ptr <= 0 or nbytes < 0 or nbytes >= 1 << 63:
        raise ValueError("a DLPack tensor needs an address above 0 and 0 to 2**63 - 1 bytes, not %r, %r"
                         % (ptr, nbytes))
    shape = (ctypes.c_int64 * 2)(nbytes, 1)  # the shape, then the stride (explicit: some consumers predate NULL)
    m = _Managed()
    m.dl_tensor.data = ptr
    m.dl_tensor.device = _Device(device_type, device_id)
    m.dl_tensor.ndim = 1
    m.dl_tensor.dtype = _DataType(1, 8, 1)  # kDLUInt, 8 bits, 1 lane
    m.dl_tensor.shape = shape
    m.dl_tensor.strides = ctypes.cast(ctypes.byref(shape, 8), ctypes.POINTER(ctypes.c_int64))
    m.dl_tensor.byte_offset = 0
    m.manager_ctx = None
    m.deleter = _deleter
    address = ctypes.addressof(m)
    with _lock:
        _LIVE[address] = (m, shape, on_release)
    return _capsule_new(address, _NAME, ctypes.cast(_destructor, ctypes.c_void_p))
