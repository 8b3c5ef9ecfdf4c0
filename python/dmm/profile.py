"""The warm-start profile: one small JSON file that remembers how much physical memory a workload held at
its peak on a device, so that its next run commits that much before its first step
(dmm.torch.warm_start) instead of growing through it in many small handles.

    {"dmm_profile": 1, "device": "NVIDIA H200", "device_bytes": 150754820096,
     "peak_physical_bytes": 14021951488}

The file is untrusted (it outlives the process that wrote it, and anyone may edit it): read() checks
every field and refuses, with a ValueError that names the file, the field and what to do, a file
that is not exactly this shape, one written on another kind of device, or one whose peak does not fit
the device. A refusal changes nothing. write() replaces the file whole or leaves it as it was.
Pure Python: no torch, no GPU.
"""

import json
import os

from . import _files

VERSION = 1
MAX_FILE_BYTES = 64 << 10  # a profile is ~150 bytes; anything this large is not one
FIELDS = ("dmm_profile", "device", "device_bytes", "peak_physical_bytes")


def _refuse(path, what):
    return ValueError("dmm profile %s: %s; delete the file (the next run writes a new one) or pass another path"
                      % (path, what))


def _whole(path, obj, field):
    v = obj[field]
    if type(v) is not int or v < 0:  # bool is an int in Python: refused too
        raise _refuse(path, "%s is %r, not a whole number of bytes" % (field, v))
    return v


def read(path, device_name, device_bytes):
    """The peak physical bytes the profile at `path` holds for this device, or None when there is no
    file yet. device_name and device_bytes describe the device it is read for (the name and total
    memory torch reports); a profile written on another kind of device is refused."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _refuse(path, "it cannot be read (%s)" % e.strerror) from None
    if len(data) > MAX_FILE_BYTES:
        raise _refuse(path, "it is larger than %d bytes, so not a profile" % MAX_FILE_BYTES)
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _refuse(path, "it is not JSON (%s)" % e) from None
    if not isinstance(obj, dict):
        raise _refuse(path, "it holds a %s, not a JSON object" % type(obj).__name__)
    missing = [k for k in FIELDS if k not in obj]
    extra = sorted(k for k in obj if k not in FIELDS)
    if missing or extra:
        wrong = ["missing: " + ", ".join(missing)] if missing else []
        wrong += ["unknown: " + ", ".join(extra)] if extra else []
        raise _refuse(path, "its fields are not %s (%s)" % (", ".join(FIELDS), "; ".join(wrong)))
    if type(obj["dmm_profile"]) is not int or obj["dmm_profile"] != VERSION:
        raise _refuse(path, "dmm_profile is %r; this dmm reads version %d" % (obj["dmm_profile"], VERSION))
    if not isinstance(obj["device"], str):
        raise _refuse(path, "device is %r, not a device name" % (obj["device"],))
    dev_bytes, peak = _whole(path, obj, "device_bytes"), _whole(path, obj, "peak_physical_bytes")
    if obj["device"] != device_name or dev_bytes != device_bytes:
        raise _refuse(path, "it was written on a %s with %d bytes, and this device is a %s with %d bytes"
                      % (obj["device"], dev_bytes, device_name, device_bytes))
    if peak == 0 or peak > device_bytes:
        raise _refuse(path, "peak_physical_bytes %d is not between 1 and the device's %d bytes" % (peak, device_bytes))
    return peak


def write(path, device_name, device_bytes, peak_physical_bytes):
    """Writes the profile whole (beside `path`, then renamed over it). OSError propagates."""
    text = json.dumps({"dmm_profile": VERSION, "device": device_name, "device_bytes": int(device_bytes),
                       "peak_physical_bytes": int(peak_physical_bytes)}) + "\n"

    def fill(tmp):
        with open(tmp, "w") as f:
            f.write(text)

    _files.write_whole(os.fspath(path), fill)
