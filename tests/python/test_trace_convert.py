# SPDX-License-Identifier: Apache-2.0
"""dmm.trace.from_torch_snapshot and `python3 -m dmm.trace convert` (python/dmm/trace.py), without torch.

A snapshot in PyTorch's layout (torch.cuda.memory._snapshot(): `segments` with blocks, `device_traces`
with alloc / free_requested / free_completed / segment_* / oom entries) is built here by hand and
converted; the trace's lines are checked one by one, its header's native peaks against sums worked out
here, and, where the build's `dmm` tool is given (DMM_CLI), `dmm replay --json` reads it back to the
same peak live bytes. Malformed input — a pickle that names a function (it would run code), a file that
is no pickle, a missing file, no device_traces, an entry without a size, two busy devices and no choice,
an output folder that does not exist — raises a TraceError naming the file and the fault, and leaves the
output file as it was. Exit 0 = all held, 1 = a check failed, 77 = skipped.
"""

import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

import dmm.trace as dt  # noqa: E402

from _checks import check, failures, raises  # noqa: E402
MIB = 1 << 20


def ev(action, addr, size, t, stream=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t, "frames": []}


A, B, W, Z = 0x7F0000000000, 0x7F0000200000, 0x7F0000400000, 0x7F0000400000 + 4096


def snapshot():
    """Two segments at the end: S1 (2 MiB: a block c of 4096 live, the rest free) mapped inside the
    window, and S0 (2 MiB: W of 4096 live since before the window, Z freed in it)."""
    seg0 = {"device": 0, "address": W, "total_size": 2 * MIB, "allocated_size": 4096, "active_size": 4096,
            "requested_size": 4000, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [],
            "blocks": [{"address": W, "size": 4096, "requested_size": 4000, "state": "active_allocated",
                        "frames": []},
                       {"address": W + 4096, "size": 2 * MIB - 4096, "requested_size": 0, "state": "inactive",
                        "frames": []}]}
    seg1 = dict(seg0, address=A, blocks=[
        {"address": A, "size": 4096, "requested_size": 4096, "state": "active_allocated", "frames": []},
        {"address": A + 4096, "size": 2 * MIB - 4096, "requested_size": 0, "state": "inactive", "frames": []}])
    trace0 = [
        ev("segment_alloc", A, 2 * MIB, 100),
        ev("alloc", A, 1000, 110),                 # a   id 1: 1000 bytes asked, 1024 in the trace
        ev("alloc", B, 512, 120, stream=7777),     # b   id 2, stream 1
        {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 125},
        ev("free_requested", Z, 2048, 130),        # Z: allocated before the window
        ev("free_completed", Z, 2048, 131),
        ev("free_requested", A, 1000, 140),        # a freed (free_completed ignored)
        ev("free_completed", A, 1000, 141),
        ev("alloc", Z, 0, 142),                    # a 0-byte request: left out, with its free
        ev("free_requested", Z, 0, 143),
        ev("free_completed", Z, 0, 144),
        ev("alloc", A, 4096, 150),                 # c   id 3, the same address again
        {"action": "oom", "addr": 0, "size": 1 << 40, "stream": 0, "time_us": 155, "device_free": 5},
        ev("free_requested", B, 512, 160, stream=7777),
        ev("free_completed", B, 512, 170, stream=7777),
        ev("some_later_action", 0, 0, 175),
    ]
    return {"segments": [seg0, seg1], "device_traces": [trace0, []], "allocator_settings": {}}


def read_lines(path):
    with gzip.open(path, "rt") as f:
        return f.read().splitlines()


def replay_peak(path):
    cli = os.environ.get("DMM_CLI")
    if not cli or not os.path.exists(cli):
        print("NOTE: DMM_CLI not set: the trace is not replayed through `dmm replay`")
        return None
    out = subprocess.run([cli, "replay", path, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        return "dmm replay failed: " + out.stderr.strip()
    return json.loads(out.stdout)["peak_live_bytes"]


def main():
    tmp = tempfile.mkdtemp(prefix="dmm-test-trace-")
    out = os.path.join(tmp, "run.trace.gz")

    # ---- the conversion, line by line
    r = dt.from_torch_snapshot(snapshot(), out)
    lines = read_lines(out)
    check(lines[0] == "# dmm-trace v1", "the first line is the magic line")
    header = dict(l[2:].split(": ", 1) for l in lines if l.startswith("# ") and ": " in l)
    events = [l for l in lines if not l.startswith("#")]
    check(events == ["0 a 1 1024 0", "10 a 2 512 1", "30 f 1", "40 a 3 4096 0", "50 f 2"],
          "events: alloc/free pairs, sizes rounded to 512, ids in order, the address reused under a new id, "
          "stream 7777 -> 1, times from the first event, a 0-byte request left out (%s)" % events)
    check(header.get("workload") == "run", "workload from the file name (%s)" % header.get("workload"))
    # allocated over the window: W (4096) and Z (2048) live before it; +1024 +512 -2048 -1024 +4096 -512
    # start = end (W + c = 8192) - net (1024 + 512 - 2048 - 1024 + 4096 - 512 = 2048) = 6144;
    # peak = 6144 + max(0, 1024, 1536, -512, -1536, 2560, 2048) = 8704
    check(header.get("native_peak_allocated") == "8704",
          "native_peak_allocated counts the blocks live before the window (%s)" % header.get("native_peak_allocated"))
    check(header.get("native_peak_reserved") == str(4 * MIB),
          "native_peak_reserved from the segments (%s)" % header.get("native_peak_reserved"))
    check(r["allocations"] == 3 and r["frees"] == 2 and r["untracked_frees"] == 1 and r["peak_live_bytes"] == 4608
          and r["streams"] == 2 and r["device"] == 0, "the summary (%s)" % r)
    peak = replay_peak(out)
    check(peak is None or peak == 4608, "dmm replay reads it back to the same peak live bytes (%s)" % peak)

    # ---- the pickle file, through the command line
    snap_path = os.path.join(tmp, "snap.pickle")
    with open(snap_path, "wb") as f:
        pickle.dump(snapshot(), f)
    out2 = os.path.join(tmp, "cli.trace.gz")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, "-m", "dmm.trace", "convert", snap_path, out2, "--workload", "cli-run"],
                       capture_output=True, text=True, env=env)
    check(p.returncode == 0 and "3 allocations" in p.stdout, "the command line converts the pickle (%d: %s%s)"
          % (p.returncode, p.stdout.strip(), p.stderr.strip()))
    check(os.path.exists(out2) and read_lines(out2)[1] == "# workload: cli-run", "--workload goes into the header")
    for argv, what in ((["convert", snap_path], "one argument"), (["convert", snap_path, out2, "--device", "x"],
                       "a device that is no number"), (["frobnicate"], "an unknown command"),
                       (["convert", snap_path, out2, "--bogus"], "an unknown option")):
        p = subprocess.run([sys.executable, "-m", "dmm.trace"] + argv, capture_output=True, text=True, env=env)
        check(p.returncode == 2 and "usage" in p.stderr,
              "bad usage (%s) exits 2 (%d: %s)" % (what, p.returncode, p.stderr.strip()[:120]))

    # ---- malformed input: an error naming file and fault, the output untouched
    keep = os.path.join(tmp, "keep.trace.gz")
    with open(keep, "wb") as f:
        f.write(b"sentinel")

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch %s" % os.path.join(tmp, "PWNED"),))

    evil = os.path.join(tmp, "evil.pickle")
    with open(evil, "wb") as f:
        pickle.dump({"device_traces": [[Evil()]]}, f)
    ok, msg = raises(dt.TraceError, lambda: dt.from_torch_snapshot(evil, keep), evil, "refused", "system", "plain data")
    check(ok and not os.path.exists(os.path.join(tmp, "PWNED")),
          "a pickle naming a function is refused and runs nothing (%s)" % msg)
    text = os.path.join(tmp, "text.pickle")
    with open(text, "w") as f:
        f.write("this is not a pickle\n")
    ok, msg = raises(dt.TraceError, lambda: dt.from_torch_snapshot(text, keep), text, "not a readable pickle")
    check(ok, "a file that is no pickle (%s)" % msg)
    missing = os.path.join(tmp, "no-such.pickle")
    ok, msg = raises(dt.TraceError, lambda: dt.from_torch_snapshot(missing, keep), missing, "cannot read")
    check(ok, "a missing file (%s)" % msg)
    ok, msg = raises(dt.TraceError, lambda: dt.from_torch_snapshot({"segments": []}, keep), "no 'device_traces'",
                     "_record_memory_history")
    check(ok, "a snapshot without device_traces (%s)" % msg)
    bad = snapshot()
    del bad["device_traces"][0][1]["size"]
    ok, msg = raises(dt.TraceError, lambda: dt.from_torch_snapshot(bad, keep), "device_traces[0][1]", "'size'", "alloc")
    check(ok, "an entry without a size names its index (%s)" % msg)
    bad = snapshot()
    bad["device_traces"][0][2]["time_us"] = "soon"
    ok, msg = raises(dt.TraceError, lambda: dt.from_torch_snapshot(bad, keep), "device_traces[0][2]", "time_us")
    check(ok, "a time that is no number (%s)" % msg)
    two = snapshot()
    two["device_traces"][1] = [ev("alloc", B, 512, 1)]
    ok, msg = raises(dt.TraceError, lambda: dt.from_torch_snapshot(two, keep), "devices 0, 1", "--device")
    check(ok, "two busy devices and no choice (%s)" % msg)
    ok, msg = raises(dt.TraceError, lambda: dt.from_torch_snapshot(snapshot(), keep, device=5), "no device 5")
    check(ok, "a device that does not exist (%s)" % msg)
    empty = {"device_traces": [[ev("segment_alloc", A, 2 * MIB, 1)]]}
    ok, msg = raises(dt.TraceError, lambda: dt.from_torch_snapshot(empty, keep), "no 'alloc' events")
    check(ok, "a trace without allocations (%s)" % msg)
    ok, msg = raises(dt.TraceError, lambda: dt.from_torch_snapshot(snapshot(), os.path.join(tmp, "nope", "x.trace.gz")),
                     "does not exist")
    check(ok, "an output folder that does not exist (%s)" % msg)
    with open(keep, "rb") as f:
        check(f.read() == b"sentinel", "no failed conversion touched the output file")
    r = dt.from_torch_snapshot(two, keep, device=1)
    check(r["allocations"] == 1 and r["device"] == 1 and r["native_peak_reserved"] is None,
          "device=1 takes the second device; its reserved peak is unknown without its segments (%s)" % r)
    check(sorted(os.listdir(tmp)) == sorted(["run.trace.gz", "snap.pickle", "cli.trace.gz", "keep.trace.gz",
                                             "evil.pickle", "text.pickle"]),
          "no temporary file is left behind (%s)" % sorted(os.listdir(tmp)))

    # ---- more streams than a trace carries: the 64th and later share id 63
    many = {"device_traces": [[ev("alloc", A + k * 512, 512, k, stream=1000 + k) for k in range(70)]]}
    out3 = os.path.join(tmp, "streams.trace.gz")
    r = dt.from_torch_snapshot(many, out3)
    sids = [int(l.split()[4]) for l in read_lines(out3) if not l.startswith("#")]
    check(sids[:63] == list(range(1, 64)) and sids[63:] == [63] * 7 and r["streams_folded"] == 7 and
          r["streams"] == 63, "streams beyond the 64th are folded into id 63 (%s)" % r)
    peak = replay_peak(out3)
    check(peak is None or peak == 70 * 512, "dmm replay reads the folded trace (%s)" % peak)

    if not failures:
        shutil.rmtree(tmp)
    print("%d check(s) failed (files kept in %s)" % (len(failures), tmp) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
