# SPDX-License-Identifier: Apache-2.0
"""The warm-start profile: one JSON file that remembers how a workload grew on a device — its physical
peak and the layout its pool grew through — so that its next run commits that memory before its first
step (dmm.torch.warm_start) instead of growing through it in many small handles.

    {"dmm_profile": 2, "device": "NVIDIA H200", "device_bytes": 150754820096,
     "peak_physical_bytes": 14021951488, "layout": [[0, 25165824, 0], [25165824, 8388608, 0], ...]}

layout: the pool's handles as dmm.torch.layout() gives them ([offset, bytes, heap]); a warm start
commits each ahead at its own place (dmm.torch.warm_layout: the last run's peak, no more). A version 1
profile (no layout) is still read: its warm start commits the peak in large handles (dmm.torch.warm).

The file is untrusted (it outlives the process that wrote it, and anyone may edit it): read() checks
every field and refuses, with a ValueError that names the file, the field and what to do, a file
that is not exactly this shape, one written on another kind of device, or one whose peak does not fit
the device (the layout's entries are checked here for shape, and by the pool for every value). Before
it is parsed the text is scanned for its nesting (a profile nests 3 deep; one nested deeper than
MAX_DEPTH is refused, so that json's recursive parser never meets a file that would exhaust it) and
its size is bounded (MAX_FILE_BYTES). ValueError is the one error a bad file raises. A refusal changes
nothing. write() replaces the file whole or leaves it as it was, through a temporary created
exclusively (dmm._files: never through a name someone planted).
Pure Python: no torch, no GPU.
"""

import json
import os
import re

from . import _files

VERSION = 2
MAX_FILE_BYTES = 16 << 20  # a profile with a layout is ~40 bytes a handle: 16 MiB is ~400,000 handles
MAX_DEPTH = 32  # a profile nests 3 deep: {"layout": [[offset, bytes, heap], ...]}
FIELDS = ("dmm_profile", "device", "device_bytes", "peak_physical_bytes")  # version 1; 2 adds "layout"
# JSON strings (whole, escapes included) and the brackets outside them: the tokens that nest
_NESTING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)


def _refuse(path, what):
    return ValueError("dmm profile %s: %s; delete the file (the next run writes a new one) or pass another path"
                      % (path, what))


def _nesting_within(data, most):
    """Whether the JSON text `data` nests at most `most` deep, found iteratively in one pass (strings are
    skipped whole, so their brackets do not count)."""
    depth = 0
    for m in _NESTING.finditer(data):
        c = data[m.start()]
        if c == 0x5B or c == 0x7B:  # [ {
            depth += 1
            if depth > most:
                return False
        elif c == 0x5D or c == 0x7D:  # ] }
            depth -= 1
    return True


def _whole(path, obj, field):
    v = obj[field]
    if type(v) is not int or v < 0:  # bool is an int in Python: refused too
        raise _refuse(path, "%s is %r, not a whole number of bytes" % (field, v))
    return v


def read(path, device_name, device_bytes):
    """The peak physical bytes the profile at `path` holds for this device, or None when there is no
    file yet. device_name and device_bytes describe the device it is read for (the name and total
    memory torch reports); a profile written on another kind of device is refused."""
    obj = _load(path, device_name, device_bytes)
    return None if obj is None else obj["peak_physical_bytes"]


def read_layout(path, device_name, device_bytes):
    """The layout the profile at `path` holds (a list of [offset, bytes, heap]), or None when there is no
    file yet or it holds none (version 1). Refuses what read() refuses."""
    obj = _load(path, device_name, device_bytes)
    return None if obj is None else obj.get("layout")


def _load(path, device_name, device_bytes):
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _refuse(path, "it cannot be read (%s)" % e.strerror) from None
    if len(data) > MAX_FILE_BYTES:
        raise _refuse(path, "it is larger than %d bytes, so not a profile" % MAX_FILE_BYTES)
    if not _nesting_within(data, MAX_DEPTH):
        raise _refuse(path, "it nests more than %d deep, and a profile nests 3: not a profile" % MAX_DEPTH)
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _refuse(path, "it is not JSON (%s)" % e) from None
    if not isinstance(obj, dict):
        raise _refuse(path, "it holds a %s, not a JSON object" % type(obj).__name__)
    version = obj.get("dmm_profile")
    if type(version) is not int or version not in (1, VERSION):
        raise _refuse(path, "dmm_profile is %r; this dmm reads versions 1 and %d" % (version, VERSION))
    fields = FIELDS + (("layout",) if version == 2 else ())
    missing = [k for k in fields if k not in obj]
    extra = sorted(k for k in obj if k not in fields)
    if missing or extra:
        wrong = ["missing: " + ", ".join(missing)] if missing else []
        wrong += ["unknown: " + ", ".join(extra)] if extra else []
        raise _refuse(path, "its fields are not %s (%s)" % (", ".join(fields), "; ".join(wrong)))
    if not isinstance(obj["device"], str):
        raise _refuse(path, "device is %r, not a device name" % (obj["device"],))
    dev_bytes, peak = _whole(path, obj, "device_bytes"), _whole(path, obj, "peak_physical_bytes")
    if obj["device"] != device_name or dev_bytes != device_bytes:
        raise _refuse(path, "it was written on a %s with %d bytes, and this device is a %s with %d bytes"
                      % (obj["device"], dev_bytes, device_name, device_bytes))
    if peak == 0 or peak > device_bytes:
        raise _refuse(path, "peak_physical_bytes %d is not between 1 and the device's %d bytes" % (peak, device_bytes))
    if version == 2:
        layout = obj["layout"]
        if not isinstance(layout, list):
            raise _refuse(path, "layout is a %s, not a list of [offset, bytes, heap]" % type(layout).__name__)
        for i, span in enumerate(layout):
            if (not isinstance(span, list) or len(span) != 3
                    or any(type(x) is not int or x < 0 or x >= 1 << 64 for x in span)):
                raise _refuse(path, "layout entry %d is %r, not [offset, bytes, heap] of whole numbers" % (i, span))
    return obj


def write(path, device_name, device_bytes, peak_physical_bytes, layout=None):
    """Writes the profile whole (beside `path`, then renamed over it): version 2 with `layout` (a list
    of [offset, bytes, heap], dmm.torch.layout()), version 1 without. OSError propagates."""
    obj = {"dmm_profile": VERSION if layout is not None else 1, "device": device_name,
           "device_bytes": int(device_bytes), "peak_physical_bytes": int(peak_physical_bytes)}
    if layout is not None:
        obj["layout"] = [[int(x) for x in span] for span in layout]
    text = json.dumps(obj, separators=(",", ":")) + "\n"

    def fill(f):
        f.write(text.encode("utf-8"))

    _files.write_whole(os.fspath(path), fill)
