# SPDX-License-Identifier: Apache-2.0
"""dmm — a device-memory manager. This package is its Python face (ctypes only: nothing to compile).

    import dmm.torch
    dmm.torch.enable(limit=40 << 30)   # before the first CUDA allocation of the process
    with dmm.torch.tag("weights"):
        model = build_model()          # the weights can now be offloaded and restored in place
    ...
    dmm.torch.offload("weights")       # sleep: returns at once, unmaps behind an event
    dmm.torch.restore("weights")       # wake: same addresses, same contents

The shared library libdmm_torch.so comes from DMM_LIB (the file or its folder) when set, else the
package's own copy beside this file (`pip install --no-index ./python` and `cmake --install` put it
there), else a build folder of the source tree (build*/adapters/torch). torch is needed only by the
dmm.torch calls that use it. docs/torch.md has the whole story.
"""

from ._buffer import Buffer, buffer
from ._lib import DmmError, library_path

__all__ = ["Buffer", "DmmError", "buffer", "library_path"]
__version__ = "0.2.0"
