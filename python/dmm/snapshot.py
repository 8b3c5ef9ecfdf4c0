# SPDX-License-Identifier: Apache-2.0
"""dmm's snapshot in PyTorch's snapshot layout, for torch.cuda._memory_viz and the web viewer.

    import dmm.torch
    snap = dmm.torch.torch_snapshot()            # a dict in torch.cuda.memory._snapshot()'s layout
    dmm.torch.dump_snapshot("dmm.pickle")        # the pickle https://pytorch.org/memory_viz opens
    print(torch.cuda._memory_viz.segsum(snap))

Pure Python (no torch, no library): to_torch() turns the dict dmm.torch.snapshot() returns (the
adapter's snapshot JSON) into PyTorch's layout. Each segment is memory dmm has mapped on the device:
every run of committed chunks of the pool, every tag segment (its mapped part), every graph segment.
Its blocks tile it in address order: live blocks are `active_allocated` (size = the block's rounded
size, requested_size = what was asked), the gaps `inactive`. No block is `active_pending_free`: a
block freed on another stream, or held back by record_stream, waits for its event inside the pool and
shows as free. The pool's runs are shared by every
stream's heap, so their `stream` is 0. `device_traces` is one list per device up to this one; this
device's holds the pool's recent events when dmm.torch.history(N) was on: `alloc`, `free_requested` +
`free_completed` of its blocks, `segment_map` / `segment_unmap` of the ranges it commits and
decommits, oldest first (tag and graph memory have no events: their segments show as they are).
With `frames` (a function of a context number, dmm.torch's stack table), each pool block and each
block event carries the frames of its allocation or free (PyTorch's `frames`: dicts of filename, line
and name, innermost first); tag and graph blocks carry none.

Totals: Σ total_size = dmm's reserved_bytes.current (what it has mapped), Σ active_allocated sizes =
allocated_bytes.current, when the snapshot is exact (`pool_map_exact`, no untracked block); otherwise
SnapshotError says what is missing, unless strict=False.
"""

__all__ = ["SnapshotError", "to_torch"]


class SnapshotError(ValueError):
    """The dmm snapshot lacks what PyTorch's layout needs, or contradicts itself; the message says what."""


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _need(d, key, where, kind=None):
    if not isinstance(d, dict) or key not in d:
        raise SnapshotError("dmm snapshot: %s lacks '%s'; pass the dict dmm.torch.snapshot() returns "
                            "(a stats dict has no segments)" % (where, key))
    v = d[key]
    if kind == "int" and not (_int(v) and v >= 0):
        raise SnapshotError("dmm snapshot: %s.%s must be an integer >= 0, not %r" % (where, key, v))
    if kind == "list" and not isinstance(v, list):
        raise SnapshotError("dmm snapshot: %s.%s must be a list, not %s" % (where, key, type(v).__name__))
    return v


def _blocks(raw, where):
    """[[address, bytes, requested(, stream(, context))], ...] → sorted tuples, checked."""
    out = []
    for i, b in enumerate(raw):
        if not isinstance(b, list) or not 3 <= len(b) <= 5 or not all(_int(x) and x >= 0 for x in b):
            raise SnapshotError("dmm snapshot: %s[%d] must be [address, bytes, requested(, stream(, context))] of "
                                "integers, not %r" % (where, i, b))
        if b[1] == 0 or b[2] > b[1]:
            raise SnapshotError("dmm snapshot: %s[%d] %r: a block has bytes > 0 and requested <= bytes"
                                % (where, i, b))
        out.append((b[0], b[1], b[2], b[3] if len(b) > 3 else 0, b[4] if len(b) > 4 else 0))
    out.sort()
    return out


def _no_frames(_context):
    return []


def _segment(device, address, total, blocks, stream, kind, expandable, where, frames=_no_frames):
    """A segment in PyTorch's layout; `blocks` sorted and inside [address, address + total)."""
    tiles, cur, allocated, requested = [], address, 0, 0
    end = address + total
    for a, size, req, _, context in blocks:
        if a < cur or a + size > end:
            raise SnapshotError("dmm snapshot: %s: the block at %#x (%d bytes) overlaps another or leaves the "
                                "segment [%#x, %#x)" % (where, a, size, address, end))
        if a > cur:
            tiles.append({"address": cur, "size": a - cur, "requested_size": 0, "state": "inactive", "frames": []})
        tiles.append({"address": a, "size": size, "requested_size": req, "state": "active_allocated",
                      "frames": frames(context)})
        allocated += size
        requested += req
        cur = a + size
    if cur < end:
        tiles.append({"address": cur, "size": end - cur, "requested_size": 0, "state": "inactive", "frames": []})
    return {"device": device, "address": address, "total_size": total, "allocated_size": allocated,
            "active_size": allocated, "requested_size": requested, "stream": stream, "segment_type": "large",
            "segment_pool_id": (0, 0), "is_expandable": expandable, "frames": [], "blocks": tiles,
            "dmm_kind": kind}


def _inside(blocks, lo, hi):
    return [b for b in blocks if b[0] >= lo and b[0] + b[1] <= hi]


def to_torch(snap, strict=True, frames=None, skip_actions=()):
    """PyTorch's snapshot layout ({'segments', 'device_traces', 'allocator_settings'}) of one dmm
    snapshot dict (dmm.torch.snapshot()). strict: an inexact pool map or untracked blocks raise
    SnapshotError instead of a layout whose totals fall short of dmm's stats. frames: a function of a
    context number (0: none) giving its frames. skip_actions: trace actions left out (PyTorch's names)."""
    frames = frames or _no_frames
    device = _need(snap, "device", "the snapshot", "int")
    runs = _need(snap, "pool_segments", "the snapshot", "list")
    pool_blocks = _blocks(_need(snap, "pool_blocks", "the snapshot", "list"), "pool_blocks")
    untracked = _need(snap, "pool_blocks_untracked", "the snapshot", "int")
    exact = _need(snap, "pool_map_exact", "the snapshot")
    if strict and snap.get("block_tracking") is False:
        raise SnapshotError("dmm snapshot: the pool's blocks are not tracked, so they cannot be laid out; call "
                            "dmm.torch.enable(track_blocks=True) (or dmm.torch.track_blocks() before the first "
                            "allocation), or pass strict=False for the segments alone (the pool's then show as free)")
    if strict and (exact is not True or untracked):
        raise SnapshotError("dmm snapshot: not exact (pool_map_exact=%r; %d live pool block(s) untracked: "
                            "allocated before block tracking began, or left out for want of host memory); "
                            "turn tracking on before the first allocation (dmm.torch.enable(track_blocks=True)), "
                            "or pass strict=False for the layout of what is known" % (exact, untracked))
    segments = []
    placed = 0
    for i, r in enumerate(runs):
        if not isinstance(r, list) or len(r) != 2 or not all(_int(x) and x >= 0 for x in r) or r[1] == 0:
            raise SnapshotError("dmm snapshot: pool_segments[%d] must be [address, bytes > 0], not %r" % (i, r))
        inside = _inside(pool_blocks, r[0], r[0] + r[1])
        placed += len(inside)
        segments.append(_segment(device, r[0], r[1], inside, 0, "pool", True, "pool_segments[%d]" % i, frames))
    if placed != len(pool_blocks) and strict:
        lost = [b for b in pool_blocks if not any(r[0] <= b[0] and b[0] + b[1] <= r[0] + r[1] for r in runs)]
        raise SnapshotError("dmm snapshot: %d pool block(s) lie in no committed run (the first at %#x); the "
                            "snapshot contradicts itself" % (len(lost), lost[0][0] if lost else 0))
    tags = _need(snap, "tags", "the snapshot")
    if not isinstance(tags, dict):
        raise SnapshotError("dmm snapshot: tags must be a dict of tag name -> tag")
    for name, t in sorted(tags.items()):
        for k, sg in enumerate(_need(t, "segment_list", "tag '%s'" % name, "list")):
            where = "tag '%s' segment %d" % (name, k)
            addr = _need(sg, "address", where, "int")
            mapped = _need(sg, "mapped_bytes", where, "int")
            if mapped == 0:
                continue  # offloaded: nothing of it is on the device
            blocks = _blocks(_need(sg, "blocks", where, "list"), where + " blocks")
            segments.append(_segment(device, addr, mapped, _inside(blocks, addr, addr + mapped), 0,
                                     "tag:%s" % name, False, where))
    graphs = _need(snap, "graphs", "the snapshot")
    for k, sg in enumerate(_need(graphs, "segment_list", "graphs", "list")):
        where = "graph segment %d" % k
        if sg.get("asleep") is True:  # graph memory asleep: nothing of it is on the device
            continue
        addr, size = _need(sg, "address", where, "int"), _need(sg, "bytes", where, "int")
        blocks = _blocks(_need(sg, "blocks", where, "list"), where + " blocks")
        segments.append(_segment(device, addr, size, blocks, 0, "graph", False, where))
    segments.sort(key=lambda s: s["address"])
    for a, b in zip(segments, segments[1:]):
        if a["address"] + a["total_size"] > b["address"]:
            raise SnapshotError("dmm snapshot: segments at %#x (%s) and %#x (%s) overlap"
                                % (a["address"], a["dmm_kind"], b["address"], b["dmm_kind"]))
    traces = [[] for _ in range(device + 1)]
    traces[device] = _trace(snap.get("history"), frames, set(skip_actions))
    return {"segments": segments, "device_traces": traces, "allocator_settings": {"allocator": "dmm"}}


_ACTIONS = {0: ("alloc",), 1: ("free_requested", "free_completed"), 2: ("segment_map",), 3: ("segment_unmap",)}


def _trace(hist, frames=_no_frames, skip=frozenset()):
    """The history's events ([action, addr, size, stream, t_us(, context)], oldest first) as PyTorch's
    trace entries, but for the actions in `skip`."""
    if hist is None:
        return []
    events = _need(hist, "events", "history", "list")
    out = []
    for i, e in enumerate(events):
        if (not isinstance(e, list) or len(e) not in (5, 6) or not all(_int(x) and x >= 0 for x in e)
                or e[0] not in _ACTIONS):
            raise SnapshotError("dmm snapshot: history.events[%d] must be [action 0-3, address, bytes, stream, "
                                "time_us(, context)] of integers, not %r" % (i, e))
        for name in _ACTIONS[e[0]]:
            if name not in skip:
                out.append({"action": name, "addr": e[1], "size": e[2], "stream": e[3], "time_us": e[4],
                            "frames": frames(e[5] if len(e) > 5 else 0)})
    return out
