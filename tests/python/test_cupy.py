# SPDX-License-Identifier: Apache-2.0
"""dmm.cupy (python/dmm/cupy.py) without a GPU or CuPy: over a stand-in `cupy` module (CuPy's allocator
hooks: set_allocator, Device, get_current_stream, UnownedMemory, MemoryPointer, OutOfMemoryError),
with this build's libdmm_torch.so (DMM_LIB) behind dmm.Buffer.

What is proven: enable() installs dmm's allocator and disable() gives CuPy its own pool back; with
DMM_DISABLE=1 enable() changes nothing; an allocation asks dmm for the size on CuPy's current device and
stream (here refused: no GPU), and a refusal for memory (budget or device: dmm statuses 2 and 3) becomes
CuPy's OutOfMemoryError naming the size while any other stays a DmmError with dmm's sentence; a CuPy
that is not importable is said in a DmmError.
Exit 0 = all held, 1 = a check failed, 77 = no DMM_LIB (run it through CTest).
"""

import os
import sys
import types

from _checks import check, failures, raises

if not os.environ.get("DMM_LIB"):
    print("SKIP: needs this build's unsanitized libdmm_torch.so in DMM_LIB (run through CTest)")
    sys.exit(77)

# ---- a stand-in for CuPy's allocator interface ----
calls = []
cupy = types.ModuleType("cupy")
cupy.cuda = types.SimpleNamespace()
cupy.cuda.memory = types.SimpleNamespace()


class OutOfMemoryError(MemoryError):
    def __init__(self, size, total, limit=0):
        super().__init__("out of memory allocating %d bytes" % size)
        self.size = size


cupy.cuda.memory.OutOfMemoryError = OutOfMemoryError
cupy.cuda.Device = lambda: types.SimpleNamespace(id=0)
cupy.cuda.get_current_stream = lambda: types.SimpleNamespace(ptr=0)
cupy.cuda.Memory = lambda size: ("Memory", size)
cupy.cuda.UnownedMemory = lambda ptr, size, owner, device: ("Unowned", ptr, size, owner, device)
cupy.cuda.MemoryPointer = lambda mem, offset: ("Pointer", mem, offset)
own_pool = types.SimpleNamespace(malloc=lambda size: ("own", size))
cupy.get_default_memory_pool = lambda: own_pool
cupy.cuda.set_allocator = lambda fn: calls.append(fn)
sys.modules["cupy"] = cupy

import dmm  # noqa: E402
import dmm.cupy  # noqa: E402

# ---- DMM_DISABLE ----
os.environ["DMM_DISABLE"] = "1"
dmm.cupy.enable()
check(calls == [] and not dmm.cupy.is_enabled(), "with DMM_DISABLE=1 enable() installs nothing")
del os.environ["DMM_DISABLE"]

# ---- enable, allocate, disable ----
dmm.cupy.enable()
check(len(calls) == 1 and calls[0] is dmm.cupy._malloc and dmm.cupy.is_enabled(), "enable() installs dmm's allocator")
check(dmm.cupy._malloc(0) == ("Pointer", ("Memory", 0), 0), "a 0-byte allocation asks dmm for nothing")
ok, msg = raises(dmm.DmmError, lambda: dmm.cupy._malloc(4096), "4096 bytes", "device 0")
check(ok, "without a GPU an allocation is dmm's refusal with its sentence: %s" % msg)

real = dmm.cupy._buffer.Buffer


class Refused:
    def __init__(self, size, device=None, stream=None):
        error = dmm.DmmError("dmm.buffer(%d bytes, device %d): the governor refused" % (size, device))
        error.status = 3
        raise error


dmm.cupy._buffer.Buffer = Refused
ok, msg = raises(OutOfMemoryError, lambda: dmm.cupy._malloc(1 << 30), "1073741824")
check(ok, "a budget refusal is CuPy's OutOfMemoryError: %s" % msg)
dmm.cupy._buffer.Buffer = real

dmm.cupy.disable()
check(len(calls) == 2 and calls[1] is own_pool.malloc and not dmm.cupy.is_enabled(),
      "disable() gives CuPy its own pool back")

# ---- no CuPy ----
sys.modules["cupy"] = None
ok, msg = raises(dmm.DmmError, dmm.cupy.enable, "needs CuPy")
check(ok, "without CuPy enable() says so: %s" % msg)

sys.exit(1 if failures else 0)
