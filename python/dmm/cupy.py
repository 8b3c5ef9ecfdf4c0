# SPDX-License-Identifier: Apache-2.0
"""dmm.cupy — CuPy on dmm: every CuPy array's memory from dmm's device front, under the same pool and
budget as dmm.torch's tensors and dmm.buffer's (docs/buffers.md).

    import dmm.cupy
    dmm.cupy.enable()          # from here on, cupy.empty / cupy.fft / ... allocate through dmm
    ...
    dmm.cupy.disable()         # back to CuPy's own memory pool (arrays made before keep dmm memory)

Each CuPy allocation is one dmm.Buffer on the current CuPy device, ordered on CuPy's current stream; CuPy
holds the Buffer as the owner of its UnownedMemory, so the memory goes back to dmm's pool when CuPy lets
go of the array. A refusal for memory (the budget or the device) raises CuPy's own OutOfMemoryError, so
code that handles CuPy's out-of-memory keeps working; any other refusal is a DmmError with dmm's sentence.
With DMM_DISABLE=1 in the environment enable() does nothing but say so once (logger "dmm"), as
dmm.torch.enable() does.

CuPy's own memory-pool calls (cupy.get_default_memory_pool().used_bytes() and the like) describe CuPy's
pool, which dmm replaces: read dmm's numbers with dmm.torch.memory_stats() or the device's stats instead.
"""

import logging
import os

from . import _buffer, _lib

_OUT_OF_MEMORY = (2, 3)  # dmm/status.h: DMM_ERR_OUT_OF_MEMORY, DMM_ERR_BUDGET
_enabled = False
_said_off = False


def _import_cupy():
    try:
        import cupy
    except ImportError as e:
        raise _lib.DmmError("dmm.cupy needs CuPy, which is not importable here (%s): install it (e.g. "
                            "`pip install cupy-cuda12x`) in this Python environment" % e) from None
    return cupy




def _malloc(size):
    cupy = _import_cupy()
    device = cupy.cuda.Device().id
    if size == 0:
        return cupy.cuda.MemoryPointer(cupy.cuda.Memory(0), 0)
    stream = cupy.cuda.get_current_stream().ptr
    try:
        buf = _buffer.Buffer(size, device=device, stream=stream)
    except _lib.DmmError as e:
        if getattr(e, "status", None) in _OUT_OF_MEMORY:
            raise cupy.cuda.memory.OutOfMemoryError(size, 0, 0) from e
        raise
    return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(buf.ptr, size, buf, device), 0)


def enable():
    """Routes every CuPy allocation of this process through dmm (until disable())."""
    global _enabled, _said_off
    if _lib.switched_off():
        if not _said_off:
            logging.getLogger("dmm").warning("dmm.cupy.enable(): DMM_DISABLE=%s switches dmm off: CuPy keeps its "
                                             "own memory pool (unset DMM_DISABLE to use dmm)",
                                             os.environ.get("DMM_DISABLE"))
            _said_off = True
        return
    cupy = _import_cupy()
    _lib.load()  # a missing library is said now, not at the first array
    cupy.cuda.set_allocator(_malloc)
    _enabled = True


def disable():
    """CuPy's own memory pool again, for allocations from here on."""
    global _enabled
    if _enabled:
        cupy = _import_cupy()
        cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
        _enabled = False


def is_enabled():
    return _enabled
