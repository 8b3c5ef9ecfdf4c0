# SPDX-License-Identifier: Apache-2.0
"""dmm.buffer (python/dmm/_buffer.py) without a GPU: the claims that decide when a buffer's memory goes,
over real host memory (an anonymous mmap) with this test and, where importable, numpy as the DLPack
consumers; the argument checks; and, with this build's libdmm_torch.so (DMM_LIB), the device path: on
a machine without a GPU the allocation is refused with a DmmError naming the size and the device.

What is proven: the memory is freed once, only after the Buffer and every capsule it exported are gone,
in either order, and a capsule never consumed gives its claim back when it goes; __dlpack_device__ names
the device, a capsule describes the whole buffer, dl_device elsewhere and copy=True are refused (a
BufferError), stream=0 is refused as DLPack asks; a host buffer has no __cuda_array_interface__; bad
sizes, devices and streams are refused before anything is allocated.
Exit 0 = all held, 1 = a check failed.
"""

import ctypes
import gc
import mmap
import os
import sys

from _checks import check, failures, raises
import dmm
from dmm import _dlpack

pyapi = ctypes.pythonapi
get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", pyapi))
set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", pyapi))

page = mmap.mmap(-1, 1 << 16)
base = ctypes.addressof(ctypes.c_char.from_buffer(page))
freed = []


def host_buffer():
    return dmm.Buffer._over(base, 1 << 16, _dlpack.DEVICE_CPU, 0, free=lambda: freed.append(1))


def consume(cap):
    """What a DLPack consumer does: take the struct, rename the capsule; returns the deleter's call."""
    m = ctypes.cast(get_pointer(cap, b"dltensor"), ctypes.POINTER(_dlpack._Managed)).contents
    set_name(cap, b"used_dltensor")
    return m, lambda: m.deleter(ctypes.pointer(m))


# --- the Buffer goes first, then the consumer ---
buf = host_buffer()
check(buf.__dlpack_device__() == (_dlpack.DEVICE_CPU, 0), "__dlpack_device__ names the device")
m, delete = consume(buf.__dlpack__())
check(m.dl_tensor.data == base and m.dl_tensor.shape[0] == 1 << 16, "a capsule describes the whole buffer")
del buf
gc.collect()
check(freed == [], "the memory stays while a consumer holds it")
delete()
check(freed == [1], "and goes once the consumer lets go")

# --- the consumer goes first, then the Buffer; an unconsumed capsule gives its claim back ---
buf = host_buffer()
m, delete = consume(buf.__dlpack__())
delete()
cap = buf.__dlpack__()
check(freed == [1], "a live Buffer keeps its memory")
del cap
gc.collect()
check(freed == [1], "an unconsumed capsule's end frees nothing while the Buffer lives")
del buf
gc.collect()
check(freed == [1, 1], "the Buffer's end frees it, once")

# --- refusals ---
buf = host_buffer()
for kwargs, fragment in (({"dl_device": (2, 0)}, "lives on"), ({"copy": True}, "without a copy")):
    ok, msg = raises(BufferError, lambda: buf.__dlpack__(**kwargs), fragment)
    check(ok, "__dlpack__(%s) is refused: %s" % (kwargs, msg))
check(not hasattr(buf, "__cuda_array_interface__"), "a host buffer has no __cuda_array_interface__")
cuda_view = dmm.Buffer._over(base, 4096, _dlpack.DEVICE_CUDA, 1, free=lambda: freed.append(2), stream=7)
ok, msg = raises(BufferError, lambda: cuda_view.__dlpack__(stream=0), "ambiguous")
check(ok, "__dlpack__(stream=0) is refused: %s" % msg)
cai = cuda_view.__cuda_array_interface__
check(cai["data"] == (base, False) and cai["shape"] == (4096,) and cai["typestr"] == "|u1" and cai["stream"] == 7,
      "__cuda_array_interface__ v3 names the memory, its size, uint8 and the buffer's stream")
del cuda_view, buf
gc.collect()
check(sorted(freed) == [1, 1, 1, 2] and _dlpack.live() == 0, "refused exports leave no claim behind (freed %s, live %d)" % (freed, _dlpack.live()))

for args, kwargs, error, fragment in (((0,), {}, ValueError, "nbytes"), ((1 << 63,), {}, ValueError, "nbytes"),
                                      ((True,), {}, ValueError, "nbytes"), ((4096,), {"device": -1}, ValueError, "device"),
                                      ((4096,), {"device": "cpu"}, ValueError, "device"),
                                      ((4096,), {"stream": "s"}, TypeError, "stream")):
    ok, msg = raises(error, lambda: dmm.buffer(*args, **kwargs), fragment)
    check(ok, "dmm.buffer(%s, %s) raises %s naming %s: %s" % (args, kwargs, error.__name__, fragment, msg))

# --- the device path, with this build's library ---
if os.environ.get("DMM_LIB"):
    try:
        gpu = dmm.buffer(4096, device=0)
    except dmm.DmmError as e:
        check("4096 bytes" in str(e) and "device 0" in str(e), "without a GPU the allocation is refused: %s" % e)
    else:  # a GPU: the memory is there, described, and goes with the Buffer
        check(gpu.ptr != 0 and gpu.__cuda_array_interface__["data"][0] == gpu.ptr, "a GPU buffer at %#x" % gpu.ptr)
        del gpu
else:
    print("SKIP the device path: DMM_LIB is not set (run through CTest with an unsanitized build)")

sys.exit(1 if failures else 0)
