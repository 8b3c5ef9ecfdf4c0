# SPDX-License-Identifier: Apache-2.0
"""`pip install --no-index ./python` offline, into a scratch folder, then the installed package imported.

    python3 test_pip.py SOURCE_DIR SCRATCH VERSION [BUILD_DIR]

With BUILD_DIR: the wheel takes that build's libdmm_torch.so (DMM_BUILD_DIR). Without: DMM_BUILD_DIR
is unset, as on a fresh clone, and the in-tree backend builds the library with CMake. Either way pip
runs with no index, no configuration file, no cache and a proxy that refuses every connection, so a
build that needed anything from the network (setuptools, wheel) fails here. Then check_import.py
checks the installed package: imported from SCRATCH, its own libdmm_torch.so, DMM_LIB overriding,
torch never imported; and `pip show dmm` names it, its version and its licence (Apache-2.0). Exit 77 (skipped) where this python3 has no pip.
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if len(sys.argv) not in (4, 5):
        print("usage: test_pip.py SOURCE_DIR SCRATCH VERSION [BUILD_DIR]", file=sys.stderr)
        return 2
    src, scratch, version = sys.argv[1:4]
    if subprocess.run([sys.executable, "-m", "pip", "--version"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        print("SKIP: %s has no pip (Debian: python3-pip)" % sys.executable)
        return 77
    target = os.path.join(scratch, "site")
    subprocess.run(["rm", "-rf", scratch], check=True)
    os.makedirs(scratch)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIP_") and k not in ("DMM_BUILD_DIR", "DMM_LIB", "PYTHONPATH")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INPUT="1", PIP_ROOT_USER_ACTION="ignore", http_proxy="http://127.0.0.1:9",
               https_proxy="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9",
               HTTPS_PROXY="http://127.0.0.1:9", no_proxy="", NO_PROXY="")
    if len(sys.argv) == 5:
        env["DMM_BUILD_DIR"] = sys.argv[4]
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--disable-pip-version-check",
           "--target", target, os.path.join(src, "python")]
    print("$ %s%s" % ("DMM_BUILD_DIR=%s " % env["DMM_BUILD_DIR"] if "DMM_BUILD_DIR" in env else "", " ".join(cmd)))
    sys.stdout.flush()
    r = subprocess.run(cmd, env=env, cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = r.stdout.decode("utf-8", "replace")
    if r.returncode != 0:
        print(out)
        print("FAIL: pip install --no-index ./python exited %d (above)" % r.returncode)
        return 1
    print(out.strip().splitlines()[-1] if out.strip() else "")
    dist = os.path.join(target, "dmm-%s.dist-info" % version)
    for f in ("METADATA", "RECORD", "WHEEL", "LICENSE"):
        if not os.path.isfile(os.path.join(dist, f)):
            print("FAIL: the install has no %s/%s" % (os.path.basename(dist), f))
            return 1
    # what a user asks of an installed package: `pip show` names it, its version and its licence
    show_env = dict(env, PYTHONPATH=target)
    r = subprocess.run([sys.executable, "-m", "pip", "show", "--disable-pip-version-check", "dmm"], env=show_env,
                       cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    shown = r.stdout.decode("utf-8", "replace").splitlines()
    for line in ("Name: dmm", "Version: " + version, "License: Apache-2.0"):
        if line not in shown:
            print("FAIL: `pip show dmm` lacks the line %r; it printed:\n%s" % (line, "\n".join(shown)))
            return 1
    print("pip show: " + "; ".join(l for l in shown if l.split(":")[0] in ("Name", "Version", "License")))
    sys.stdout.flush()
    return subprocess.run([sys.executable, os.path.join(HERE, "check_import.py"), target, version]).returncode


if __name__ == "__main__":
    sys.exit(main())
