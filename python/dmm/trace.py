# SPDX-License-Identifier: Apache-2.0
"""dmm traces (`# dmm-trace v1`, gzip; docs/trace-format.md) from PyTorch's memory snapshots.

    python3 -m dmm.trace convert SNAPSHOT.pickle OUT.trace.gz [--device N] [--workload NAME]
                                 [--max-input-bytes SIZE] [--max-depth N] [--max-records N]

    import dmm.trace
    dmm.trace.from_torch_snapshot("snap.pickle", "run.trace.gz")     # or the dict _snapshot() returns

A snapshot is what `torch.cuda.memory._snapshot()` returns, or the pickle `_dump_snapshot(path)` writes,
after `torch.cuda.memory._record_memory_history()`: a dict whose `device_traces[d]` lists the
allocator's events on device d. Each `alloc` becomes an allocation of its `size` — the request, which
PyTorch records, rounded up to 512 bytes as both PyTorch and dmm round it — on its stream; the first `free_requested` (or a `free_completed` without one) of that address becomes its
free; the segment events only feed the header's native_peak_reserved. `dmm replay OUT.trace.gz` then
shows what dmm would hold for the same sequence.

Pure Python, no torch needed. A snapshot file is untrusted input. Before it is unpickled its opcode
stream is checked (dmm._pickle_scan): plain data only (dicts, lists, strings, numbers: every class or
function a pickle names is refused, so loading one cannot run code), nested at most MAX_DEPTH deep (a
deeper one could crash the unpickler: PyTorch's nest about 6), at most MAX_INPUT_BYTES long (an
endless input ends there); the trace it makes has at most MAX_RECORDS event lines (a pickle references
one event for two bytes); the bounds are arguments and flags. The conversion is iterative and linear
in the pickle: containers the pickle shares (one list referenced by many entries) are counted once, and
no value is ever printed whole (a sentence describes it: its type, its size, a short prefix). Every
number is checked for its type, range and finiteness: addresses and sizes are whole numbers from 0 to
2^64 - 1, times finite numbers from 0 to 2^63. TraceError (a ValueError) is the one error bad input
raises, with a sentence naming the file, the entry and what is wrong; it writes nothing. The output
appears whole or not at all (dmm._files: a temporary created exclusively beside it, then renamed; a
FIFO or a device is written in place).
"""

import gzip
import io
import math
import os
import pickle
import sys

from . import _files, _pickle_scan

__all__ = ["TraceError", "load_torch_snapshot", "from_torch_snapshot", "write_trace", "main"]

_MAX_STREAMS = 64  # distinct stream ids a trace may carry (the reader's limit, tools/trace.h)
MAX_INPUT_BYTES = 4 << 30  # the largest snapshot pickle read by default (--max-input-bytes)
MAX_DEPTH = 100  # the deepest nesting a snapshot pickle may have by default (--max-depth); PyTorch's: ~6
MAX_RECORDS = 100000000  # the most event lines a trace gets by default (--max-records): dmm replay's default
_U64 = 1 << 64  # addresses and sizes are below this (the trace's fields are 64-bit)
_I64 = 1 << 63  # times and counts are below this
_ALLOC, _FREE_REQ, _FREE_DONE = "alloc", "free_requested", "free_completed"
_SEG_UP = ("segment_alloc", "segment_map")
_SEG_DOWN = ("segment_free", "segment_unmap")
_ACTIONS = frozenset((_ALLOC, _FREE_REQ, _FREE_DONE) + _SEG_UP + _SEG_DOWN)


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


def _bound(value, name, default):
    if value is None:
        return default
    if not _whole(value, 1, _I64):
        raise TraceError("%s must be a whole number from 1 to 2^63 - 1, not %s" % (name, _show(value)))
    return value


def load_torch_snapshot(path, max_input_bytes=None, max_depth=None):
    """The dict of a snapshot pickle (`torch.cuda.memory._dump_snapshot`), loaded as plain data only,
    after its opcode stream passed the checks (the module's opening): at most max_input_bytes long
    (default MAX_INPUT_BYTES) and nested at most max_depth deep (default MAX_DEPTH)."""
    p = os.fspath(path)
    max_input_bytes = _bound(max_input_bytes, "max_input_bytes", MAX_INPUT_BYTES)
    max_depth = _bound(max_depth, "max_depth", MAX_DEPTH)
    try:
        with open(p, "rb") as f:
            data = _pickle_scan.read_plain_pickle(f, max_input_bytes, max_depth)
    except OSError as e:
        raise TraceError("snapshot '%s': cannot read it: %s" % (p, e.strerror or e)) from None
    except _pickle_scan.ScanError as e:
        if e.kind == "code" and e.data is not None:
            try:  # the bytes are checked up to that opcode, where the refusing unpickler stops and names it
                _PlainUnpickler(io.BytesIO(e.data)).load()
            except _Refused as named:
                raise TraceError("snapshot '%s': refused: %s" % (p, named)) from None
            except Exception:  # noqa: BLE001 (the scan's own sentence stands)
                pass
        if e.kind == "malformed":
            raise TraceError("snapshot '%s': not a readable pickle (%s); give the file "
                             "torch.cuda.memory._dump_snapshot() wrote" % (p, e)) from None
        hint = {"depth": " (max_depth=N, or --max-depth N, raises the bound)",
                "size": " (max_input_bytes=SIZE, or --max-input-bytes SIZE, raises the bound)"}.get(e.kind, "")
        raise TraceError("snapshot '%s': refused: %s%s" % (p, e, hint)) from None
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except _Refused as e:
        raise TraceError("snapshot '%s': refused: %s" % (p, e)) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, OverflowError, RecursionError) as e:
        raise TraceError("snapshot '%s': not a readable pickle (%s: %s); give the file "
                         "torch.cuda.memory._dump_snapshot() wrote" % (p, type(e).__name__, _show(str(e))))\
            from None


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _whole(v, lo=0, hi=_U64):
    """Whether v is a whole number (not a bool) with lo <= v < hi."""
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v < hi


def _time(v):
    """Whether v is a time: a finite number from 0 to 2^63 (an int or a float, not a bool)."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return 0 <= v < _I64
    return isinstance(v, float) and math.isfinite(v) and 0 <= v < _I64


def _show(v):
    """A short description of any value, for a sentence: never recursive and never long (a value from a
    file may be nested a million deep, or an integer of a million digits)."""
    if v is None or isinstance(v, (bool, float)):
        return repr(v)
    if isinstance(v, int):
        return repr(v) if -_U64 < v < _U64 else "an integer of %d bits" % v.bit_length()
    if isinstance(v, (str, bytes)):
        text = repr(v[:40])
        return text + ("... (%d long)" % len(v) if len(v) > 40 else "")
    if isinstance(v, (list, tuple, dict, set, frozenset)):
        return "a %s of %d item%s" % (type(v).__name__, len(v), "" if len(v) == 1 else "s")
    return "a %s" % type(v).__name__


def write_trace(out_path, lines, header):
    """Writes a trace: `header` is a list of (key, value) for `# key: value` lines after the magic line,
    `lines` the event lines ("<t_us> a <id> <bytes> <stream>" / "<t_us> f <id>"). Written beside the
    target and renamed over it, so the file is whole or absent (a FIFO or a device: written in place)."""
    out = os.path.abspath(os.fspath(out_path))
    folder = os.path.dirname(out)
    if not os.path.isdir(folder):
        raise TraceError("trace '%s': the folder '%s' does not exist; create it or choose another file"
                         % (out, folder))
    if os.path.isdir(out):
        raise TraceError("trace '%s' is a folder; give a file name, e.g. '%s'"
                         % (out, os.path.join(out, "run.trace.gz")))
    for k, v in header:
        if not isinstance(k, str) or not isinstance(v, (str, int)) or isinstance(v, bool) or "\n" in k or ":" in k \
                or "\n" in str(v) or not str(v).isascii():
            raise TraceError("trace '%s': header %s: %s is not one line of 'key: value' in ASCII"
                             % (out, _show(k), _show(v)))

    def write(f):
        with gzip.GzipFile(filename="", mode="wb", fileobj=f) as gz:
            with io.TextIOWrapper(gz, encoding="ascii", newline="\n") as text:
                text.write("# dmm-trace v1\n")
                for k, v in header:
                    text.write("# %s: %s\n" % (k, v))
                for ln in lines:
                    text.write(ln)
                    text.write("\n")

    try:
        _files.write_whole(out, write)
    except OSError as e:
        raise TraceError("trace '%s': writing it failed: %s" % (out, e.strerror or e)) from None
    return out


def _pick_device(traces, device, where):
    # a pickle may list one event list for many devices (memo references cost two bytes each): each
    # distinct list is looked through once, so the work follows the pickle's size, not its references
    seen = {}
    busy = []
    for d, t in enumerate(traces):
        if id(t) not in seen:
            seen[id(t)] = any(isinstance(e, dict) and e.get("action") == _ALLOC for e in t)
        if seen[id(t)]:
            busy.append(d)
    if device is None:
        if len(busy) > 1:
            raise TraceError("%s: devices %s all have allocations; choose one (device=N, or --device N)"
                             % (where, ", ".join(map(str, busy))))
        return busy[0] if busy else 0
    if not _whole(device, 0, len(traces)):
        raise TraceError("%s: there is no device %s; device_traces has %d device(s) (0..%d)"
                         % (where, _show(device), len(traces), len(traces) - 1))
    return device


def _segment_end_totals(snap, device, where, rounded):
    """(reserved, allocated) at the snapshot's end on `device`, from its segments (a live block counted
    as its request, rounded, like the events); None when it has none of that device. A blocks list that
    several segments share is summed once (its sum is kept by identity), so the work is linear in the
    pickle however often it references one list."""
    segs = snap.get("segments")
    if not isinstance(segs, list):
        return None
    reserved = allocated = mine = 0
    sums = {}  # id(blocks list) -> the allocated bytes it holds
    for i, s in enumerate(segs):
        if not isinstance(s, dict):
            raise TraceError("%s: segments[%d] is %s, not a dict" % (where, i, _show(s)))
        if s.get("device", device) != device:
            continue
        ts = s.get("total_size")
        if not _whole(ts):
            raise TraceError("%s: segments[%d] has no valid total_size, a whole number from 0 to 2^64 - 1 (found %s)"
                             % (where, i, _show(ts)))
        reserved += ts
        mine += 1
        blocks = s.get("blocks")
        if blocks is None:
            continue
        if not isinstance(blocks, list):
            raise TraceError("%s: segments[%d].blocks is %s, not a list" % (where, i, _show(blocks)))
        if id(blocks) not in sums:
            total = 0
            for j, b in enumerate(blocks):
                size = b.get("size") if isinstance(b, dict) else None
                if not _whole(size):
                    raise TraceError("%s: segments[%d].blocks[%d] lacks a size, a whole number from 0 to 2^64 - 1 "
                                     "(found %s)" % (where, i, j, _show(size if isinstance(b, dict) else b)))
                if b.get("state") == "active_allocated":
                    req = b.get("requested_size", size)
                    total += rounded(req if _whole(req, 1, size + 1) else size)
            sums[id(blocks)] = total
        allocated += sums[id(blocks)]
    return (reserved, allocated) if mine > 0 else None


def from_torch_snapshot(snapshot, out_path, device=None, workload=None, native_peak_allocated=None,
                        native_peak_reserved=None, round_to=512, max_input_bytes=None, max_depth=None,
                        max_records=None):
    """Converts a PyTorch memory snapshot (the dict, or the path of its pickle) into a dmm trace at
    `out_path`. device: the device whose trace to take (default: the only one with allocations).
    Sizes: PyTorch's history records each request; it becomes `round_to` (512) bytes granularity, the
    block size both allocators give it (PyTorch may hand out a larger block when it does not split
    one; a history cannot say). The header's native_peak_allocated / native_peak_reserved are peaks
    over the recorded window, worked out from the events (sizes counted as above) and the snapshot's
    final segments (blocks live before the window included), unless given. max_input_bytes and
    max_depth bound a pickle read from a path (load_torch_snapshot); max_records (default MAX_RECORDS,
    what `dmm replay` reads by default) the trace's event lines: a pickle references one event dict
    for two bytes, so this bounds the conversion's memory too. Returns a dict of what was written
    (allocations, frees, untracked_frees: frees of blocks allocated before the history began, left out;
    peak_live_bytes: the trace's own, what `dmm replay` computes; streams; the two native peaks; device;
    path). TraceError, and nothing written, for any malformed input."""
    max_records = _bound(max_records, "max_records", MAX_RECORDS)
    if not _whole(round_to, 1, 1 << 32):
        raise TraceError("round_to must be a whole number of bytes from 1 to 2^32 - 1 (512: PyTorch's and dmm's "
                         "rounding), not %s" % (_show(round_to),))
    for name, given in (("native_peak_allocated", native_peak_allocated), ("native_peak_reserved",
                                                                              native_peak_reserved)):
        if given is not None and not _whole(given):
            raise TraceError("%s must be a whole number of bytes from 0 to 2^64 - 1, not %s" % (name, _show(given)))

    def rounded(n):
        return (n + round_to - 1) // round_to * round_to

    if isinstance(snapshot, dict):
        snap, where = snapshot, "snapshot"
    else:
        snap = load_torch_snapshot(snapshot, max_input_bytes, max_depth)
        where = "snapshot '%s'" % os.fspath(snapshot)
    if not isinstance(snap, dict):
        raise TraceError("%s: the pickle holds %s, not the dict torch.cuda.memory._snapshot() returns"
                         % (where, _show(snap)))
    traces = snap.get("device_traces")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        keys = sorted(_show(k) for k in list(snap)[:20]) + (["..."] if len(snap) > 20 else [])
        raise TraceError("%s: it has no 'device_traces' list of lists (keys: %s); record one with "
                         "torch.cuda.memory._record_memory_history() before taking the snapshot"
                         % (where, ", ".join(keys) or "none"))
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
    cur = peak = total = 0    # the trace's live bytes, their peak, all its allocations' bytes
    net_alloc = 0             # PyTorch's allocated bytes over the window, relative to its start
    alloc_curve = [0]
    zero = set()     # addresses of 0-byte allocations (left out, with their frees)
    net_seg = 0
    seg_curve = [0]
    for i, e in enumerate(traces[dev]):
        if len(lines) > max_records:
            raise TraceError("%s: device %d's events make more than %d trace records (at device_traces[%d][%d]), "
                             "the most this conversion writes (max_records=N, or --max-records N, raises the bound; "
                             "`dmm replay --max-records` reads such a trace)" % (where, dev, max_records, dev, i))
        at = "%s: device_traces[%d][%d]" % (where, dev, i)
        if not isinstance(e, dict):
            raise TraceError("%s is %s, not a dict" % (at, _show(e)))
        action = e.get("action")
        if not isinstance(action, str) or action not in _ACTIONS:
            continue  # snapshot, oom, and actions of later versions: nothing to replay
        addr, size = e.get("addr"), e.get("size")
        if not _whole(addr) or not _whole(size, 0, _I64):
            raise TraceError("%s (action '%s') needs 'addr', a whole number from 0 to 2^64 - 1, and 'size', one "
                             "from 0 to 2^63 - 1 (found addr=%s, size=%s)" % (at, action, _show(addr), _show(size)))
        if action in _SEG_UP or action in _SEG_DOWN:
            net_seg += size if action in _SEG_UP else -size
            seg_curve.append(net_seg)
            continue
        tus = e.get("time_us", None)
        if tus is None:
            t = t_last
        elif not _time(tus):
            raise TraceError("%s (action '%s'): time_us must be a finite number from 0 to 2^63 (found %s)"
                             % (at, action, _show(tus)))
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
            if not _whole(st, -_I64, _U64):
                raise TraceError("%s (alloc): stream must be a whole number from -2^63 to 2^64 - 1 (found %s)"
                                 % (at, _show(st)))
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
            total += size
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

    if len(lines) > max_records:
        raise TraceError("%s: device %d's events make more than %d trace records, the most this conversion writes "
                         "(max_records=N, or --max-records N, raises the bound)" % (where, dev, max_records))
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
    for name, value in (("the sum of its allocations", total), ("native_peak_allocated", native_peak_allocated),
                        ("native_peak_reserved", native_peak_reserved or 0)):
        if value >= _U64:
            raise TraceError("%s: %s comes to 2^64 bytes or more, beyond the 64 bits a trace's byte counts hold; "
                             "its sizes are not a real run's" % (where, name))
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
                                        [--max-input-bytes SIZE] [--max-depth N] [--max-records N]

Converts a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot after _record_memory_history)
into a dmm trace for `dmm replay`. The pickle is checked, then loaded as plain data only (no code runs).
  --device N               the device whose events to take (default: the only one with allocations)
  --workload NAME          the trace's workload name (default: OUT's name)
  --max-input-bytes SIZE   the largest snapshot read (default 4G; K, M, G suffixes); a larger or
                           endless input is refused
  --max-depth N            the deepest nesting the pickle may have (default 100; PyTorch's is ~6)
  --max-records N          the most event lines the trace may get (default 100000000, what
                           dmm replay reads by default)
Exit 0 done, 1 the snapshot could not be converted, 2 bad usage."""

_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _whole_arg(text, sizes):
    """The value of a numeric option (digits, and with sizes a K/M/G suffix), or None when it is not one."""
    digits, suffix = (text[:-1], text[-1:].upper()) if sizes and text[-1:].upper() in "KMG" else (text, "")
    if not digits.isascii() or not digits.isdigit() or len(digits) > 18:
        return None
    value = int(digits) * _SUFFIXES[suffix]
    return value if 1 <= value < _I64 else None


def main(argv=None):
    """The command line; returns the exit status (prints, unlike the functions above)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_USAGE)
        return 0 if args else 2
    if args[0] != "convert":
        print("dmm.trace: unknown command '%s' (known: convert)\n\n%s" % (args[0], _USAGE), file=sys.stderr)
        return 2
    pos, opts = [], {"--device": None, "--workload": None, "--max-input-bytes": None, "--max-depth": None,
                     "--max-records": None}
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
    numbers = {}
    for opt, sizes, what, example in (("--device", False, "a device number", "0, 1, ..."),
                                      ("--max-input-bytes", True, "a size in bytes", "8G"),
                                      ("--max-depth", False, "a whole number of levels", "200"),
                                      ("--max-records", False, "a whole number of records", "200000000")):
        text = opts[opt]
        if text is None:
            numbers[opt] = None
            continue
        value = _whole_arg(text, sizes) if text != "0" or opt != "--device" else 0
        if value is None:
            print("dmm.trace convert: %s needs %s (e.g. %s), not '%s'\n\n%s" % (opt, what, example, text[:40], _USAGE),
                  file=sys.stderr)
            return 2
        numbers[opt] = value
    try:
        r = from_torch_snapshot(pos[0], pos[1], device=numbers["--device"], workload=opts["--workload"],
                                max_input_bytes=numbers["--max-input-bytes"], max_depth=numbers["--max-depth"],
                                max_records=numbers["--max-records"])
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
