# SPDX-License-Identifier: Apache-2.0
"""dmm.compat.torch_memory_saver's parts that need no GPU, with this build's libdmm_torch.so (DMM_LIB):
configure_subprocess() points children at the library this process loaded and puts DMM_LIB back after
(also when it was unset, and when the block raises); get_cpu_backup refuses what is not a CUDA tensor
(without torch: says torch is needed); TMS_INIT_ENABLE makes dmm torch's allocator and the region
"default" its default tag, and says so when dmm cannot become torch's allocator. The paused
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
# ---- retain_cpu_backup, disk backup, resume over a stand-in for dmm.torch ----
import contextlib  # noqa: E402
import types  # noqa: E402

calls = []


@contextlib.contextmanager
def region(name):
    calls.append(("region", name))
    yield


tms._dt = types.SimpleNamespace(region=region, tag_info=lambda name: {"committed_bytes": 1},
                                offload=lambda name, to, wait: calls.append(("offload", name, to)),
                                restore=lambda name: calls.append(("restore", name)),
                                release_host=lambda name: calls.append(("release_host", name)))
stream = types.SimpleNamespace(synchronize=lambda: calls.append(("sync",)))
tms._lib = types.SimpleNamespace(import_torch=lambda what: types.SimpleNamespace(
    cuda=types.SimpleNamespace(current_stream=lambda: stream)))
saver = tms.TorchMemorySaver()
with saver.region(tag="weights", enable_cpu_backup=True):
    pass
ok, msg = raises(ValueError, lambda: saver.region(tag="w", enable_disk_backup=True).__enter__(), "pinned host memory")
check(ok, "region(enable_disk_backup=True) is refused: %s" % msg)
ok, msg = raises(NotImplementedError, lambda: saver.set_disk_backup_dir("/tmp/x"), "not on disk")
check(ok, "set_disk_backup_dir is refused: %s" % msg)
check(saver.retain_cpu_backup is True, "retain_cpu_backup is True by default (dmm keeps the pinned copies)")
saver.pause()
saver.resume()
check(("release_host", "tms:weights:cpu_backup") not in calls, "with it, resume keeps the pinned copies")
saver.retain_cpu_backup = False
saver.pause()
saver.resume()
check(calls[-1] == ("release_host", "tms:weights:cpu_backup") and calls[-2] == ("sync",),
      "retain_cpu_backup=False: resume frees the pinned copies after its copies are done")
ok, msg = raises(TypeError, lambda: setattr(saver, "retain_cpu_backup", 1), "True or False")
check(ok, "retain_cpu_backup takes a bool: %s" % msg)

# ---- TMS_INIT_ENABLE: dmm becomes torch's allocator and its default tag the region "default" ----
enabled = {"on": False}


def enable():
    calls.append(("enable",))
    enabled["on"] = True


tms._dt.is_enabled = lambda: enabled["on"]
tms._dt.enable = enable
tms._dt.default_tag = lambda name: calls.append(("default_tag", name))
tms._lib.DmmError = dmm._lib.DmmError
off = {"on": False}
tms._lib.switched_off = lambda: off["on"]
del calls[:]
saver = tms.TorchMemorySaver()
saver._init_enable({"TMS_INIT_ENABLE": "0"})
check(calls == [], "TMS_INIT_ENABLE=0 changes nothing")
saver._init_enable({"TMS_INIT_ENABLE": "1", "TMS_INIT_ENABLE_CPU_BACKUP": "True"})
check(calls == [("enable",), ("default_tag", "tms:default:cpu_backup")],
      "TMS_INIT_ENABLE=1 enables dmm, then makes region('default', cpu backup) the default tag: %r" % calls)
saver.pause("default")
check(calls[-1] == ("offload", "tms:default:cpu_backup", "host"), "pause('default') puts it to sleep with a copy")
del calls[:]
saver = tms.TorchMemorySaver()
saver._init_enable({"TMS_INIT_ENABLE": "true"})
check(calls == [("default_tag", "tms:default")], "enabled already: only the default tag, without a copy: %r" % calls)


def refuse():
    raise RuntimeError("torch's allocator is in use already")


enabled["on"] = False
tms._dt.enable = refuse
ok, msg = raises(dmm._lib.DmmError, lambda: tms.TorchMemorySaver()._init_enable({"TMS_INIT_ENABLE": "1"}),
                 "before the first CUDA allocation", "in use already")
check(ok, "TMS_INIT_ENABLE=1 when dmm cannot become torch's allocator: said, with why: %s" % msg)
ok, msg = raises(ValueError, lambda: tms.TorchMemorySaver()._init_enable({"TMS_INIT_ENABLE": "maybe"}), "1 or 0")
check(ok, "a TMS_INIT_ENABLE that is neither 1/0 nor true/false is refused: %s" % msg)
off["on"] = True
del calls[:]
tms.TorchMemorySaver()._init_enable({"TMS_INIT_ENABLE": "1"})
check(calls == [], "with DMM_DISABLE, TMS_INIT_ENABLE changes nothing (dmm is off): %r" % calls)
off["on"] = False


@contextlib.contextmanager
def untagged():
    calls.append(("untagged",))
    yield


tms._dt.untagged = untagged
enabled["on"] = True
del calls[:]
with saver.disable():
    calls.append(("inside",))
check(calls == [("untagged",), ("inside",)], "disable() with dmm as torch's allocator is an untagged block "
      "(no MemPool, which torch refuses over a pluggable allocator): %r" % calls)


@contextlib.contextmanager
def dmm_graph(g, **kw):
    calls.append(("dmm_graph", g, sorted(kw)))
    yield


tms._dt.graph = dmm_graph
del calls[:]
with saver.cuda_graph("g"):
    pass
check(calls == [("dmm_graph", "g", ["capture_error_mode", "pool", "stream"])],
      "cuda_graph() with dmm as torch's allocator captures through dmm.torch.graph (graph memory mapped "
      "before the capture): %r" % calls)
sys.exit(1 if failures else 0)
