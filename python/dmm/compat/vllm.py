# SPDX-License-Identifier: Apache-2.0
"""vLLM's CuMemAllocator (vllm.device_allocator.cumem), over dmm. Change only the import:

    from dmm.compat.vllm import CuMemAllocator
    allocator = CuMemAllocator.get_instance()
    with allocator.use_memory_pool(tag="weights"):
        model = load_model()
    with allocator.use_memory_pool(tag="kv_cache"):
        kv_cache = allocate_kv_cache()
    allocator.sleep(offload_tags=("weights",))   # vLLM's level 1; offload_tags=() is level 2
    allocator.wake_up()                           # or wake_up(tags=["weights"]), then ["kv_cache"]

The same meanings as vLLM's: memory allocated inside use_memory_pool(tag) belongs to that tag (None:
"default"); sleep(offload_tags) keeps the contents of the tags named (None: ("default",); a str:
that one tag) in pinned host memory and discards the rest, and frees the device memory of every tag;
wake_up(tags) maps the memory of the tags named again (None: all) at the same addresses, with the
kept contents copied back (the discarded ones come back with undefined contents, as in vLLM);
get_current_usage() is the bytes of device memory the pool's tags hold when awake. sleep and wake_up
return when their work is done (as vLLM's do) but never synchronize the device: sleep waits on an
event recorded after the work already queued on the current stream (a kernel still reading the
weights finishes first), wake_up on its copies. Other memory, and CUDA graphs captured into torch's
own pools, are not touched.
"""

import contextlib

from .. import _lib
from .. import torch as _dt

cumem_available = True


class CuMemAllocator:
    """A singleton: get_instance(). See the module's text for the meaning of each call."""

    instance = None
    default_tag = "default"

    @staticmethod
    def get_instance():
        if CuMemAllocator.instance is None:
            CuMemAllocator.instance = CuMemAllocator()
        return CuMemAllocator.instance

    def __init__(self):
        self.current_tag = CuMemAllocator.default_tag
        self._tags = []        # tags used, in order of first use
        self._asleep = set()   # tags whose memory is off the device

    @contextlib.contextmanager
    def use_memory_pool(self, tag=None):
        """Allocations inside (on this thread) come from dmm and belong to `tag`."""
        if tag is None:
            tag = CuMemAllocator.default_tag
        if not isinstance(tag, str) or not tag:
            raise TypeError("CuMemAllocator.use_memory_pool: tag must be a non-empty str, not %r" % (tag,))
        if tag in self._asleep:
            raise RuntimeError("CuMemAllocator.use_memory_pool(%r): the tag is asleep; call wake_up() first" % tag)
        if tag not in self._tags:
            self._tags.append(tag)
        old, self.current_tag = self.current_tag, tag
        try:
            with _dt.region(_name(tag)):
                yield
        finally:
            self.current_tag = old

    def sleep(self, offload_tags=None):
        """Frees the device memory of every tag; the contents of `offload_tags` go to pinned host memory."""
        if offload_tags is None:
            offload_tags = (CuMemAllocator.default_tag,)
        elif isinstance(offload_tags, str):
            offload_tags = (offload_tags,)
        offload_tags = tuple(offload_tags)
        for t in offload_tags:
            if not isinstance(t, str):
                raise TypeError("CuMemAllocator.sleep: offload_tags must be tag names (str), got %r" % (t,))
        for tag in self._tags:
            if tag in self._asleep or _dt.tag_info(_name(tag)) is None:
                continue
            _dt.offload(_name(tag), to="host" if tag in offload_tags else "discard", wait=True)
            self._asleep.add(tag)

    def wake_up(self, tags=None):
        """Maps the memory of `tags` (None: every tag) again, with the kept contents."""
        if isinstance(tags, str):
            tags = [tags]
        torch = _lib.import_torch("dmm.compat.vllm")

        woke = False
        for tag in self._tags:
            if tag in self._asleep and (tags is None or tag in tags):
                _dt.restore(_name(tag))
                self._asleep.discard(tag)
                woke = True
        if woke:
            torch.cuda.current_stream().synchronize()  # the copies are done when wake_up returns, as in vLLM

    def get_current_usage(self):
        """Bytes of device memory the tags hold while awake (vLLM: the sum of its allocations' sizes)."""
        total = 0
        for tag in self._tags:
            info = _dt.tag_info(_name(tag))
            if info is not None:
                total += int(info["committed_bytes"])
        return total


def _name(tag):
    return "vllm:" + tag
