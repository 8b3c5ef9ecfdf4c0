# SPDX-License-Identifier: Apache-2.0
"""dmm._dlpack (claims and DLPack capsules; the C side adapters/torch/dlpack.c in this build's
libdmm_torch.so, DMM_LIB) without a GPU: this test is the consumer, reading the capsule's struct through
ctypes as DLPack's consumers do, over host memory; and numpy.from_dlpack where numpy is importable.

What is proven: the capsule is named "dltensor" and describes the address, the byte count, the device
(type and index), a 1-D uint8 tensor of stride 1; it holds the claim until a consumer that renamed it
"used_dltensor" calls the deleter (once), and the capsule's end then does nothing more; a capsule never
consumed gives its hold back when it goes; drop() gives the creator's hold back once and the claim goes with its last holder; bad
addresses and sizes are refused; numpy reads the bytes in place and its array's end releases the view.
Exit 0 = all held, 1 = a check failed, 77 = no DMM_LIB (run it through CTest).
"""

import ctypes
import gc
import os
import sys

from _checks import check, failures, raises

if not os.environ.get("DMM_LIB"):
    print("SKIP: needs this build's unsanitized libdmm_torch.so in DMM_LIB (run through CTest)")
    sys.exit(77)

from dmm import _dlpack  # noqa: E402


class Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", Device), ("ndim", ctypes.c_int32), ("dtype", DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class Managed(ctypes.Structure):
    pass


Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(Managed))
Managed._fields_ = [("dl_tensor", Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", Deleter)]

pyapi = ctypes.pythonapi
get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", pyapi))
set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", pyapi))
get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", pyapi))

buf = (ctypes.c_uint8 * 4096)(*range(256), *([7] * 3840))
start = _dlpack.live()

# --- a consumer takes the capsule, reads it, and deletes it ---
claim = _dlpack.Claim(ctypes.addressof(buf), 4096, 3)
cap = claim.capsule(_dlpack.DEVICE_CUDA)
check(get_name(cap) == b"dltensor", "the capsule is named dltensor (is %r)" % get_name(cap))
m = ctypes.cast(get_pointer(cap, b"dltensor"), ctypes.POINTER(Managed)).contents
t = m.dl_tensor
check(t.data == ctypes.addressof(buf) and t.byte_offset == 0, "it points at the memory")
check((t.device.device_type, t.device.device_id) == (2, 3), "it names the device: CUDA, index 3")
check(t.ndim == 1 and t.shape[0] == 4096 and t.strides[0] == 1, "a 1-D tensor of 4096 elements, stride 1")
check((t.dtype.code, t.dtype.bits, t.dtype.lanes) == (1, 8, 1), "of uint8")
check(claim.holders() == 2 and _dlpack.live() == start + 1, "the tensor holds the claim beside its creator")
set_name(cap, b"used_dltensor")
deleter = m.deleter
deleter(ctypes.pointer(m))
check(claim.holders() == 1, "the consumer's deleter gives its hold back")
del cap, m, t
gc.collect()
check(claim.holders() == 1, "a consumed capsule's end gives nothing more back")

# --- a capsule nobody consumed gives its hold back when it goes ---
cap = claim.capsule(_dlpack.DEVICE_CPU)
check(claim.holders() == 2, "a second capsule holds the claim")
del cap
gc.collect()
check(claim.holders() == 1, "an unconsumed capsule gives its hold back when it goes")

# --- the claim goes with its last holder ---
cap = claim.capsule(_dlpack.DEVICE_CPU)
claim.drop()
claim.drop()  # a second drop does nothing
check(_dlpack.live() == start + 1, "dropped by its creator, the claim lives while a capsule holds it")
del cap
gc.collect()
check(_dlpack.live() == start, "and goes with the capsule")
ok, msg = raises(Exception, lambda: claim.capsule(_dlpack.DEVICE_CPU), "given back")
check(ok, "a dropped claim makes no capsule: %s" % msg)

# --- bad input ---
for args in [(0, 16), (ctypes.addressof(buf), 0), (ctypes.addressof(buf), 1 << 63), (1.5, 16)]:
    ok, msg = raises(ValueError, lambda: _dlpack.Claim(args[0], args[1], 0), "a claim needs")
    check(ok, "Claim(%r, %r) is refused: %s" % (args[0], args[1], msg))
check(_dlpack.live() == start, "a refused claim leaves nothing live")

# --- a real consumer, where numpy is importable ---
try:
    import numpy
except ImportError:
    numpy = None
    print("SKIP numpy.from_dlpack: numpy is not importable by %s" % sys.executable)
if numpy is not None and hasattr(numpy, "from_dlpack"):
    host = _dlpack.Claim(ctypes.addressof(buf), 4096, 0)

    class Host:
        def __dlpack__(self, stream=None):
            return host.capsule(_dlpack.DEVICE_CPU)

        def __dlpack_device__(self):
            return (_dlpack.DEVICE_CPU, 0)

    arr = numpy.from_dlpack(Host())
    check(arr.dtype == numpy.uint8 and arr.shape == (4096,), "numpy reads a uint8 array of 4096")
    check(int(arr[255]) == 255 and int(arr[300]) == 7, "in place: the bytes of the memory")
    buf[300] = 9
    check(int(arr[300]) == 9, "no copy: a write to the memory shows in the array")
    check(host.holders() == 2, "the array holds the claim")
    del arr
    gc.collect()
    check(host.holders() == 1, "the array's end gives its hold back")
    host.drop()
    check(_dlpack.live() == start, "nothing is left")

sys.exit(1 if failures else 0)
