# SPDX-License-Identifier: Apache-2.0
"""The licence travels with every file: LICENSE at the root is Apache-2.0, and every source file of the
tree (C, C++, headers, Python, shell, CMake, the Makefile, pkg-config and TOML templates) names it in an
SPDX line, the first line or the one after a #! line, so that a file copied out of the tree still says
under which licence it is.

    python3 check_licence.py SOURCE_DIR

The files are git's (`git ls-files`) where SOURCE_DIR is a checkout, else every file under it but the
build folders and the downloads (.ort, .deps). docs/ and data/ hold no source. Exit 1 with the list of
files that lack the line.
"""

import os
import subprocess
import sys

TAG = "SPDX-License-Identifier: Apache-2.0"
SUFFIXES = (".c", ".h", ".cc", ".py", ".sh", ".cmake", ".in", ".toml")
NAMES = ("CMakeLists.txt", "Makefile")
SKIP_DIRS = ("docs", "data", ".git", ".ort", ".deps")


def tree_files(root):
    try:
        out = subprocess.run(["git", "ls-files"], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if out.returncode == 0 and out.stdout:
            return out.stdout.decode().split("\n")
    except OSError:
        pass
    found = []
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        dirs[:] = [d for d in dirs if not (rel == "." and (d in SKIP_DIRS or d.startswith("build")))]
        found += [os.path.normpath(os.path.join(rel, f)) for f in files]
    return found


def is_source(rel):
    if not rel or rel.split("/")[0] in SKIP_DIRS or "/corpus" in rel:
        return False
    return rel.endswith(SUFFIXES) or os.path.basename(rel) in NAMES or rel == ".ci/run"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    with open(os.path.join(root, "LICENSE"), encoding="utf-8") as f:
        head = f.read(200)
    if "Apache License" not in head or "Version 2.0" not in head:
        print("FAIL: %s/LICENSE is not the Apache License, Version 2.0" % root)
        return 1
    missing, checked = [], 0
    for rel in sorted(tree_files(root)):
        if not is_source(rel):
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = [f.readline(), f.readline()]
        checked += 1
        if TAG not in lines[0] and not (lines[0].startswith("#!") and TAG in lines[1]):
            missing.append(rel)
    if missing:
        print("FAIL: %d of %d source files lack the line '%s' (first line, or after #!):\n  %s"
              % (len(missing), checked, TAG, "\n  ".join(missing)))
        return 1
    print("ok: LICENSE is Apache-2.0 and %d source files name it" % checked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
