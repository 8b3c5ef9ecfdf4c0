# SPDX-License-Identifier: Apache-2.0
"""dmm.compat.vllm's tag rules (python/dmm/compat/vllm.py) without a GPU: CuMemAllocator over a stand-in
for the dmm.torch calls it makes (region, offload, restore, tag_info) and for torch's stream sync, which
records what it is asked. The GPU test (tests/gpu/torch/test_torch_compat.py, 4b) runs the same calls
on real memory.

What is proven: sleep offloads the offload_tags to host and discards the rest, only tags awake;
discard drops the named tags only; a tag already asleep keeps its way, and a call that would change
it warns once on the "dmm" logger; wake_up(tags) wakes the named tags and every tag other than
"weights" and "kv_cache" (the tags vLLM's engine tracks as sleeping), wake_up() all; get_current_usage counts only
tags awake; reuse_memory_pool refuses a tag never used (ValueError) and enters a used one;
release_pools and close change nothing; bad tags are TypeErrors.
Exit 0 = all held, 1 = a check failed.
"""

import contextlib
import logging
import sys
import types

from _checks import check, failures, raises

from dmm.compat import vllm

calls = []
state = {}  # dmm tag name -> "resident" or the way it sleeps


@contextlib.contextmanager
def region(name):
    calls.append(("region", name))
    state.setdefault(name, "resident")
    yield


def offload(name, to, wait):
    calls.append(("offload", name, to))
    state[name] = to


def restore(name):
    calls.append(("restore", name))
    state[name] = "resident"


def tag_info(name):
    if name not in state:
        return None
    return {"committed_bytes": 100 if state[name] == "resident" else 0}


vllm._dt = types.SimpleNamespace(region=region, offload=offload, restore=restore, tag_info=tag_info)
stream = types.SimpleNamespace(synchronize=lambda: calls.append(("sync",)))
fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(current_stream=lambda: stream))
vllm._lib = types.SimpleNamespace(import_torch=lambda what: fake_torch)
warned = []
handler = logging.Handler()
handler.emit = lambda record: warned.append(record.getMessage())
logging.getLogger("dmm").addHandler(handler)

alloc = vllm.CuMemAllocator.get_instance()
check(alloc is vllm.CuMemAllocator.get_instance(), "a singleton")
for tag in ("weights", "kv_cache", "scratch"):
    with alloc.use_memory_pool(tag=tag):
        pass
check(alloc.get_current_usage() == 300, "usage counts the three tags awake")
ok, msg = raises(ValueError, lambda: alloc.reuse_memory_pool("never").__enter__(), "does not exist")
check(ok, "reuse_memory_pool of a tag never used: %s" % msg)
with alloc.reuse_memory_pool("weights"):
    check(alloc.current_tag == "weights" and calls[-1] == ("region", "vllm:weights"), "reuse enters the tag's pool")

alloc.discard("kv_cache")
check(state == {"vllm:weights": "resident", "vllm:kv_cache": "discard", "vllm:scratch": "resident"},
      "discard drops only the tag named: %s" % state)
check(alloc.get_current_usage() == 200, "usage leaves out the discarded tag")

alloc.sleep(offload_tags=("weights", "kv_cache"))
check(state["vllm:weights"] == "host" and state["vllm:scratch"] == "discard" and state["vllm:kv_cache"] == "discard",
      "sleep keeps weights, discards scratch, leaves the discarded kv_cache as it was: %s" % state)
check(len(warned) == 1 and "already-asleep" in warned[0], "and warns once that kv_cache's policy was kept: %s" % warned)
check(alloc.get_current_usage() == 0, "asleep, usage is 0")

alloc.wake_up(tags=["weights"])
check(state["vllm:weights"] == "resident" and state["vllm:scratch"] == "resident" and state["vllm:kv_cache"] == "discard",
      "wake_up(['weights']) wakes weights and scratch (not deferrable), not kv_cache: %s" % state)
check(calls[-1] == ("sync",), "and returns after its copies (a stream sync)")
alloc.wake_up()
check(all(v == "resident" for v in state.values()), "wake_up() wakes the rest")

n = len(calls)
alloc.release_pools()
alloc.release_pools()
alloc.close()
check(len(calls) == n and alloc.get_current_usage() == 300, "release_pools and close change nothing")

for fn, what in ((lambda: alloc.discard([1]), "discard"), (lambda: alloc.sleep(offload_tags=(1,)), "sleep")):
    ok, msg = raises(TypeError, fn, "tag names")
    check(ok, "%s with a tag that is not a str: %s" % (what, msg))

sys.exit(1 if failures else 0)
