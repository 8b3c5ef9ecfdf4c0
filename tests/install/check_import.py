# SPDX-License-Identifier: Apache-2.0
"""Imports an installed dmm package and checks it is the installed one, with its own library.

    python3 check_import.py SITE_DIR EXPECTED_VERSION

Run by tests/install/run.cmake (after cmake --install) and test_pip.py (after pip install): it starts
a fresh interpreter whose only extra path is SITE_DIR, with DMM_LIB unset and the working directory
outside the source tree, and checks that dmm, dmm.torch, dmm.trace, dmm.snapshot and dmm.compat's drop-ins
import from SITE_DIR; that dmm.torch.library_path() is SITE_DIR/dmm/libdmm_torch.so (the package's own copy) and
that it loads and answers a call; that DMM_LIB still overrides it (a wrong DMM_LIB is an error
naming it, not a fall-back); that __version__ is EXPECTED_VERSION; and that nothing imports torch: a
`torch` module placed first on the path fails any import of it, so the check holds whether or not
torch is installed; and that a call that needs torch then raises DmmError with a one-line install
hint. Exits 0 when all hold, 1 with the reason otherwise.
"""

import os
import subprocess
import sys
import tempfile

CHILD = r'''
import os, sys
site, version = sys.argv[1], sys.argv[2]
import dmm, dmm.torch, dmm.trace, dmm.snapshot, dmm.compat.vllm, dmm.compat.torch_memory_saver
for m in (dmm, dmm.torch, dmm.trace, dmm.snapshot, dmm.compat.vllm, dmm.compat.torch_memory_saver):
    assert os.path.realpath(m.__file__).startswith(os.path.realpath(site) + os.sep), \
        "%s was imported from %s, not from %s" % (m.__name__, m.__file__, site)
assert dmm.__version__ == version, "dmm.__version__ is %r, the build's version is %r" % (dmm.__version__, version)
want = os.path.realpath(os.path.join(site, "dmm", "libdmm_torch.so"))
got = dmm.torch.library_path()
assert os.path.realpath(got) == want, "dmm.torch.library_path() is %s, not the installed %s" % (got, want)
assert dmm.torch.now_ns() > 0, "the installed library does not answer dmm_torch_now_ns"
assert dmm.torch.last_error() == "", "a fresh process has a last error: %r" % dmm.torch.last_error()
assert "torch" not in sys.modules or getattr(sys.modules["torch"], "DMM_SHADOW", False)
try:  # a call that needs torch, where torch cannot be imported: the one-line install hint
    dmm.torch.enable()
    raise AssertionError("dmm.torch.enable() went on without torch")
except dmm.torch.DmmError as e:
    hint = str(e)
assert "pip install torch" in hint and "dmm.torch" in hint, "no install hint: %s" % hint
print("ok: dmm %s from %s, library %s, torch not imported; without torch: %s" % (dmm.__version__, site, got, hint))
'''

OVERRIDE = r'''
import sys
import dmm.torch
try:
    dmm.torch.library_path()
except dmm.torch.DmmError as e:
    assert "DMM_LIB=" + sys.argv[1] in str(e), "the error does not name DMM_LIB: %s" % e
    print("ok: a wrong DMM_LIB is refused: %s" % e)
else:
    raise AssertionError("DMM_LIB=%s (no such file) was ignored: loaded %s" % (sys.argv[1], dmm.torch.library_path()))
'''


def run(code, args, env, cwd):
    r = subprocess.run([sys.executable, "-c", code] + args, env=env, cwd=cwd,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sys.stdout.write(r.stdout.decode("utf-8", "replace"))
    return r.returncode


def main():
    if len(sys.argv) != 3:
        print("usage: check_import.py SITE_DIR EXPECTED_VERSION", file=sys.stderr)
        return 2
    site, version = os.path.abspath(sys.argv[1]), sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="dmm-import-") as tmp:
        shadow = os.path.join(tmp, "shadow")
        os.mkdir(shadow)
        with open(os.path.join(shadow, "torch.py"), "w") as f:
            f.write("raise ImportError('dmm imported torch at import time; it must wait until a torch "
                    "function is called')\n")
        env = {k: v for k, v in os.environ.items() if k not in ("DMM_LIB", "PYTHONPATH", "PYTHONHOME")}
        env["PYTHONPATH"] = os.pathsep.join([shadow, site])
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if run(CHILD, [site, version], env, tmp):
            print("FAIL: the installed package at %s (above)" % site)
            return 1
        env["DMM_LIB"] = os.path.join(tmp, "no-such-libdmm_torch.so")
        if run(OVERRIDE, [env["DMM_LIB"]], env, tmp):
            print("FAIL: DMM_LIB does not override the installed library (above)")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
