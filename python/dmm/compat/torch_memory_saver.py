# SPDX-License-Identifier: Apache-2.0
"""torch_memory_saver (SGLang's sleep-mode allocator), over dmm. Change only the import:

    from dmm.compat.torch_memory_saver import torch_memory_saver
    with torch_memory_saver.region(tag="kv_cache"):              # contents dropped on pause
        kv = torch.empty(...)
    with torch_memory_saver.region(tag="weights", enable_cpu_backup=True):   # contents kept
        model = load_model()
    with torch_memory_saver.cuda_graph(graph):                   # as torch.cuda.graph(graph)
        out = model(static_input)
    torch_memory_saver.pause()              # every tag; pause("kv_cache") one tag
    torch_memory_saver.get_cpu_backup(w)    # while paused: the host copy of a backed-up tensor
    torch_memory_saver.resume()
    with configure_subprocess():            # children started here find the same libdmm_torch.so
        start_worker_process()

The same names and meanings as torch_memory_saver's: memory allocated inside region(tag,
enable_cpu_backup) is pausable; pause(tag=None) frees the device memory of the regions of `tag`
(None: every tag), keeping the contents of those made with enable_cpu_backup=True in pinned host
memory; resume(tag=None) maps them again at the same addresses (kept contents copied back; the others
come back with undefined contents); disable() is a block whose allocations are not pausable even
inside a region; `enabled` is True; get_cpu_backup(x, zero_copy=False) is, while x's region is paused
with enable_cpu_backup=True, a CPU tensor of x's shape and dtype holding its contents (a copy, or with
zero_copy=True a view of dmm's pinned copy, to read only while the region stays paused: resume, the next
pause or empty_cache may rewrite or free it, as the original's view goes at resume), else None;
configure_subprocess() is a block in which child processes started inherit the saver: the original
sets LD_PRELOAD to its hook, dmm needs no hook, so the block sets DMM_LIB to the library this process
loaded (a child that imports dmm.compat.torch_memory_saver uses the same build) and restores it after.
retain_cpu_backup (True by default: dmm keeps the pinned copies after resume; False frees them at
resume). Disk backup is not dmm's: region(enable_disk_backup=True) is a ValueError and
set_disk_backup_dir a NotImplementedError, each saying so. TMS_INIT_ENABLE=1 in the environment when this
module is imported makes every allocation of the process pausable from then on, on every thread, as
region(tag="default") would (TMS_INIT_ENABLE_CPU_BACKUP=1: with enable_cpu_backup=True): dmm becomes
torch's allocator (dmm.torch.enable(), so import this module before the first CUDA allocation) and its
default tag holds everything allocated outside a region or disable(). The environment is read once, at
import (the original reads it per thread, at the thread's first allocation); a value other than 1/0 or
true/false is refused. While that tag is paused, what is allocated outside a region stays awake (in
dmm's pool), as the original's new allocations do. With DMM_DISABLE set, TMS_INIT_ENABLE is ignored,
and said. pause and resume return when their work is done, as the original's do,
but never synchronize the device: pause waits on an event recorded after the work already queued on
the current stream, so a kernel still reading the memory finishes first.

cuda_graph(...) captures like torch.cuda.graph(...) (same arguments, plus tag and enable_cpu_backup;
through dmm.torch.graph once dmm is torch's allocator, since dmm serves a capture only from graph memory
mapped before it): pause and resume leave the memory the graph's own kernels use on the device, so a
replay after resume is the same as before (the tensors it reads from regions are restored at the same
addresses). That is the difference from the original, which unmaps graph pools too; with dmm,
dmm.torch.graphs_sleep(to="host") / graphs_wake() put graph memory to sleep, contents kept.
"""

import contextlib
import ctypes
import logging
import os

from .. import _dlpack, _lib
from .. import torch as _dt

_TAG_DEFAULT = "default"


def _region_name(tag, backup):
    """The dmm tag of region(tag, enable_cpu_backup=backup)."""
    return "tms:%s%s" % (tag, ":cpu_backup" if backup else "")


def _env_true(env, key):
    """Whether env[key] says yes: 1 or true (0, false or unset: no); anything else is refused, as the
    original refuses it."""
    v = str(env.get(key, "")).strip().lower()
    if v in ("1", "true"):
        return True
    if v in ("", "0", "false"):
        return False
    raise ValueError("dmm.compat.torch_memory_saver: %s=%r: set it to 1 or 0 (or true / false)" % (key, env[key]))


class TorchMemorySaver:
    def __init__(self):
        self._regions = {}     # (tag, enable_cpu_backup) -> dmm tag name
        self._paused = set()   # dmm tag names whose memory is off the device
        self._retain = True    # retain_cpu_backup: keep the pinned copies after resume (dmm's way)
        self._init_enable(os.environ)

    def _init_enable(self, env):
        """TMS_INIT_ENABLE: every allocation outside a region is in region(tag="default") from now on."""
        if not _env_true(env, "TMS_INIT_ENABLE"):
            return
        backup = _env_true(env, "TMS_INIT_ENABLE_CPU_BACKUP")
        if _lib.switched_off():  # DMM_DISABLE: dmm is off, so nothing can be made pausable; said once
            logging.getLogger("dmm").warning("dmm.compat.torch_memory_saver: TMS_INIT_ENABLE=1 is ignored: "
                                             "DMM_DISABLE switches dmm off, so no allocation is pausable")
            return
        name = self._regions.setdefault((_TAG_DEFAULT, backup), _region_name(_TAG_DEFAULT, backup))
        if not _dt.is_enabled():
            try:
                _dt.enable()
            except Exception as e:
                raise _lib.DmmError("TMS_INIT_ENABLE=1 makes every allocation of the process pausable, which needs "
                                    "dmm as torch's allocator from the start (import dmm.compat.torch_memory_saver "
                                    "before the first CUDA allocation): dmm.torch.enable() failed: %s" % e) from e
        _dt.default_tag(name)

    @contextlib.contextmanager
    def region(self, tag=_TAG_DEFAULT, enable_cpu_backup=False, enable_disk_backup=False):
        if not isinstance(tag, str) or not tag:
            raise TypeError("torch_memory_saver.region: tag must be a non-empty str, not %r" % (tag,))
        if enable_disk_backup:
            raise ValueError("torch_memory_saver.region(enable_disk_backup=True): dmm keeps a region's backup in "
                             "pinned host memory, not on disk; use enable_cpu_backup=True")
        name = self._regions.setdefault((tag, bool(enable_cpu_backup)), _region_name(tag, bool(enable_cpu_backup)))
        if name in self._paused:
            raise RuntimeError("torch_memory_saver.region(%r): the tag is paused; call resume() first" % tag)
        with _dt.region(name):
            yield

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph, pool=None, stream=None, capture_error_mode="global", tag=_TAG_DEFAULT,
                   enable_cpu_backup=False):
        torch = _lib.import_torch("dmm.compat.torch_memory_saver")

        if _dt.is_enabled():  # dmm serves captures only from graph memory mapped before: dmm.torch.graph maps it
            with _dt.graph(cuda_graph, pool=pool, stream=stream, capture_error_mode=capture_error_mode):
                yield
            return
        with torch.cuda.graph(cuda_graph, pool=pool, stream=stream, capture_error_mode=capture_error_mode):
            yield

    @contextlib.contextmanager
    def disable(self):
        torch = _lib.import_torch("dmm.compat.torch_memory_saver")

        if _dt.is_enabled():  # dmm is torch's allocator: an untagged block takes the pool's memory, never a tag's
            with _dt.untagged():  # (torch 2.11 refuses a MemPool over a pluggable allocator)
                yield
            return
        pool = torch.cuda.MemPool()  # torch's own allocator, not a dmm one: nothing inside is pausable
        with _dt.untagged(), torch.cuda.use_mem_pool(pool):
            yield

    @property
    def enabled(self):
        return True

    def _names(self, tag, what):
        if tag is not None and not isinstance(tag, str):
            raise TypeError("torch_memory_saver.%s: tag must be a str or None (every tag), not %r" % (what, tag))
        return [(name, backup) for (t, backup), name in self._regions.items() if tag is None or t == tag]

    def pause(self, tag=None):
        for name, backup in self._names(tag, "pause"):
            if name in self._paused or _dt.tag_info(name) is None:
                continue
            _dt.offload(name, to="host" if backup else "discard", wait=True)
            self._paused.add(name)

    def resume(self, tag=None):
        torch = _lib.import_torch("dmm.compat.torch_memory_saver")

        woke = []
        for name, _ in self._names(tag, "resume"):
            if name in self._paused:
                _dt.restore(name)
                self._paused.discard(name)
                woke.append(name)
        if woke:
            torch.cuda.current_stream().synchronize()  # the copies are done when resume returns
        if not self._retain:
            for name in woke:
                _dt.release_host(name)  # retain_cpu_backup=False: the pinned copies go now

    @property
    def retain_cpu_backup(self):
        """Whether the pinned copies stay after resume (True, dmm's default: the next pause copies into
        memory it already has) or go at resume (False)."""
        return self._retain

    @retain_cpu_backup.setter
    def retain_cpu_backup(self, value):
        if not isinstance(value, bool):
            raise TypeError("torch_memory_saver.retain_cpu_backup is True or False, not %r" % (value,))
        self._retain = value

    def set_disk_backup_dir(self, path):
        raise NotImplementedError("torch_memory_saver.set_disk_backup_dir(%r): dmm keeps backups in pinned host "
                                  "memory, not on disk" % (path,))


    def get_cpu_backup(self, x, zero_copy=False):
        """x's contents while its region is paused with a CPU backup, as a CPU tensor of x's shape and dtype
        (a copy; zero_copy=True: a view of dmm's pinned copy); None otherwise."""
        torch = _lib.import_torch("dmm.compat.torch_memory_saver")
        if not isinstance(x, torch.Tensor) or not x.is_cuda:
            raise TypeError("torch_memory_saver.get_cpu_backup: x must be a CUDA tensor, not %r" % (type(x),))
        if not x.is_contiguous():
            raise ValueError("torch_memory_saver.get_cpu_backup: x must be contiguous (its bytes one range)")
        nbytes = x.numel() * x.element_size()
        if nbytes == 0 or x.device.index not in _lib.served_devices("torch_memory_saver.get_cpu_backup"):  # never create dmm's context on a device
            return None
        host = ctypes.c_void_p()
        _lib.check(_lib.load().dmm_torch_host_copy(x.device.index, x.data_ptr(), nbytes, ctypes.byref(host)),
                   "torch_memory_saver.get_cpu_backup")
        if not host.value:
            return None
        claim = _dlpack.Claim(host.value, nbytes, 0)
        try:
            from torch.utils import dlpack
            view = dlpack.from_dlpack(claim.capsule(_dlpack.DEVICE_CPU)).view(x.dtype).view(x.shape)
        finally:
            claim.drop()  # the view holds it now
        return view if zero_copy else view.clone()


@contextlib.contextmanager
def configure_subprocess():
    """Children started inside find the libdmm_torch.so this process loaded (DMM_LIB), as the original's
    children find its hook through LD_PRELOAD."""
    old = os.environ.get("DMM_LIB")
    os.environ["DMM_LIB"] = _lib.library_path()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("DMM_LIB", None)
        else:
            os.environ["DMM_LIB"] = old


torch_memory_saver = TorchMemorySaver()
