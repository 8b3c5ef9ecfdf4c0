# SPDX-License-Identifier: Apache-2.0
"""dmm.compat.torch_memory_saver's parts that need no GPU, with this build's libdmm_torch.so (DMM_LIB):
configure_subprocess() points children at the library this process loaded and puts DMM_LIB back after
(also when it was unset, and when the block raises); get_cpu_backup refuses what is not a CUDA tensor
(without torch: says torch is needed). The paused
paths (pause, resume, get_cpu_backup's copies) run on the GPU: tests/gpu/torch/test_torch_compat.py.
Exit 0 = all held, 1 = a check failed, 77 = no DMM_LIB (run it through CTest).
"""

import os
import subprocess
import sys

from _checks import check, failures, raises

if not os.environ.get("DMM_LIB"):
    print("SKIP: needs this build's unsanitized libdmm_torch.so in DMM_LIB (run through CTest)")
    sys.exit(77)

import dmm._lib  # noqa: E402
from dmm.compat import torch_memory_saver as tms  # noqa: E402

path = dmm._lib.library_path()
given = os.environ["DMM_LIB"]
with tms.configure_subprocess():
    child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('DMM_LIB'))"],
                           capture_output=True, text=True).stdout.strip()
check(child == path, "a child started inside sees DMM_LIB = this process's library (%s)" % child)
check(os.environ["DMM_LIB"] == given, "DMM_LIB is put back after the block")

del os.environ["DMM_LIB"]
try:
    with tms.configure_subprocess():
        raise KeyError("inside")
except KeyError:
    pass
check("DMM_LIB" not in os.environ, "an unset DMM_LIB is unset again, also when the block raises")
os.environ["DMM_LIB"] = given

try:
    import torch  # noqa: F401
    error, fragment = TypeError, "must be a CUDA tensor"
except ImportError:
    error, fragment = dmm._lib.DmmError, "needs PyTorch"
ok, msg = raises(error, lambda: tms.torch_memory_saver.get_cpu_backup("not a tensor"), fragment)
check(ok, "get_cpu_backup of something that is not a CUDA tensor is refused: %s" % msg)
sys.exit(1 if failures else 0)
