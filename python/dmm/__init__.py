"""dmm — a device-memory manager. This package is its Python face (ctypes only: nothing to compile).

    import dmm.torch
    dmm.torch.enable(limit=40 << 30)   # before the first CUDA allocation of the process
    with dmm.torch.tag("weights"):
        model = build_model()          # the weights can now be offloaded and restored in place
    ...
    dmm.torch.offload("weights")       # sleep: returns at once, unmaps behind an event
    dmm.torch.restore("weights")       # wake: same addresses, same contents

The shared library libdmm_torch.so is found through the environment variable DMM_LIB (the file or
its folder), next to this package, or in a build folder of the source tree (build*/adapters/torch).
docs/torch.md has the whole story.
"""

from ._lib import DmmError, library_path

__all__ = ["DmmError", "library_path"]
__version__ = "0.1.0"
