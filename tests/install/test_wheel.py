# SPDX-License-Identifier: Apache-2.0
"""The in-tree build backend (python/_backend/dmm_backend.py), called as pip calls it, and its wheel read back.

    python3 test_wheel.py SOURCE_DIR SCRATCH VERSION BUILD_DIR

Needs no pip: the hooks are called in this process. Checks that python/pyproject.toml asks for
nothing from an index (requires = [], the backend in-tree); that the wheel of BUILD_DIR is named
dmm-VERSION-py3-none-<platform>.whl and holds every .py of python/dmm and its subpackages plus BUILD_DIR's libdmm_torch.so
byte for byte (dmm.compat included); that its RECORD lists every member once with the right sha256 and size (and itself
without); that METADATA names dmm VERSION with torch as an optional extra and equals what
prepare_metadata_for_build_wheel wrote; that WHEEL's tag is the file name's; that two builds give the
same bytes; that a build folder without the library, and a sanitized library, are refused with a
sentence naming them; and that the sdist and the editable wheel hold what they should.
"""

import base64
import csv
import glob
import hashlib
import io
import os
import shutil
import sys
import sysconfig
import tarfile
import zipfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def main():
    if len(sys.argv) != 5:
        print("usage: test_wheel.py SOURCE_DIR SCRATCH VERSION BUILD_DIR", file=sys.stderr)
        return 2
    src, scratch, version, build = sys.argv[1:5]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    os.environ.pop("DMM_BUILD_DIR", None)
    pyroot = os.path.join(src, "python")

    with open(os.path.join(pyroot, "pyproject.toml"), "rb") as f:
        raw = f.read()
    try:
        import tomllib
        bs = tomllib.loads(raw.decode())["build-system"]
        check(bs.get("requires") == [], "pyproject.toml's build-system requires %r, not []" % bs.get("requires"))
        check(bs.get("build-backend") == "dmm_backend" and bs.get("backend-path") == ["_backend"],
              "pyproject.toml's backend is %r from %r, not dmm_backend from ['_backend']"
              % (bs.get("build-backend"), bs.get("backend-path")))
    except ImportError:  # Python < 3.11: no TOML reader in the standard library
        check(b"requires = []" in raw, "pyproject.toml does not say requires = []")

    sources = sorted(glob.glob(os.path.join(pyroot, "dmm", "**", "*.py"), recursive=True))
    check(os.path.join(pyroot, "dmm", "compat", "vllm.py") in sources, "no python/dmm/compat/vllm.py to package")
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.join(pyroot, "_backend"))
    import dmm_backend as be

    check(be.get_requires_for_build_wheel() == [] and be.get_requires_for_build_sdist() == [] and
          be.get_requires_for_build_editable() == [], "a get_requires hook asks for something")
    tag = "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")
    meta_dir = os.path.join(scratch, "meta")
    di = be.prepare_metadata_for_build_wheel(meta_dir)
    check(di == "dmm-%s.dist-info" % version, "the metadata folder is %s" % di)

    names = []
    for n in (1, 2):
        out = os.path.join(scratch, "wheel%d" % n)
        names.append(be.build_wheel(out, {"build-dir": build}))
    check(names[0] == "dmm-%s-%s.whl" % (version, tag), "the wheel is named %s, not dmm-%s-%s.whl"
          % (names[0], version, tag))
    paths = [os.path.join(scratch, "wheel%d" % n, names[n - 1]) for n in (1, 2)]
    with open(paths[0], "rb") as a, open(paths[1], "rb") as b:
        check(a.read() == b.read(), "two builds of the same inputs gave different wheels")

    with zipfile.ZipFile(paths[0]) as z:
        members = z.namelist()
        check(len(members) == len(set(members)), "the wheel has a member twice")
        check(members[-1] == "%s/RECORD" % di, "RECORD is not the last member")
        record = list(csv.reader(io.StringIO(z.read("%s/RECORD" % di).decode())))
        listed = [r[0] for r in record]
        check(sorted(listed) == sorted(members), "RECORD lists %s, the zip holds %s" % (listed, members))
        for name, h, size in record:
            if name == "%s/RECORD" % di:
                check(h == "" and size == "", "RECORD lists itself with a hash or size")
                continue
            data = z.read(name)
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            check(h == want and size == str(len(data)), "RECORD has %s %s for %s, its bytes give %s %d"
                  % (h, size, name, want, len(data)))
        for py in sources:
            name = os.path.relpath(py, pyroot)
            with open(py, "rb") as f:
                check(name in members and z.read(name) == f.read(), "the wheel lacks or changed %s" % name)
        with open(os.path.join(build, "adapters", "torch", "libdmm_torch.so"), "rb") as f:
            check("dmm/libdmm_torch.so" in members and z.read("dmm/libdmm_torch.so") == f.read(),
                  "the wheel's dmm/libdmm_torch.so is not %s's" % build)
        so_mode = z.getinfo("dmm/libdmm_torch.so").external_attr >> 16
        check(so_mode & 0o111, "dmm/libdmm_torch.so is not executable in the wheel (mode %o)" % so_mode)
        meta = z.read("%s/METADATA" % di).decode()
        for line in ("Metadata-Version: 2.1", "Name: dmm", "Version: " + version, "License: Apache-2.0",
                     "Provides-Extra: torch", 'Requires-Dist: torch; extra == "torch"'):
            check(line in meta.splitlines(), "METADATA lacks the line %r" % line)
        with open(os.path.join(meta_dir, di, "METADATA")) as f:
            check(f.read() == meta, "prepare_metadata_for_build_wheel's METADATA differs from the wheel's")
        with open(os.path.join(src, "LICENSE"), "rb") as f:
            check(z.read("%s/LICENSE" % di) == f.read(), "the wheel's %s/LICENSE is not the tree's LICENSE" % di)
        wheel = z.read("%s/WHEEL" % di).decode().splitlines()
        for line in ("Wheel-Version: 1.0", "Root-Is-Purelib: false", "Tag: " + tag):
            check(line in wheel, "WHEEL lacks the line %r" % line)

    empty = os.path.join(scratch, "empty-build")
    os.makedirs(empty)
    for folder, word in ((empty, empty), (os.path.join(scratch, "asan"), "sanitizer")):
        if word == "sanitizer":
            os.makedirs(folder)
            with open(os.path.join(folder, "libdmm_torch.so"), "wb") as f:
                f.write(b"\x7fELF" + b"\0" * 60 + b"__asan_init\0")
        try:
            be.build_wheel(os.path.join(scratch, "refused"), {"build-dir": folder})
            check(False, "a wheel was built from %s" % folder)
        except be.BuildError as e:
            check(word in str(e), "the refusal of %s does not name %r: %s" % (folder, word, e))
            print("ok: refused: %s" % e)
    check(not glob.glob(os.path.join(scratch, "refused", "*.whl*")), "a refused build left a file")

    # the [project] table read without tomllib (Pythons before 3.11) is the one tomllib reads
    try:
        import tomllib
    except ImportError:
        tomllib = None
    if tomllib is not None:
        with open(os.path.join(pyroot, "pyproject.toml"), "rb") as f:
            want_project = tomllib.load(f)["project"]
        with open(os.path.join(pyroot, "pyproject.toml"), encoding="utf-8") as f:
            got_project = be._toml_subset(f.read())
        check(got_project == want_project, "the reader without tomllib gives %r, tomllib %r" % (got_project, want_project))

    sd = be.build_sdist(os.path.join(scratch, "sdist"))
    with tarfile.open(os.path.join(scratch, "sdist", sd)) as t:
        got = sorted(m.name for m in t.getmembers())
    base = "dmm-%s/" % version
    want = sorted([base + "PKG-INFO", base + "LICENSE", base + "pyproject.toml", base + "_backend/dmm_backend.py"] +
                  [base + os.path.relpath(p, pyroot) for p in sources])
    check(got == want, "the sdist holds %s, not %s" % (got, want))

    ed = be.build_editable(os.path.join(scratch, "editable"))
    with zipfile.ZipFile(os.path.join(scratch, "editable", ed)) as z:
        pth = [n for n in z.namelist() if n.endswith(".pth")]
        check(len(pth) == 1 and z.read(pth[0]).decode().strip() == os.path.abspath(pyroot),
              "the editable wheel's .pth does not point at %s" % pyroot)

    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("ok: %s: RECORD, METADATA and WHEEL hold, reproducible, refusals named, sdist and editable" % names[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
