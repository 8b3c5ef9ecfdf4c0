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

The same meanings as vLLM's (its main branch as of late 2026: vllm/device_allocator/cumem.py and the
MemAllocator protocol beside it): memory allocated inside use_memory_pool(tag) belongs to that tag
(None: "default"), and reuse_memory_pool(tag) enters an existing tag's pool again (ValueError for a tag
never used); sleep(offload_tags) keeps the contents of the tags named (None: ("default",); a str: that
one tag) in pinned host memory and discards the rest, and frees the device memory of every tag that
is awake; discard(tags) frees the device memory of the tags named without a copy, the others stay
mapped and usable; a tag already asleep keeps the way it went to sleep (a sleep or discard that would
change it says so once on the "dmm" logger, as vLLM warns); wake_up(tags) maps the memory of the tags
named again (None: all) at the same addresses, with the kept contents copied back (the discarded ones
come back with undefined contents), and defers only "weights" and "kv_cache" (the tags vLLM's engine
tracks as sleeping): memory of any other tag always wakes; get_current_usage() is the bytes of device
memory the tags hold while awake (memory that sleeps is not counted). These two follow issue 37's
reading of current vLLM; the cumem.py this was checked against (vllm-project/vllm 010c211) wakes
exactly the tags named and counts every allocation, asleep or not; release_pools() (and close(), its
alias) lets the pools go before the interpreter ends, and is safe to call more than once (dmm keeps no
per-tag pool objects, so there is nothing torch could tear down late). sleep, discard and wake_up
return when their work is done (as vLLM's do) but never synchronize the device: sleep waits on an
event recorded after the work already queued on the current stream (a kernel still reading the
weights finishes first), wake_up on its copies. Other memory, and CUDA graphs captured into torch's
own pools, are not touched.
"""

import contextlib
import logging

from .. import _lib
from .. import torch as _dt

cumem_available = True
_DEFERRABLE = ("weights", "kv_cache")  # the only tags a wake_up(tags) may leave asleep


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
        self._asleep = {}      # tag -> "host" or "discard": tags whose memory is off the device, and how

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

    @contextlib.contextmanager
    def reuse_memory_pool(self, tag):
        """Enters the pool of a tag already used, so that new allocations belong to it too."""
        if tag not in self._tags:
            raise ValueError("Memory pool for tag '%s' does not exist." % (tag,))
        with self.use_memory_pool(tag):
            yield

    def _put_to_sleep(self, tags, how, what):
        """Sends every awake tag of `tags` to sleep `how` ("host" or "discard"); a tag already asleep keeps
        its way (said once if `how` differs)."""
        conflict = False
        for tag in self._tags:
            if tag not in tags:
                continue
            want = how(tag)
            if tag in self._asleep:
                conflict = conflict or self._asleep[tag] != want
                continue
            if _dt.tag_info(_name(tag)) is None:
                continue
            _dt.offload(_name(tag), to=want, wait=True)
            self._asleep[tag] = want
        if conflict:
            logging.getLogger("dmm").warning("CuMemAllocator: %s cannot change the policy of already-asleep "
                                             "allocations; the existing policy was kept.", what)

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
        self._put_to_sleep(set(self._tags), lambda tag: "host" if tag in offload_tags else "discard", "sleep")

    def discard(self, tags):
        """Frees the device memory of `tags` without a copy; every other tag stays mapped and usable."""
        if isinstance(tags, str):
            tags = (tags,)
        tags = tuple(tags)
        for t in tags:
            if not isinstance(t, str):
                raise TypeError("CuMemAllocator.discard: tags must be tag names (str), got %r" % (t,))
        self._put_to_sleep(set(tags), lambda tag: "discard", "discard")

    def wake_up(self, tags=None):
        """Maps the memory of `tags` (None: every tag) again, with the kept contents; a tag other than
        "weights" and "kv_cache" wakes whatever `tags` says."""
        if isinstance(tags, str):
            tags = [tags]
        torch = _lib.import_torch("dmm.compat.vllm")

        woke = False
        for tag in self._tags:
            if tag in self._asleep and (tags is None or tag in tags or tag not in _DEFERRABLE):
                _dt.restore(_name(tag))
                del self._asleep[tag]
                woke = True
        if woke:
            torch.cuda.current_stream().synchronize()  # the copies are done when wake_up returns, as in vLLM

    def get_current_usage(self):
        """Bytes of device memory the tags hold while awake (memory that sleeps is not counted)."""
        total = 0
        for tag in self._tags:
            if tag in self._asleep:
                continue
            info = _dt.tag_info(_name(tag))
            if info is not None:
                total += int(info["committed_bytes"])
        return total

    def release_pools(self):
        """Lets the pools go before the interpreter ends (vLLM drops its MemPool objects here). dmm keeps no
        per-tag pool object, so there is nothing to tear down late; safe to call more than once."""

    def close(self):
        """vLLM's alias of release_pools()."""
        self.release_pools()


def _name(tag):
    return "vllm:" + tag
