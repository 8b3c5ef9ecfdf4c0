# SPDX-License-Identifier: Apache-2.0
"""dmm.buffer (python/dmm/_buffer.py) without a GPU, with this build's libdmm_torch.so (DMM_LIB): the
holders that decide when a buffer's memory goes, over real host memory (an anonymous mmap, under a claim
that does not own it) with this test as the DLPack consumer; the argument checks; and the device path:
on a machine without a GPU the allocation is refused with a DmmError naming the size and the device.

What is proven: the claim goes once, only after the Buffer and every capsule it exported are gone, in
either order, and a capsule never consumed gives its hold back when it goes; __dlpack_device__ names
the device, a capsule describes the whole buffer, dl_device elsewhere and copy=True are refused (a
BufferError), stream=0 is refused as DLPack asks; a host buffer has no __cuda_array_interface__ and a
CUDA one names its stream; a Buffer is not copied or pickled; bad sizes, devices ('cpu', 'cuda:x', -1)
and streams are refused before anything is allocated, and 'cuda', 'cuda:N' and indices are taken.
Exit 0 = all held, 1 = a check failed, 77 = no DMM_LIB (run it through CTest).
"""

import copy
import ctypes
import gc
import mmap
import os
import pickle
import sys

from _checks import check, failures, raises

if not os.environ.get("DMM_LIB"):
    print("SKIP: needs this build's unsanitized libdmm_torch.so in DMM_LIB (run through CTest)")
    sys.exit(77)

import dmm  # noqa: E402
from dmm import _buffer, _dlpack  # noqa: E402

pyapi = ctypes.pythonapi
get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", pyapi))
set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", pyapi))
DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

page = mmap.mmap(-1, 1 << 16)
base = ctypes.addressof(ctypes.c_char.from_buffer(page))
start = _dlpack.live()


def host_buffer(device_type=_dlpack.DEVICE_CPU, stream=0):
    return dmm.Buffer._over(_dlpack.Claim(base, 1 << 16, 0), device_type, stream)


def consume(cap):
    """What a DLPack consumer does: take the struct, rename the capsule; returns its data and deleter call."""
    managed = get_pointer(cap, b"dltensor")
    set_name(cap, b"used_dltensor")
    data = ctypes.c_void_p.from_address(managed).value
    deleter = DELETER(ctypes.c_void_p.from_address(managed + 56).value)  # after the 48-byte DLTensor and manager_ctx
    return data, lambda: deleter(managed)


# --- the Buffer goes first, then the consumer ---
buf = host_buffer()
check(buf.__dlpack_device__() == (_dlpack.DEVICE_CPU, 0), "__dlpack_device__ names the device")
data, delete = consume(buf.__dlpack__())
check(data == base, "a capsule points at the buffer")
del buf
gc.collect()
check(_dlpack.live() == start + 1, "the memory stays claimed while a consumer holds it")
delete()
check(_dlpack.live() == start, "and the claim goes once the consumer lets go")

# --- the consumer goes first, then the Buffer; an unconsumed capsule gives its hold back ---
buf = host_buffer()
data, delete = consume(buf.__dlpack__())
delete()
cap = buf.__dlpack__()
del cap
gc.collect()
check(_dlpack.live() == start + 1 and buf._claim.holders() == 1, "a live Buffer keeps its claim, alone")
del buf
gc.collect()
check(_dlpack.live() == start, "the Buffer's end gives the claim back, once")

# --- refusals ---
buf = host_buffer()
for kwargs, fragment in (({"dl_device": (2, 0)}, "lives on"), ({"copy": True}, "without a copy")):
    ok, msg = raises(BufferError, lambda: buf.__dlpack__(**kwargs), fragment)
    check(ok, "__dlpack__(%s) is refused: %s" % (kwargs, msg))
check(not hasattr(buf, "__cuda_array_interface__"), "a host buffer has no __cuda_array_interface__")
for what, fn in (("copy.copy", copy.copy), ("copy.deepcopy", copy.deepcopy), ("pickle", pickle.dumps)):
    ok, msg = raises(TypeError, lambda: fn(buf), "not copied")
    check(ok, "%s of a Buffer is refused: %s" % (what, msg))
cuda_view = host_buffer(_dlpack.DEVICE_CUDA, stream=7)
ok, msg = raises(BufferError, lambda: cuda_view.__dlpack__(stream=0), "ambiguous")
check(ok, "__dlpack__(stream=0) is refused: %s" % msg)
cai = cuda_view.__cuda_array_interface__
check(cai["data"] == (base, False) and cai["shape"] == (1 << 16,) and cai["typestr"] == "|u1" and cai["stream"] == 7,
      "__cuda_array_interface__ v3 names the memory, its size, uint8 and the buffer's stream")
del cuda_view, buf
gc.collect()
check(_dlpack.live() == start, "refused exports leave no claim behind")

for device, want in ((None, 0), (2, 2), ("cuda", 0), ("cuda:3", 3)):
    check(_buffer._device_index(device) == want, "device %r is CUDA device %d" % (device, want))
for args, kwargs, error, fragment in (((0,), {}, ValueError, "nbytes"), ((1 << 63,), {}, ValueError, "nbytes"),
                                      ((True,), {}, ValueError, "nbytes"), ((4096,), {"device": -1}, ValueError, "device"),
                                      ((4096,), {"device": "cpu"}, ValueError, "device"),
                                      ((4096,), {"device": "cuda:x"}, ValueError, "device"),
                                      ((4096,), {"stream": "s"}, TypeError, "stream")):
    ok, msg = raises(error, lambda: dmm.buffer(*args, **kwargs), fragment)
    check(ok, "dmm.buffer(%s, %s) raises %s naming %s: %s" % (args, kwargs, error.__name__, fragment, msg))

# --- the device path ---
try:
    gpu = dmm.buffer(4096, device="cuda:0")
except dmm.DmmError as e:
    check("4096 bytes" in str(e) and "device 0" in str(e), "without a GPU the allocation is refused: %s" % e)
    check(_dlpack.live() == start, "a refused allocation leaves no claim")
else:  # a GPU: the memory is there, described, and goes with the Buffer
    check(gpu.ptr != 0 and gpu.__cuda_array_interface__["data"][0] == gpu.ptr, "a GPU buffer at %#x" % gpu.ptr)
    del gpu
    gc.collect()
    check(_dlpack.live() == start, "its claim goes with it")

sys.exit(1 if failures else 0)
