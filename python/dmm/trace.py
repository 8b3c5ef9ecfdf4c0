"""dmm traces (`# dmm-trace v1`, gzip; docs/trace-format.md) from PyTorch's memory snapshots.

    python3 -m dmm.trace convert SNAPSHOT.pickle OUT.trace.gz [--device N] [--workload NAME]

    import dmm.trace
    dmm.trace.from_torch_snapshot("snap.pickle", "run.trace.gz")     # or the dict _snapshot() returns

A snapshot is what `torch.cuda.memory._snapshot()` returns, or the pickle `_dump_snapshot(path)` writes,
after `torch.cuda.memory._record_memory_history()`: a dict whose `device_traces[d]` lists the
allocator's events on device d. Each `alloc` becomes an allocation of its `size` — the request, which
PyTorch records, rounded up to 512 bytes as both PyTorch and dmm round it — on its stream; the first `free_requested` (or a `free_completed` without one) of that address becomes its
free; the segment events only feed the header's native_peak_reserved. `dmm replay OUT.trace.gz` then
shows what dmm would hold for the same sequence.

Pure Python, no torch needed. A snapshot file is untrusted input: it is unpickled with an unpickler that
builds plain data only (dicts, lists, strings, numbers) and refuses every class or function a pickle
names, so loading one cannot run code. Bad input raises TraceError naming the file, the entry and what
is wrong, and writes nothing; the output appears whole or not at all (written beside, then renamed).
"""

import gzip
import os
import pickle
import sys

from . import _files

__all__ = ["TraceError", "load_torch_snapshot", "from_torch_snapshot", "write_trace", "main"]

_MAX_STREAMS = 64  # distinct stream ids a trace may carry (the reader's limit, tools/trace.h)
_ALLOC, _FREE_REQ, _FREE_DONE = "alloc", "free_requested", "free_completed"
_SEG_UP = ("segment_alloc", "segment_map")
_SEG_DOWN = ("segment_free", "segment_unmap")


class TraceError(ValueError):
    """A snapshot or trace could not be read or written; the message says which, where and why."""


class _Refused(pickle.UnpicklingError):
    pass


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings, bytes, numbers, booleans and None; refuses every global."""

    def find_class(self, module, name):
        raise _Refused(
            "it asks for %s.%s; only plain data (dicts, lists, strings, numbers) is loaded from a file, "
            "because unpickling anything else can run code" % (module, name))


def load_torch_snapshot(path):
    """The dict of a snapshot pickle (`torch.cuda.memory._dump_snapshot`), loaded as plain data only."""
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            data = _PlainUnpickler(f).load()
    except OSError as e:
        raise TraceError("snapshot '%s': cannot read it: %s" % (p, e.strerror or e)) from None
    except _Refused as e:
        raise TraceError("snapshot '%s': refused: %s" % (p, e)) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError, MemoryError) as e:
        raise TraceError("snapshot '%s': not a readable pickle (%s: %s); give the file "
                         "torch.cuda.memory._dump_snapshot() wrote" % (p, type(e).__name__, e)) from None
    return data


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v):
    return (isinstance(v, (int, float)) and not isinstance(v, bool))


def write_trace(out_path, lines, header):
    """Writes a trace: `header` is a list of (key, value) for `# key: value` lines after the magic line,
    `lines` the event lines ("<t_us> a <id> <bytes> <stream>" / "<t_us> f <id>"). Written beside the
    target and renamed over it, so the file is whole or absent."""
    out = os.path.abspath(os.fspath(out_path))
    folder = os.path.dirname(out)
    if not os.path.isdir(folder):
        raise TraceError("trace '%s': the folder '%s' does not exist; create it or choose another file"
                         % (out, folder))
    if os.path.isdir(out):
        raise TraceError("trace '%s' is a folder; give a file name, e.g. '%s'"
                         % (out, os.path.join(out, "run.trace.gz")))
    for k, v in header:
        if "\n" in str(k) or "\n" in str(v) or ":" in str(k):
            raise TraceError("trace '%s': header %r: %r is not one line of 'key: value'" % (out, k, v))
    def write(tmp):
        with gzip.open(tmp, "wt", encoding="ascii", newline="\n") as f:
            f.write("# dmm-trace v1\n")
            for k, v in header:
                f.write("# %s: %s\n" % (k, v))
            for ln in lines:
                f.write(ln)
                f.write("\n")

    try:
        _files.write_whole(out, write)
    except OSError as e:
        raise TraceError("trace '%s': writing it failed: %s" % (out, e.strerror or e)) from None
    return out


def _pick_device(traces, device, where):
    busy = [d for d, t in enumerate(traces) if any(isinstance(e, dict) and e.get("action") == _ALLOC for e in t)]
    if device is None:
        if len(busy) > 1:
            raise TraceError("%s: devices %s all have allocations; choose one (device=N, or --device N)"
                             % (where, ", ".join(map(str, busy))))
        return busy[0] if busy else 0
    if not _int(device) or device < 0 or device >= len(traces):
        raise TraceError("%s: there is no device %r; device_traces has %d device(s) (0..%d)"
                         % (where, device, len(traces), len(traces) - 1))
    return device


def _segment_end_totals(snap, device, where, rounded):
    """(reserved, allocated) at the snapshot's end on `device`, from its segments (a live block counted
    as its request, rounded, like the events); None when it has none of that device."""
    segs = snap.get("segments")
    if not isinstance(segs, list):
        return None
    reserved = allocated = mine = 0
    for i, s in enumerate(segs):
        if not isinstance(s, dict):
            raise TraceError("%s: segments[%d] is a %s, not a dict" % (where, i, type(s).__name__))
        if s.get("device", device) != device:
            continue
        ts = s.get("total_size")
        if not _int(ts) or ts < 0:
            raise TraceError("%s: segments[%d] has no valid total_size (found %r)" % (where, i, ts))
        reserved += ts
        mine += 1
        for j, b in enumerate(s.get("blocks") or []):
            if not isinstance(b, dict) or not _int(b.get("size")):
                raise TraceError("%s: segments[%d].blocks[%d] lacks an integer size" % (where, i, j))
            if b.get("state") == "active_allocated":
                req = b.get("requested_size", b["size"])
                allocated += rounded(req if _int(req) and 0 < req <= b["size"] else b["size"])
    return (reserved, allocated) if mine > 0 else None


def from_torch_snapshot(snapshot, out_path, device=None, workload=None, native_peak_allocated=None,
                        native_peak_reserved=None, round_to=512):
    """Converts a PyTorch memory snapshot (the dict, or the path of its pickle) into a dmm trace at
    `out_path`. device: the device whose trace to take (default: the only one with allocations).
    Sizes: PyTorch's history records each request; it becomes `round_to` (512) bytes granularity, the
    block size both allocators give it (PyTorch may hand out a larger block when it does not split
    one; a history cannot say). The header's native_peak_allocated / native_peak_reserved are peaks
    over the recorded window, worked out from the events (sizes counted as above) and the snapshot's
    final segments (blocks live before the window included), unless given. Returns a dict of what was written (allocations, frees,
    untracked_frees: frees of blocks allocated before the history began, left out; peak_live_bytes:
    the trace's own, what `dmm replay` computes; streams; the two native peaks; device; path)."""
    if not _int(round_to) or round_to < 1:
        raise TraceError("round_to must be a positive number of bytes (512: PyTorch's and dmm's rounding), "
                         "not %r" % (round_to,))

    def rounded(n):
        return (n + round_to - 1) // round_to * round_to

    if isinstance(snapshot, dict):
        snap, where = snapshot, "snapshot"
    else:
        snap, where = load_torch_snapshot(snapshot), "snapshot '%s'" % os.fspath(snapshot)
    if not isinstance(snap, dict):
        raise TraceError("%s: the pickle holds a %s, not the dict torch.cuda.memory._snapshot() returns"
                         % (where, type(snap).__name__))
    traces = snap.get("device_traces")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise TraceError("%s: it has no 'device_traces' list of lists (keys: %s); record one with "
                         "torch.cuda.memory._record_memory_history() before taking the snapshot"
                         % (where, ", ".join(sorted(map(str, snap))) or "none"))
    if not traces:
        raise TraceError("%s: device_traces is empty: no device was recorded" % where)
    dev = _pick_device(traces, device, where)

    lines = []
    live = {}        # addr -> (id, size) of allocations in the trace, not yet freed
    streams = {}     # torch stream -> trace stream id
    t0 = None
    t_last = 0
    next_id = 1
    allocs = frees = untracked = folded = 0
    cur = peak = 0            # the trace's live bytes
    net_alloc = 0             # PyTorch's allocated bytes over the window, relative to its start
    alloc_curve = [0]
    zero = set()     # addresses of 0-byte allocations (left out, with their frees)
    net_seg = 0
    seg_curve = [0]
    for i, e in enumerate(traces[dev]):
        at = "%s: device_traces[%d][%d]" % (where, dev, i)
        if not isinstance(e, dict):
            raise TraceError("%s is a %s, not a dict" % (at, type(e).__name__))
        action = e.get("action")
        if action not in (_ALLOC, _FREE_REQ, _FREE_DONE) + _SEG_UP + _SEG_DOWN:
            continue  # snapshot, oom, and actions of later versions: nothing to replay
        addr, size = e.get("addr"), e.get("size")
        if not _int(addr) or not _int(size) or size < 0:
            raise TraceError("%s (action '%s') needs integer 'addr' and 'size' >= 0 (found addr=%r, size=%r)"
                             % (at, action, addr, size))
        if action in _SEG_UP or action in _SEG_DOWN:
            net_seg += size if action in _SEG_UP else -size
            seg_curve.append(net_seg)
            continue
        tus = e.get("time_us", None)
        if tus is None:
            t = t_last
        elif not _number(tus) or tus < 0:
            raise TraceError("%s (action '%s'): time_us must be a number >= 0 (found %r)" % (at, action, tus))
        else:
            if t0 is None:
                t0 = tus
            t = max(0, int(tus - t0))
        t_last = t
        if action == _ALLOC:
            if size == 0:
                zero.add(addr)  # nothing to replay
                continue
            zero.discard(addr)
            size = rounded(size)
            st = e.get("stream", 0)
            if not _int(st):
                raise TraceError("%s (alloc): stream must be an integer (found %r)" % (at, st))
            if addr in live:  # its free is missing (a wrapped history): free it first, as the allocator did
                old, osize = live.pop(addr)
                lines.append("%d f %d" % (t, old))
                frees += 1
                cur -= osize
                net_alloc -= osize
            sid = streams.get(st)
            if sid is None:  # 0 stays 0 (the default stream); the others 1..63 in order of first use
                nonzero = len(streams) - (1 if 0 in streams else 0)
                if st == 0 or nonzero < _MAX_STREAMS - 1:
                    sid = streams[st] = 0 if st == 0 else nonzero + 1
                else:
                    sid = _MAX_STREAMS - 1  # beyond the 64th stream: they share the last id
                    folded += 1
            live[addr] = (next_id, size)
            lines.append("%d a %d %d %d" % (t, next_id, size, sid))
            next_id += 1
            allocs += 1
            cur += size
            peak = max(peak, cur)
            net_alloc += size
            alloc_curve.append(net_alloc)
        else:
            if addr in live:
                old, osize = live.pop(addr)
                lines.append("%d f %d" % (t, old))
                frees += 1
                cur -= osize
                net_alloc -= osize
                alloc_curve.append(net_alloc)
            elif addr in zero:
                if action == _FREE_DONE:
                    zero.discard(addr)
            elif action == _FREE_REQ:
                untracked += 1  # allocated before the history began
                net_alloc -= rounded(size)
                alloc_curve.append(net_alloc)

    if allocs == 0:
        raise TraceError("%s: device %d has no 'alloc' events; was torch.cuda.memory._record_memory_history() "
                         "on while the workload ran?" % (where, dev))
    end = _segment_end_totals(snap, dev, where, rounded)
    if native_peak_allocated is None:
        native_peak_allocated = peak
        if end is not None and end[1] - net_alloc >= 0:
            start = end[1] - net_alloc
            native_peak_allocated = start + max(alloc_curve)
    if native_peak_reserved is None and end is not None and end[0] - net_seg >= 0:
        native_peak_reserved = end[0] - net_seg + max(seg_curve)
    name = workload
    if name is None:
        name = os.path.basename(os.fspath(out_path)).split(".")[0] or "torch-snapshot"
    header = [("workload", name), ("source", "torch.cuda.memory snapshot, device %d" % dev),
              ("native_peak_allocated", int(native_peak_allocated))]
    if native_peak_reserved is not None:
        header.append(("native_peak_reserved", int(native_peak_reserved)))
    header += [("untracked_frees", untracked), ("streams_folded", folded)]
    path = write_trace(out_path, lines, header)
    return {"path": path, "device": dev, "allocations": allocs, "frees": frees, "untracked_frees": untracked,
            "peak_live_bytes": peak, "streams": len(set(streams.values())),
            "streams_folded": folded, "native_peak_allocated": int(native_peak_allocated),
            "native_peak_reserved": None if native_peak_reserved is None else int(native_peak_reserved)}


_USAGE = """usage: python3 -m dmm.trace convert SNAPSHOT.pickle OUT.trace.gz [--device N] [--workload NAME]

Converts a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot after _record_memory_history)
into a dmm trace for `dmm replay`. The pickle is loaded as plain data only (no code runs).
Exit 0 done, 1 the snapshot could not be converted, 2 bad usage."""


def main(argv=None):
    """The command line; returns the exit status (prints, unlike the functions above)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_USAGE)
        return 0 if args else 2
    if args[0] != "convert":
        print("dmm.trace: unknown command '%s' (known: convert)\n\n%s" % (args[0], _USAGE), file=sys.stderr)
        return 2
    pos, opts = [], {"--device": None, "--workload": None}
    it = iter(args[1:])
    for a in it:
        if a in opts:
            v = next(it, None)
            if v is None:
                print("dmm.trace convert: %s needs a value\n\n%s" % (a, _USAGE), file=sys.stderr)
                return 2
            opts[a] = v
        elif a.startswith("--"):
            print("dmm.trace convert: unknown option '%s'\n\n%s" % (a, _USAGE), file=sys.stderr)
            return 2
        else:
            pos.append(a)
    if len(pos) != 2:
        print("dmm.trace convert: needs SNAPSHOT.pickle and OUT.trace.gz (got %d argument(s))\n\n%s"
              % (len(pos), _USAGE), file=sys.stderr)
        return 2
    dev = opts["--device"]
    if dev is not None:
        if not dev.isdigit():
            print("dmm.trace convert: --device needs a device number (0, 1, ...), not '%s'\n\n%s" % (dev, _USAGE),
                  file=sys.stderr)
            return 2
        dev = int(dev)
    try:
        r = from_torch_snapshot(pos[0], pos[1], device=dev, workload=opts["--workload"])
    except TraceError as e:
        print("dmm.trace convert: %s" % e, file=sys.stderr)
        return 1
    print("dmm.trace: wrote %s: device %d, %d allocations, %d frees (%d frees of earlier blocks left out), "
          "peak live %d bytes, PyTorch's peak allocated %d bytes"
          % (r["path"], r["device"], r["allocations"], r["frees"], r["untracked_frees"], r["peak_live_bytes"],
             r["native_peak_allocated"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
