# SPDX-License-Identifier: Apache-2.0
"""dmm.snapshot.to_torch (python/dmm/snapshot.py): dmm's snapshot in PyTorch's layout, without torch.

The snapshot is the adapter's own JSON, written by unit/test_torch_snapshot over the host driver (pool
blocks on two streams with a hole, a tag with two blocks, a graph segment with one) to the file
DMM_TORCH_SNAPSHOT_FIXTURE (CTest runs that test first: a fixture). What is proven: every segment's
blocks tile it in address order (sizes sum to total_size, each starts where the last ended), states
are active_allocated or inactive, and the check torch.cuda._memory_viz.segsum asserts holds
(allocated + internal + external free = total); Σ total_size = dmm's reserved_bytes, Σ active sizes
= allocated_bytes, Σ requested = requested_bytes; pool, tag and graph segments are all there; the
history becomes device_traces that replay backwards from the segments the way PyTorch's viewer does
(every freed block inside a mapped range, every undone map inside a segment); the layout pickles to
plain data. Malformed snapshots (the stats dict, a block overlapping another, a
block outside every run, an inexact map) raise SnapshotError saying what is wrong.
Exit 0 = all held, 1 = a check failed, 77 = the fixture's path was not given (run it through CTest).
"""

import copy
import json
import os
import pickle
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import dmm.snapshot as ds  # noqa: E402

from _checks import check, failures, raises  # noqa: E402


def segsum_totals(layout):
    """What torch.cuda._memory_viz.segsum adds up and asserts, recomputed here."""
    reserved = allocated = ext = internal = 0
    for seg in layout["segments"]:
        reserved += seg["total_size"]
        s_alloc = s_int = s_ext = 0
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                s_alloc += b["requested_size"]
                s_int += b["size"] - b["requested_size"]
            else:
                s_ext += b["size"]
        if s_alloc + s_int + s_ext != seg["total_size"]:
            return None
        allocated += s_alloc
        ext += s_ext
        internal += s_int
    return reserved, allocated, internal, ext


def replay_backwards(layout, device):
    """What PyTorch's viewer (MemoryViz.js) does with device_traces: from the final segments and blocks it
    undoes the events newest first; a freed block must come back inside a mapped range, and a mapped
    range must lie inside one segment when it is undone. Returns None, or what did not fit."""
    segs = [[s["address"], s["total_size"]] for s in layout["segments"] if s["device"] == device]
    blocks = {b["address"]: b["size"] for s in layout["segments"] for b in s["blocks"]
              if b["state"] == "active_allocated"}
    for e in reversed(layout["device_traces"][device]):
        a, n = e["addr"], e["size"]
        if e["action"] == "alloc":
            if a not in blocks:
                return "alloc of %#x undone, but no such block" % a
            del blocks[a]
        elif e["action"] == "free_completed":
            if not any(s <= a and a + n <= s + z for s, z in segs):
                return "block %#x (+%d) freed outside every mapped range" % (a, n)
            blocks[a] = n
        elif e["action"] == "segment_map":  # undo: unmap a range that must lie inside one segment
            i = next((i for i, (s, z) in enumerate(segs) if s <= a and a + n <= s + z), None)
            if i is None:
                return "segment_map of %#x (+%d) undone, but no segment holds it" % (a, n)
            s, z = segs.pop(i)
            if any(b >= a and b < a + n for b in blocks):
                return "segment_map of %#x undone while a block lives in it" % a
            if a > s:
                segs.append([s, a - s])
            if a + n < s + z:
                segs.append([a + n, s + z - a - n])
        elif e["action"] == "segment_unmap":  # undo: map it again, merging with neighbours
            segs.append([a, n])
            segs.sort()
            merged = []
            for s, z in segs:
                if merged and merged[-1][0] + merged[-1][1] == s:
                    merged[-1][1] += z
                else:
                    merged.append([s, z])
            segs = merged
    return None


def main():
    path = os.environ.get("DMM_TORCH_SNAPSHOT_FIXTURE")
    if not path:
        print("SKIP: DMM_TORCH_SNAPSHOT_FIXTURE is not set (CTest sets it and runs unit/test_torch_snapshot first)")
        return 77
    with open(path) as f:
        snap = json.load(f)
    lay = ds.to_torch(snap)
    segs = lay["segments"]
    kinds = sorted({s["dmm_kind"] for s in segs})
    check("pool" in kinds and "tag:weights" in kinds and "graph" in kinds, "pool, tag and graph segments (%s)" % kinds)
    tiled = True
    for s in segs:
        at = s["address"]
        for b in s["blocks"]:
            tiled &= b["address"] == at and b["size"] > 0 and b["state"] in ("active_allocated", "inactive")
            tiled &= b["requested_size"] <= b["size"]
            at += b["size"]
        tiled &= at == s["address"] + s["total_size"]
        tiled &= s["allocated_size"] == sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")
        tiled &= s["device"] == snap["device"]
    check(tiled, "every segment's blocks tile it in address order")
    check(all(a["address"] + a["total_size"] <= b["address"] for a, b in zip(segs, segs[1:])),
          "segments are sorted and disjoint")
    check(any(b["state"] == "inactive" for s in segs if s["dmm_kind"] == "pool" for b in s["blocks"][:-1]),
          "the freed hole shows as an inactive block between live ones")
    t = segsum_totals(lay)
    check(t is not None, "segsum's assertion holds for every segment")
    reserved = sum(s["total_size"] for s in segs)
    active = sum(s["allocated_size"] for s in segs)
    requested = sum(s["requested_size"] for s in segs)
    check(reserved == snap["reserved_bytes"]["current"],
          "Σ total_size = dmm's reserved_bytes (%d, %d)" % (reserved, snap["reserved_bytes"]["current"]))
    check(active == snap["allocated_bytes"]["current"],
          "Σ active_allocated = dmm's allocated_bytes (%d, %d)" % (active, snap["allocated_bytes"]["current"]))
    check(requested == snap["requested_bytes"]["current"],
          "Σ requested_size = dmm's requested_bytes (%d, %d)" % (requested, snap["requested_bytes"]["current"]))
    pool = sum(s["total_size"] for s in segs if s["dmm_kind"] == "pool")
    check(pool == snap["pool_committed_bytes"], "the pool's segments = its committed bytes (%d, %d)"
          % (pool, snap["pool_committed_bytes"]))
    traces = lay["device_traces"]
    check(len(traces) == snap["device"] + 1 and all(t == [] for t in traces[:-1]), "one trace list per device")
    acts = [e["action"] for e in traces[snap["device"]]]
    check({"alloc", "free_requested", "free_completed", "segment_map", "segment_unmap"} <= set(acts),
          "the history gives alloc, free_requested/free_completed, segment_map and segment_unmap (%d events)"
          % len(acts))
    err = replay_backwards(lay, snap["device"])
    check(err is None, "replayed backwards from the segments, as PyTorch's viewer does, every event fits (%s)" % err)
    back = pickle.loads(pickle.dumps(lay))
    check(back == lay, "the layout pickles to plain data")
    streams = {s["stream"] for s in segs if s["dmm_kind"] == "pool"}
    check(streams == {0}, "pool segments are stream 0: shared by every stream's heap (%s)" % streams)

    # ---- frames: the fixture numbers allocations 1, 2, … and frees 1001, …; a frames function maps them
    def named(n):
        return [{"filename": "fixture.py", "line": n, "name": "site%d" % n}] if n else []

    framed = ds.to_torch(snap, frames=named)
    pool_live = [b for s in framed["segments"] if s["dmm_kind"] == "pool" for b in s["blocks"]
                 if b["state"] == "active_allocated"]
    check(pool_live and all(len(b["frames"]) == 1 and 1 <= b["frames"][0]["line"] < 1000 for b in pool_live),
          "every live pool block carries the frames of its allocation (%d blocks)" % len(pool_live))
    others = [b for s in framed["segments"] if s["dmm_kind"] != "pool" for b in s["blocks"]]
    check(others and all(b["frames"] == [] for b in others), "tag and graph blocks carry no frames")
    ev = framed["device_traces"][snap["device"]]
    check(all(len(e["frames"]) == 1 and e["frames"][0]["line"] < 1000 for e in ev if e["action"] == "alloc"),
          "every alloc event carries its allocation's frames")
    frees = [e for e in ev if e["action"].startswith("free_")]
    check(frees and all(e["frames"][0]["line"] > 1000 for e in frees),
          "every free event carries the frames of its free (%d)" % len(frees))
    check(all(e["frames"] == [] for e in ev if e["action"].startswith("segment_")), "map and unmap events carry none")
    check(all(b["frames"] == [] for s in lay["segments"] for b in s["blocks"]), "without a frames function: none")
    kept = [e["action"] for e in ds.to_torch(snap, skip_actions=("free_requested", "segment_map"))["device_traces"][-1]]
    check("free_requested" not in kept and "segment_map" not in kept and "free_completed" in kept and "alloc" in kept,
          "skip_actions leaves out exactly the actions named")

    # ---- malformed
    ok, msg = raises(ds.SnapshotError, lambda: ds.to_torch({k: v for k, v in snap.items() if k != "pool_segments"}),
                     "pool_segments", "dmm.torch.snapshot()")
    check(ok, "a dict without the pool's segments (the stats) (%s)" % msg)
    bad = copy.deepcopy(snap)
    b0 = bad["pool_blocks"][0]
    bad["pool_blocks"].append([b0[0] + 512, b0[1], b0[2], b0[3]])
    ok, msg = raises(ds.SnapshotError, lambda: ds.to_torch(bad), "overlaps")
    check(ok, "a block overlapping another (%s)" % msg)
    bad = copy.deepcopy(snap)
    bad["pool_blocks"].append([1 << 62, 512, 512, 0])
    ok, msg = raises(ds.SnapshotError, lambda: ds.to_torch(bad), "no committed run")
    check(ok, "a block outside every committed run (%s)" % msg)
    bad = copy.deepcopy(snap)
    bad["block_tracking"] = False
    ok, msg = raises(ds.SnapshotError, lambda: ds.to_torch(bad), "not tracked", "track_blocks=True")
    check(ok, "a snapshot without block tracking says how to turn it on (%s)" % msg)
    bad = copy.deepcopy(snap)
    bad["pool_blocks_untracked"] = 3
    ok, msg = raises(ds.SnapshotError, lambda: ds.to_torch(bad), "3 live pool block(s) untracked", "before the first allocation")
    check(ok, "untracked blocks are refused with the reason (%s)" % msg)
    bad = copy.deepcopy(snap)
    bad["pool_map_exact"] = False
    ok, msg = raises(ds.SnapshotError, lambda: ds.to_torch(bad), "not exact", "strict=False")
    check(ok, "an inexact map is refused (%s)" % msg)
    check(len(ds.to_torch(bad, strict=False)["segments"]) == len(segs), "strict=False lays out what is known")
    bad = copy.deepcopy(snap)
    bad["history"]["events"][0] = [7, 0, 0, 0, 0]
    ok, msg = raises(ds.SnapshotError, lambda: ds.to_torch(bad), "history.events[0]")
    check(ok, "a history event of an unknown action (%s)" % msg)
    bad = copy.deepcopy(snap)
    bad["pool_blocks"][0] = [1, 2]
    ok, msg = raises(ds.SnapshotError, lambda: ds.to_torch(bad), "pool_blocks[0]")
    check(ok, "a block that is not [address, bytes, requested, stream] (%s)" % msg)
    print("%d check(s) failed" % len(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
