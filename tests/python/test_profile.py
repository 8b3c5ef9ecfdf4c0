# SPDX-License-Identifier: Apache-2.0
"""The warm-start profile (python/dmm/profile.py) and dmm.torch's warm_start / save_profile around it,
checked without a GPU: the profile module directly, and dmm.torch over a stand-in `torch` module (a
device's name and total memory) with warm() and the stats replaced by recorders (they need a GPU).

What is proven: no file reads as None; a written profile reads back its peak (and its layout: version
2; a version 1 file has none), the file is replaced whole and no temporary is left; every hostile file
(not JSON, not an object, a missing or unknown field, another version, a bool, float, string or
negative number, a zero peak or one above the device, another device's name or size, a file too
large, bytes that are not UTF-8, a layout that is not a list of [offset, bytes, heap] whole numbers)
is refused with a ValueError naming the file and what was wrong, and the file is left as it was; so is
a file nested 100,000 deep (issue 35 item 15: json's parser once escaped with RecursionError), also
inside an otherwise good profile; writing never goes through a name planted beside the profile (item
16: a link at the old temporary's name, "PATH.tmp-PID", once received the profile and overwrote what it
pointed to), replaces a link's file and keeps the link, gives a new file 0666 less the umask and a
replaced one its old mode, writes a FIFO in place and leaves no temporary;
warm_start commits nothing on a first run, the profile's layout on the next (warm_layout), a version
1 profile's peak (warm), refuses a bad profile before committing, and the exit hook writes this
run's physical peak and layout; save_profile's failure names the path.
Exit 0 = all held, 1 = a check failed.
"""

import json
import os
import shutil
import sys
import tempfile
import threading
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

from _checks import check, failures, raises  # noqa: E402

from dmm import profile  # noqa: E402

DEV, TOTAL = "NVIDIA H200", 150 << 30
work = tempfile.mkdtemp(prefix="dmm_profile_")
path = os.path.join(work, "gpt2.profile")

check(profile.read(path, DEV, TOTAL) is None, "no profile yet: read() gives None")
profile.write(path, DEV, TOTAL, 13 << 30)
check(profile.read(path, DEV, TOTAL) == 13 << 30, "a written profile reads back its peak")
profile.write(path, DEV, TOTAL, 14 << 30)
check(profile.read(path, DEV, TOTAL) == 14 << 30, "writing again replaces the profile")
check(os.listdir(work) == ["gpt2.profile"], "no temporary file is left beside it (%s)" % os.listdir(work))
check(profile.read_layout(path, DEV, TOTAL) is None, "a profile written without a layout is version 1: none")
LAYOUT = [[0, 24 << 20, 0], [24 << 20, 8 << 20, 0], [1 << 40, 2 << 20, 1]]
profile.write(path, DEV, TOTAL, 14 << 30, LAYOUT)
check(profile.read(path, DEV, TOTAL) == 14 << 30 and profile.read_layout(path, DEV, TOTAL) == LAYOUT,
      "a profile written with a layout reads back its peak and its layout")
ok, msg = raises(OSError, lambda: profile.write(os.path.join(work, "no-such-dir", "p"), DEV, TOTAL, 1))
check(ok and os.listdir(work) == ["gpt2.profile"], "a write into a missing folder raises OSError and leaves nothing")

GOOD = {"dmm_profile": 1, "device": DEV, "device_bytes": TOTAL, "peak_physical_bytes": 13 << 30}


def with_(**kw):
    d = dict(GOOD)
    for k, v in kw.items():
        if v is KeyError:
            d.pop(k)
        else:
            d[k] = v
    return json.dumps(d).encode()


HOSTILE = [
    (b"{not json", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b"\xff\xfe{}", "not JSON"),
    (b" " * (profile.MAX_FILE_BYTES + 1), "larger than"),
    (with_(device_bytes=KeyError), "missing: device_bytes"),
    (with_(extra=1), "unknown: extra"),
    (with_(dmm_profile=3), "dmm_profile is 3"),
    (with_(dmm_profile=2), "missing: layout"),
    (with_(dmm_profile=2, layout={"0": 1}), "layout is a dict"),
    (with_(dmm_profile=2, layout=[[0, 1]]), "layout entry 0 is [0, 1]"),
    (with_(dmm_profile=2, layout=[[0, 1, 0], [0, -1, 0]]), "layout entry 1 is [0, -1, 0]"),
    (with_(dmm_profile=2, layout=[[0, True, 0]]), "layout entry 0 is [0, True, 0]"),
    (with_(dmm_profile=2, layout=[[0, 1 << 64, 0]]), "layout entry 0"),
    (with_(dmm_profile=2, layout=[[0, 1.5, 0]]), "layout entry 0"),
    (with_(dmm_profile=True), "dmm_profile is True"),
    (with_(device=7), "device is 7"),
    (with_(device_bytes=-1), "device_bytes is -1"),
    (with_(peak_physical_bytes=True), "peak_physical_bytes is True"),
    (with_(peak_physical_bytes=1.5), "peak_physical_bytes is 1.5"),
    (with_(peak_physical_bytes="13G"), "peak_physical_bytes is '13G'"),
    (with_(peak_physical_bytes=0), "peak_physical_bytes 0 is not between 1"),
    (with_(peak_physical_bytes=TOTAL + 1), "is not between 1 and the device's"),
    (with_(device="NVIDIA A100"), "written on a NVIDIA A100"),
    (with_(device_bytes=TOTAL // 2), "this device is a NVIDIA H200 with %d bytes" % TOTAL),
    (b"[" * 100000 + b"]" * 100000, "nests more than 32 deep"),
    (with_(dmm_profile=2, layout=[[0, 1, 0]])[:-1] + b', "x": ' + b"[" * 100000 + b"]" * 100000 + b"}",
     "nests more than 32 deep"),
    (b'{"device": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "dmm_profile": 3}', "dmm_profile is 3"),  # in a string
]
for data, fragment in HOSTILE:
    with open(path, "wb") as f:
        f.write(data)
    ok, msg = raises(ValueError, lambda: profile.read(path, DEV, TOTAL), path, fragment, "delete the file")
    with open(path, "rb") as f:
        kept = f.read() == data
    check(ok and kept, "refused, the file untouched: %s" % msg[:160])

# ---- writing never goes through a name someone planted (item 16) ----
victim = os.path.join(work, "victim")
with open(victim, "w") as f:
    f.write("someone else's file")
planted = "%s.tmp-%d" % (path, os.getpid())  # the temporary's name before issue 35: predictable
os.symlink(victim, planted)
profile.write(path, DEV, TOTAL, 11 << 30)
with open(victim) as f:
    check(f.read() == "someone else's file", "a link planted at the old temporary name leads nowhere: the file it "
          "points to is untouched")
check(os.path.islink(planted) and profile.read(path, DEV, TOTAL) == 11 << 30,
      "the planted link is left as it was, and the profile is written")
os.unlink(planted)
os.unlink(victim)
os.chmod(path, 0o604)
profile.write(path, DEV, TOTAL, 10 << 30)
mode = os.stat(path).st_mode & 0o777
check(mode == 0o604, "a replaced profile keeps its mode (%o)" % mode)
link = os.path.join(work, "link.profile")
os.symlink("gpt2.profile", link)
profile.write(link, DEV, TOTAL, 9 << 30)
check(os.path.islink(link) and profile.read(path, DEV, TOTAL) == 9 << 30,
      "writing through a link replaces the file it names and keeps the link")
os.unlink(link)
fresh = os.path.join(work, "fresh.profile")
old_mask = os.umask(0o027)
try:
    profile.write(fresh, DEV, TOTAL, 8 << 30)
finally:
    os.umask(old_mask)
check(os.stat(fresh).st_mode & 0o777 == 0o640, "a new profile is 0666 less the umask (%o)"
      % (os.stat(fresh).st_mode & 0o777))
os.unlink(fresh)
fifo = os.path.join(work, "profile.fifo")
os.mkfifo(fifo)
got = []
reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
reader.start()
profile.write(fifo, DEV, TOTAL, 7 << 30)
reader.join(30)
check(got and b'"peak_physical_bytes":7516192768' in got[0] and os.path.exists(fifo) and not os.path.isfile(fifo),
      "a FIFO is written in place and stays a FIFO")
os.unlink(fifo)
check(sorted(os.listdir(work)) == ["gpt2.profile"], "no temporary is left beside it (%s)" % os.listdir(work))

# ---- dmm.torch.warm_start and save_profile, over a stand-in torch ----
torch = types.ModuleType("torch")
torch.cuda = types.ModuleType("torch.cuda")
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_properties = lambda d: types.SimpleNamespace(name=DEV, total_memory=TOTAL)
sys.modules["torch"] = torch

import dmm.torch as dt  # noqa: E402

warmed, laid = [], []
peak = {"bytes": 12 << 30}
dt.warm = lambda nbytes, device=None, stream=None: warmed.append((nbytes, device)) or nbytes
dt.warm_layout = lambda spans, device=None, stream=None: laid.append((spans, device)) or sum(s[1] for s in spans)
dt.layout = lambda device=None: LAYOUT
dt.memory_stats_raw = lambda device=None: {"physical_bytes": {"peak": peak["bytes"]}}
os.unlink(path)
check(dt.warm_start(path) == 0 and warmed == [] and laid == [], "warm_start on a first run commits nothing")
dt._save_profiles_at_exit()  # what atexit runs
check(profile.read(path, DEV, TOTAL) == 12 << 30 and profile.read_layout(path, DEV, TOTAL) == LAYOUT,
      "at exit the profile holds this run's physical peak and layout")
check(dt.warm_start(path) == 34 << 20 and laid == [(LAYOUT, 0)] and warmed == [],
      "the next run commits the profile's layout ahead")
profile.write(path, DEV, TOTAL, 12 << 30)  # a version 1 profile, from before layouts
check(dt.warm_start(path) == 12 << 30 and warmed == [(12 << 30, 0)] and len(laid) == 1,
      "a profile without a layout: the next run commits its peak")
with open(path, "w") as f:
    f.write('{"dmm_profile": 1}')
ok, msg = raises(ValueError, lambda: dt.warm_start(path), path, "missing")
check(ok and len(warmed) == 1, "a bad profile is refused before anything is committed: %s" % msg[:120])
ok, msg = raises(dt.DmmError, lambda: dt.save_profile(os.path.join(work, "no-such-dir", "p")), "no-such-dir",
                 "save_profile")
check(ok, "save_profile names the path it could not write: %s" % msg[:160])
dt._profiles.clear()  # nothing more to write at exit
shutil.rmtree(work)

sys.exit(1 if failures else 0)
