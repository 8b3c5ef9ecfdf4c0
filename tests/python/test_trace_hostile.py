# SPDX-License-Identifier: Apache-2.0
"""The snapshot converter (python/dmm/trace.py, python/dmm/_pickle_scan.py) against pickles made to hurt
it (issue 35, item 14), without torch.

Each hostile file is converted in a child interpreter (`python3 -m dmm.trace convert`, or a call of
from_torch_snapshot), so that a crash shows here as a failure with its signal instead of ending this
test; the child's time limit (120 s) is only a safety net for a conversion that would not end, and no
check is on a time. What is proven:
  - the scan itself (dmm._pickle_scan): every plain-data pickle of random shape, protocols 0 to 5,
    passes at its exact nesting and is refused one level below (the depth is counted, not guessed),
    and comes back byte for byte; one that pickle writes as a call (a set below protocol 4, a bytearray
    below 5, bytes below 3) is refused as code, as the unpickler's find_class refused it before;
  - depth: a tuple nested 200,000 deep used as a dict key (it crashed the unpickler with SIGSEGV), one
    used as an address (RecursionError), a list nested as deep, and a normal snapshot under a
    --max-depth below its own nesting, are refused with TraceError's sentence naming the bound and the
    flag; the normal one converts with the default;
  - work linear in the pickle: 100,000 segments that share one list of 100,000 blocks, and 100,000
    devices that share one event list (under a megabyte each, 10^10 steps when walked per reference),
    convert, with the totals the shared lists imply; one event referenced 100,000 times ends at
    --max-records;
  - numbers: a NaN, an infinite, a negative and a 5,000-digit time, a 5,000-digit size and address, a
    stream beyond 64 bits, a bool where a size goes, a segment whose blocks are no list, totals beyond
    64 bits: each a TraceError naming the entry and the range, never ValueError, OverflowError or
    TypeError; --device of 5,000 digits is bad usage (exit 2);
  - streams: a truncated pickle, bytes that are no pickle (/dev/zero: refused at its first byte), and a
    writer that never stops (refused at --max-input-bytes) end with a sentence;
  - outputs: a FIFO given as OUT is written in place and stays a FIFO.
Exit 0 = all held, 1 = a check failed.
"""

import gzip
import io
import os
import pickle
import random
import shutil
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

from _checks import check, failures  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
DEPTH = 200000


def convert(snap_path, out_path, *options):
    """(exit code, stderr) of `python3 -m dmm.trace convert` in a child; a signal shows as -N."""
    try:
        p = subprocess.run([sys.executable, "-m", "dmm.trace", "convert", snap_path, out_path] + list(options),
                           capture_output=True, text=True, env=ENV, timeout=120)
    except subprocess.TimeoutExpired:
        return None, "(still converting after 120 s: the safety net stopped it)"
    return p.returncode, p.stderr.strip()


def refused(what, snap_path, out_path, fragments, *options, code=1):
    rc, err = convert(snap_path, out_path, *options)
    ok = rc == code and err.startswith("dmm.trace convert: ") and "Traceback" not in err and all(
        f in err for f in fragments)
    check(ok, "%s: exit %s, %s" % (what, rc, err[:300]))


def s8(text):
    b = text.encode()
    return b"\x8c" + bytes([len(b)]) + b  # SHORT_BINUNICODE


def ev(action, addr, size, t, stream=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t, "frames": []}


def write_pickle(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=4)


def nesting(v):
    if isinstance(v, (list, tuple, set, frozenset)):
        return 1 + max((nesting(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((max(nesting(k), nesting(x)) for k, x in v.items()), default=0)
    return 0


def random_plain(rnd, levels):
    if levels == 0 or rnd.random() < 0.2:
        return rnd.choice([None, True, False, 0, 255, 65536, -2 ** 31, 2 ** 63, -10 ** 40, 1.5, float("inf"), "",
                           "x" * 300, "\u00e9\n", b"", b"b" * 300, bytearray(b"ab")])
    n = rnd.randint(0, 4)
    kind = rnd.choice(["list", "tuple", "dict", "set", "frozenset"])
    if kind == "list":
        return [random_plain(rnd, levels - 1) for _ in range(n)]
    if kind == "tuple":
        return tuple(random_plain(rnd, levels - 1) for _ in range(n))
    if kind == "dict":
        return {rnd.choice([str(i), i, (i,)]): random_plain(rnd, levels - 1) for i in range(n)}
    return {(i, "x") for i in range(n)} if kind == "set" else frozenset(range(n))


def pickled_as_a_call(v, proto):
    """Whether pickle writes v (or something in it) as a call: a bytearray below protocol 5, a set or a
    frozenset below 4, bytes below 3."""
    if isinstance(v, bytearray):
        return proto < 5
    if isinstance(v, bytes):
        return proto < 3
    if isinstance(v, set) and proto < 4:
        return True
    if isinstance(v, frozenset) and proto < 4:
        return True
    if isinstance(v, (list, tuple, set, frozenset)):
        return any(pickled_as_a_call(x, proto) for x in v)
    if isinstance(v, dict):
        return any(pickled_as_a_call(k, proto) or pickled_as_a_call(x, proto) for k, x in v.items())
    return False


def scan_counts_depth_exactly():
    from dmm import _pickle_scan as ps
    rnd = random.Random(35)
    wrong = []
    for _ in range(400):
        value = random_plain(rnd, rnd.randint(0, 7))
        depth = nesting(value)
        for proto in range(6):
            data = pickle.dumps(value, protocol=proto)
            try:
                if ps.read_plain_pickle(io.BytesIO(data), 1 << 30, max(depth, 1)) != data:
                    wrong.append("protocol %d: not the same bytes back" % proto)
            except ps.ScanError as e:
                if e.kind != "code" or not pickled_as_a_call(value, proto):
                    wrong.append("protocol %d, depth %d: %s" % (proto, depth, e))
                continue
            if depth >= 2:
                try:
                    ps.read_plain_pickle(io.BytesIO(data), 1 << 30, depth - 1)
                    wrong.append("protocol %d: depth %d accepted under a bound of %d" % (proto, depth, depth - 1))
                except ps.ScanError as e:
                    if e.kind != "depth":
                        wrong.append("protocol %d: %s" % (proto, e))
    check(not wrong, "the scan passes plain pickles of protocols 0-5 at their depth and refuses them one below "
          "(%d wrong: %s)" % (len(wrong), wrong[:3]))


def main():
    tmp = tempfile.mkdtemp(prefix="dmm-test-trace-hostile-")
    scan_counts_depth_exactly()
    out = os.path.join(tmp, "out.trace.gz")

    def at(name):
        return os.path.join(tmp, name)

    # ---- depth
    deep_tuple = b")" + b"\x85" * DEPTH  # (((...),),) DEPTH deep: TUPLE1 again and again
    with open(at("deepkey.pickle"), "wb") as f:  # {deep: 1}: the unpickler hashes the key
        f.write(b"\x80\x04}" + deep_tuple + b"K\x01s.")
    refused("a deep tuple as a dict key", at("deepkey.pickle"), out, ["nested more than 100 deep", "--max-depth"])
    with open(at("deepaddr.pickle"), "wb") as f:  # {"device_traces": [[{"action": "alloc", "addr": deep}]]}
        f.write(b"\x80\x04}" + s8("device_traces") + b"]]}" + s8("action") + s8("alloc") + b"s" + s8("addr")
                + deep_tuple + b"s" + s8("size") + b"K\x01sa" + b"as.")
    refused("a deep tuple as an address", at("deepaddr.pickle"), out, ["nested more than 100 deep"])
    with open(at("deeplist.pickle"), "wb") as f:  # [[[...]]] by APPEND
        f.write(b"\x80\x04" + b"]" * DEPTH + b"a" * (DEPTH - 1) + b".")
    refused("a deep list", at("deeplist.pickle"), out, ["nested more than 100 deep"])
    normal = {"segments": [], "device_traces": [[ev("alloc", 4096, 512, 1), ev("free_requested", 4096, 512, 2)]]}
    write_pickle(at("normal.pickle"), normal)
    refused("a normal snapshot under --max-depth 4", at("normal.pickle"), out, ["nested more than 4 deep"],
            "--max-depth", "4")
    rc, err = convert(at("normal.pickle"), out)
    check(rc == 0, "a normal snapshot converts with the default depth (exit %s %s)" % (rc, err[:200]))

    # ---- work linear in the pickle, however often it references one list
    n = 100000
    blocks = [{"address": 0, "size": 1024, "requested_size": 1000, "state": "active_allocated", "frames": []}] * n
    seg = {"device": 0, "address": 0, "total_size": 2 << 20, "blocks": blocks}
    shared = {"segments": [seg] * n, "device_traces": [[ev("alloc", 4096, 512, 1)]]}
    write_pickle(at("shared-segments.pickle"), shared)
    size = os.path.getsize(at("shared-segments.pickle"))
    rc, err = convert(at("shared-segments.pickle"), out)
    header = {}
    if rc == 0:
        with gzip.open(out, "rt") as f:
            header = dict(l[2:].rstrip("\n").split(": ", 1) for l in f if l.startswith("# ") and ": " in l)
    # reserved: n segments of 2 MiB; allocated: n x n blocks of 1000 bytes asked, 1024 rounded, before the
    # window, plus the window's one allocation of 512 (whose free is missing)
    check(rc == 0 and header.get("native_peak_reserved") == str(n * (2 << 20))
          and header.get("native_peak_allocated") == str(n * n * 1024),
          "%d segments sharing one list of %d blocks (a %d-byte pickle) convert, counting the shared list "
          "once per segment (exit %s %s, header %s)" % (n, n, size, rc, err[:200], header))
    # each device's list is looked through for an allocation: here the only one comes last
    events = [ev("segment_map", 0, 2 << 20, 0)] * (n - 1) + [ev("alloc", 4096, 512, 1)]
    write_pickle(at("shared-devices.pickle"), {"device_traces": [events] * n})
    rc, err = convert(at("shared-devices.pickle"), out, "--device", "7")
    check(rc == 0, "%d devices sharing one list of %d events (a %d-byte pickle) convert (exit %s %s)"
          % (n, n, os.path.getsize(at("shared-devices.pickle")), rc, err[:200]))
    # one event dict referenced 100,000 times (two bytes each): the records bound holds the trace's size
    write_pickle(at("repeated.pickle"), {"device_traces": [[ev("alloc", 4096, 512, 1)] * n]})
    refused("one event referenced %d times, under --max-records 1000" % n, at("repeated.pickle"), out,
            ["more than 1000 trace records", "--max-records"], "--max-records", "1000")

    # ---- numbers: every one checked for type, range and finiteness
    big = 10 ** 5000
    cases = [
        ("a NaN time", ev("alloc", 4096, 512, float("nan")), ["device_traces[0][0]", "time_us", "finite"]),
        ("an infinite time", ev("alloc", 4096, 512, float("inf")), ["time_us", "finite", "inf"]),
        ("a negative time", ev("alloc", 4096, 512, -1.5), ["time_us", "-1.5"]),
        ("a 5,000-digit time", ev("alloc", 4096, 512, big), ["time_us", "an integer of 16610 bits"]),
        ("a 5,000-digit size", ev("alloc", 4096, big, 1), ["'size'", "an integer of 16610 bits"]),
        ("a 5,000-digit address", ev("alloc", big, 512, 1), ["'addr'", "an integer of 16610 bits"]),
        ("a stream beyond 64 bits", ev("alloc", 4096, 512, 1, stream=1 << 64), ["stream", "2^64"]),
        ("a bool for a size", ev("alloc", 4096, True, 1), ["'size'", "True"]),
    ]
    for what, e, fragments in cases:
        write_pickle(at("number.pickle"), {"device_traces": [[e]]})
        refused(what, at("number.pickle"), out, fragments)
    write_pickle(at("blocks.pickle"), {"segments": [{"device": 0, "total_size": 1, "blocks": 7}],
                                       "device_traces": [[ev("alloc", 4096, 512, 1)]]})
    refused("a segment whose blocks are no list", at("blocks.pickle"), out, ["segments[0].blocks is 7"])
    write_pickle(at("total.pickle"), {"device_traces": [[ev("alloc", 4096 * (k + 1), (1 << 63) - 512, k)
                                                          for k in range(4)]]})
    refused("allocations summing beyond 64 bits", at("total.pickle"), out, ["64 bits"])
    refused("--device of 5,000 digits", at("normal.pickle"), out, ["--device needs a device number"],
            "--device", "9" * 5000, code=2)

    # ---- streams that are not a pickle, or never end
    with open(at("normal.pickle"), "rb") as f:
        whole = f.read()
    with open(at("cut.pickle"), "wb") as f:
        f.write(whole[:len(whole) // 2])
    refused("a truncated pickle", at("cut.pickle"), out, ["not a readable pickle", "truncated"])
    refused("/dev/zero", "/dev/zero", out, ["not a readable pickle", "0x00"])
    fifo = at("endless.pickle")
    os.mkfifo(fifo)

    def endless():  # a valid start, then NONE opcodes for ever, until the reader goes
        try:
            with open(fifo, "wb") as f:
                f.write(b"\x80\x04(")
                while True:
                    f.write(b"N" * 65536)
        except OSError:
            pass

    writer = threading.Thread(target=endless, daemon=True)
    writer.start()
    refused("a writer that never stops", fifo, out, ["more than 1048576 bytes", "--max-input-bytes"],
            "--max-input-bytes", "1M")
    writer.join(30)
    check(not writer.is_alive(), "the endless writer saw its reader go")

    # ---- an output FIFO is written in place and stays
    out_fifo = at("out.fifo")
    os.mkfifo(out_fifo)
    got = []

    def reader():
        with open(out_fifo, "rb") as f:
            got.append(f.read())

    r = threading.Thread(target=reader, daemon=True)
    r.start()
    rc, err = convert(at("normal.pickle"), out_fifo)
    r.join(30)
    text = gzip.decompress(got[0]).decode() if got and got[0] else ""
    check(rc == 0 and text.startswith("# dmm-trace v1") and os.path.exists(out_fifo)
          and not os.path.isfile(out_fifo), "a FIFO as OUT is written in place and stays (exit %s %s)"
          % (rc, err[:200]))
    leftovers = [name for name in os.listdir(tmp) if ".dmm-" in name]
    check(not leftovers, "no temporary is left behind (%s)" % leftovers)

    if not failures:
        shutil.rmtree(tmp)
    print("%d check(s) failed (files kept in %s)" % (len(failures), tmp) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
