# SPDX-License-Identifier: Apache-2.0
"""dmm._dlpack, the DLPack capsules that dmm.kv's views (and any framework's) are made from, checked
without a GPU: this test is the consumer, reading the capsule's struct through ctypes as DLPack's
consumers do, on host memory (device type CPU).

What is proven: the capsule is named "dltensor" and describes the address, the byte count, the device
(type and index), a 1-D uint8 compact tensor; a consumer that renames it "used_dltensor" and calls the
deleter releases it exactly once, and the capsule's own end then does nothing more; a capsule never
consumed releases its tensor when it goes; bad addresses and sizes are refused; where numpy is
importable, numpy.from_dlpack reads the bytes in place and its array's end releases the view.
Exit 0 = all held, 1 = a check failed.
"""

import ctypes
import gc
import sys

from _checks import check, failures, raises
from dmm import _dlpack

pyapi = ctypes.pythonapi
get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", pyapi))
set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", pyapi))
get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", pyapi))

buf = (ctypes.c_uint8 * 4096)(*range(256), *([7] * 3840))
released = []

# --- a consumer takes the capsule, reads it, and deletes it ---
cap = _dlpack.capsule(ctypes.addressof(buf), 4096, _dlpack.DEVICE_CUDA, 3, on_release=lambda: released.append("a"))
check(get_name(cap) == b"dltensor", "the capsule is named dltensor (is %r)" % get_name(cap))
m = ctypes.cast(get_pointer(cap, b"dltensor"), ctypes.POINTER(_dlpack._Managed)).contents
t = m.dl_tensor
check(t.data == ctypes.addressof(buf) and t.byte_offset == 0, "it points at the memory")
check((t.device.device_type, t.device.device_id) == (2, 3), "it names the device: CUDA, index 3")
check(t.ndim == 1 and t.shape[0] == 4096 and t.strides[0] == 1, "a compact 1-D tensor of 4096 elements (stride 1)")
check((t.dtype.code, t.dtype.bits, t.dtype.lanes) == (1, 8, 1), "of uint8")
check(_dlpack.live() == 1 and released == [], "live until deleted; nothing released yet")
set_name(cap, b"used_dltensor")
m.deleter(ctypes.pointer(m))
check(released == ["a"] and _dlpack.live() == 0, "the consumer's deleter releases it once")
del cap, m, t
gc.collect()
check(released == ["a"], "a consumed capsule's end releases nothing more")

# --- a capsule nobody consumed releases its tensor when it goes ---
cap = _dlpack.capsule(ctypes.addressof(buf), 16, _dlpack.DEVICE_CPU, 0, on_release=lambda: released.append("b"))
check(_dlpack.live() == 1, "a second capsule is live")
del cap
gc.collect()
check(released == ["a", "b"] and _dlpack.live() == 0, "an unconsumed capsule releases its tensor when it goes")

# --- bad input ---
for args in [(0, 16), (ctypes.addressof(buf), -1), (ctypes.addressof(buf), 1 << 63), (1.5, 16)]:
    ok, msg = raises(ValueError, lambda: _dlpack.capsule(args[0], args[1], _dlpack.DEVICE_CPU, 0), "DLPack tensor")
    check(ok, "capsule(%r, %r) is refused: %s" % (args[0], args[1], msg))
check(_dlpack.live() == 0, "a refused capsule leaves nothing live")

# --- a real consumer, where numpy is importable ---
try:
    import numpy
except ImportError:
    numpy = None
    print("SKIP numpy.from_dlpack: numpy is not importable by %s" % sys.executable)
if numpy is not None and hasattr(numpy, "from_dlpack"):
    class Host:
        def __dlpack__(self, stream=None):
            return _dlpack.capsule(ctypes.addressof(buf), 4096, _dlpack.DEVICE_CPU, 0,
                                   on_release=lambda: released.append("np"))

        def __dlpack_device__(self):
            return (_dlpack.DEVICE_CPU, 0)

    arr = numpy.from_dlpack(Host())
    check(arr.dtype == numpy.uint8 and arr.shape == (4096,), "numpy reads a uint8 array of 4096")
    check(int(arr[255]) == 255 and int(arr[300]) == 7, "in place: the bytes of the memory")
    buf[300] = 9
    check(int(arr[300]) == 9, "no copy: a write to the memory shows in the array")
    check(released == ["a", "b"], "not released while the array lives")
    del arr
    gc.collect()
    check(released == ["a", "b", "np"] and _dlpack.live() == 0, "the array's end releases the view")

sys.exit(1 if failures else 0)
