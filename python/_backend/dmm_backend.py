# SPDX-License-Identifier: Apache-2.0
"""The PEP 517 build backend of the dmm Python package: wheels, editable wheels and sdists, offline.

pyproject.toml names this module with `backend-path` and `requires = []`, so `pip install ./python`
needs no index, no setuptools and no wheel package: the wheel is a zip file written here with the
standard library (zipfile, hashlib), its METADATA, WHEEL and RECORD written by hand after PEP 427/566.

What goes in the wheel: the package dmm/ (its .py files and those of dmm.compat) and the built
libdmm_torch.so beside them, and the licence (Apache-2.0, the tree's LICENSE) in its dist-info, so the installed package loads its own copy (dmm/_lib.py). A library
built against torch's headers (adapters/torch/CMakeLists.txt, DMM_TORCH_HEADERS) links that torch's
libc10.so by its path: such a wheel is for that environment. The library comes from, in this order:
  1. the CMake build folder named by `-C build-dir=DIR` (pip's --config-settings) or DMM_BUILD_DIR
     (DIR/adapters/torch/libdmm_torch.so, or DIR/libdmm_torch.so); a folder without it is an error;
  2. otherwise a fresh CMake build of the target dmm_torch from the source tree this file lies in
     (python/.. ), in a temporary folder that is removed afterwards: needs cmake and a C compiler
     (Debian: cmake gcc; scripts/bootstrap.sh installs them), nothing downloaded, about 10 s.
A library built with a sanitizer is refused (it would need the sanitizer's runtime preloaded).

The wheel is platform-specific (py3-none-<platform>: ctypes only, any Python 3, this machine's
architecture). Entries are sorted and dated SOURCE_DATE_EPOCH (or 1980-01-01): the same inputs give
the same bytes. The editable wheel holds one .pth that puts python/ on sys.path; that package then
finds the library in the source tree's build folders. The sdist holds python/ only (no C sources), so
a wheel built from it needs DMM_BUILD_DIR.

Also a command line, for CMake's target dmm_wheel and by hand:
    python3 python/_backend/dmm_backend.py wheel OUT_DIR [--build-dir DIR]
"""

import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

_HERE = os.path.dirname(os.path.abspath(__file__))
_PYROOT = os.path.dirname(_HERE)                  # python/: pyproject.toml, dmm/, _backend/
_SRCROOT = os.path.dirname(_PYROOT)               # the dmm source tree (CMakeLists.txt), when there is one
_NAME = "dmm"  # the import package (python/dmm) and the distribution: pyproject's [project] name says so too
_LIB = "libdmm_torch.so"


class BuildError(RuntimeError):
    """The wheel cannot be built; the message says why and what to do."""


def _version():
    """dmm.__version__ (python/dmm/__init__.py): the one place the package's version is written."""
    with open(os.path.join(_PYROOT, _NAME, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if not m:
        raise BuildError("python/dmm/__init__.py has no line `__version__ = \"X.Y.Z\"`")
    return m.group(1)


def _toml_subset(text):
    """The [project] table of pyproject.toml on a Python without tomllib (before 3.11): the subset that
    file uses, tables of `key = "string"`, `key = ["string", ...]` (one line or several) and
    `key = {text = "string"}`, comments on lines of their own; anything else is a BuildError naming the
    line. tests/install/test_wheel.py checks that it reads the file as tomllib does."""
    tables, current, pending = {}, None, None
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("#"):  # (whole-line comments only: a '#' may sit inside a string)
            continue
        if pending is not None:  # inside a list spread over lines
            pending[1].extend(re.findall(r'"([^"]*)"', s))
            if s.endswith("]"):
                current[pending[0]], pending = pending[1], None
            continue
        if not s:
            continue
        m = re.fullmatch(r"\[([A-Za-z0-9_.-]+)\]", s)
        if m:
            current = tables.setdefault(m.group(1), {})
            continue
        m = re.fullmatch(r'([A-Za-z0-9_-]+)\s*=\s*(.+)', s)
        if m is None or current is None:
            raise BuildError("pyproject.toml line %d is not in the subset read without tomllib: %r" % (n, line))
        key, value = m.groups()
        if value.startswith('"') and value.endswith('"'):
            current[key] = value[1:-1]
        elif value.startswith("["):
            items = re.findall(r'"([^"]*)"', value)
            if value.endswith("]"):
                current[key] = items
            else:
                pending = (key, items)
        elif re.fullmatch(r'\{\s*text\s*=\s*"([^"]*)"\s*\}', value):
            current[key] = {"text": re.fullmatch(r'\{\s*text\s*=\s*"([^"]*)"\s*\}', value).group(1)}
        else:
            raise BuildError("pyproject.toml line %d is not in the subset read without tomllib: %r" % (n, line))
    project = dict(tables.get("project", {}))
    if "project.optional-dependencies" in tables:
        project["optional-dependencies"] = tables["project.optional-dependencies"]
    return project


def _project():
    """pyproject.toml's [project] table: the package's metadata, written there only."""
    path = os.path.join(_PYROOT, "pyproject.toml")
    try:
        import tomllib
    except ImportError:
        tomllib = None
    if tomllib is not None:
        with open(path, "rb") as f:
            project = tomllib.load(f).get("project", {})
    else:
        with open(path, encoding="utf-8") as f:
            project = _toml_subset(f.read())
    for key in ("name", "description", "requires-python", "license"):
        if key not in project:
            raise BuildError("pyproject.toml's [project] table lacks %r" % key)
    if project["name"] != _NAME:
        raise BuildError("pyproject.toml names the distribution %r, but its package is python/%s: they are one name"
                         % (project["name"], _NAME))
    return project


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + _version(), "Summary: " + p["description"],
             "License: " + p["license"]["text"]]
    lines += ["Classifier: " + c for c in p.get("classifiers", [])]
    lines.append("Requires-Python: " + p["requires-python"])
    for extra, reqs in sorted(p.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: " + extra)
        lines += ['Requires-Dist: %s; extra == "%s"' % (r, extra) for r in reqs]
    lines += ["Description-Content-Type: text/plain", "",
              "dmm as PyTorch's CUDA allocator (dmm.torch), the dmm trace format (dmm.trace) and snapshots",
              "in PyTorch's layout (dmm.snapshot). ctypes only; the wheel carries libdmm_torch.so.",
              "torch is needed only when a dmm.torch function that uses it is called."]
    return "\n".join(lines) + "\n"



def _licence():
    """The text of the licence: python/LICENSE in an sdist, the source tree's LICENSE otherwise."""
    for path in (os.path.join(_PYROOT, "LICENSE"), os.path.join(_SRCROOT, "LICENSE")):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                return f.read()
    raise BuildError("no LICENSE beside python/ or in the source tree around it: the package's licence "
                     "(Apache-2.0) must travel with it; restore the file")


def _tag():
    plat = re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())
    return "py3-none-" + plat


def _wheel_file(tag):
    return ("Wheel-Version: 1.0\n"
            "Generator: dmm_backend %s\n"
            "Root-Is-Purelib: false\n"
            "Tag: %s\n") % (_version(), tag)


def _package_files():
    """(archive name, bytes) of every .py file of python/dmm and its subpackages (dmm.compat), sorted."""
    pkg = os.path.join(_PYROOT, _NAME)
    out = []
    for folder, dirs, files in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    out.append((os.path.relpath(path, _PYROOT).replace(os.sep, "/"), f.read()))
    return sorted(out)


def _check_library(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise BuildError("%s is not an ELF shared library" % path)
    for runtime in (b"__asan_init", b"__tsan_init"):
        if runtime in data:
            raise BuildError("%s was built with a sanitizer (it references %s) and would need that runtime "
                             "preloaded; point DMM_BUILD_DIR at a build configured without DMM_SANITIZE"
                             % (path, runtime.decode()))
    return data


def _library_from(build_dir):
    for p in (os.path.join(build_dir, "adapters", "torch", _LIB), os.path.join(build_dir, _LIB)):
        if os.path.isfile(p):
            return _check_library(p)
    raise BuildError("%s holds no %s (looked in adapters/torch/ and the folder itself): build it with "
                     "`cmake --build %s --target dmm_torch`, or leave DMM_BUILD_DIR unset to have it built"
                     % (build_dir, _LIB, build_dir))


def _library_built():
    """Builds the target dmm_torch from the source tree in a temporary folder; returns the library."""
    if not os.path.isfile(os.path.join(_SRCROOT, "CMakeLists.txt")):
        raise BuildError("no dmm source tree around %s to build %s from (an sdist carries python/ only): "
                         "set DMM_BUILD_DIR to a dmm CMake build folder" % (_PYROOT, _LIB))
    cmake = shutil.which("cmake")
    if not cmake:
        raise BuildError("building %s needs cmake and a C compiler (Debian: apt-get install cmake gcc, or "
                         "scripts/bootstrap.sh), or set DMM_BUILD_DIR to a dmm build folder that has it"
                         % _LIB)
    work = tempfile.mkdtemp(prefix="dmm-wheel-")
    try:
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        off = ["-DDMM_%s=OFF" % o for o in ("BUILD_TESTS", "BUILD_BENCH", "BUILD_TOOLS", "BUILD_EXAMPLES")]
        # DMM_PYTHON3: the interpreter being installed into, whose torch (if any) gives the C++ shim its
        # headers (torch.cuda.OutOfMemoryError; adapters/torch/CMakeLists.txt). pip's build isolation
        # hides that interpreter's site-packages through PYTHONPATH/PYTHONNOUSERSITE: not from CMake.
        steps = [[cmake] + gen + ["-S", _SRCROOT, "-B", work, "-DCMAKE_BUILD_TYPE=Release", "-DDMM_SANITIZE=",
                                  "-DDMM_WITH_CUDA=ON", "-DDMM_PYTHON3=" + sys.executable] + off,
                 [cmake, "--build", work, "--target", "dmm_torch", "-j", str(os.cpu_count() or 2)]]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
        for cmd in steps:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
            sys.stderr.write(r.stdout.decode("utf-8", "replace"))
            if r.returncode != 0:
                raise BuildError("building %s failed (exit %d): %s (its output is above)"
                                 % (_LIB, r.returncode, " ".join(cmd)))
        return _library_from(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _library(config_settings):
    build_dir = (config_settings or {}).get("build-dir") or os.environ.get("DMM_BUILD_DIR")
    return _library_from(os.path.abspath(build_dir)) if build_dir else _library_built()


def _date():
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.isdigit():
        t = time.gmtime(max(int(epoch), 315532800))   # zip dates start in 1980
        return t[:6]
    return (1980, 1, 1, 0, 0, 0)


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return "%s,sha256=%s,%d\n" % (name, digest, len(data))


def _write_wheel(wheel_directory, files, tag):
    """Writes the wheel of `files` [(name, bytes, mode)] plus its dist-info; returns its file name."""
    v = _version()
    dist_info = "%s-%s.dist-info" % (_NAME, v)
    entries = list(files) + [("%s/METADATA" % dist_info, _metadata().encode(), 0o644),
                             ("%s/LICENSE" % dist_info, _licence(), 0o644),
                             ("%s/WHEEL" % dist_info, _wheel_file(tag).encode(), 0o644)]
    record_name = "%s/RECORD" % dist_info
    record = "".join(_record_line(n, d) for n, d, _ in entries) + "%s,,\n" % record_name
    entries.append((record_name, record.encode(), 0o644))
    filename = "%s-%s-%s.whl" % (_NAME, v, tag)
    os.makedirs(wheel_directory, exist_ok=True)
    final = os.path.join(wheel_directory, filename)
    part = final + ".part"
    date = _date()
    with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in entries:  # RECORD last, as PEP 427 recommends
            info = zipfile.ZipInfo(name, date_time=date)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(part, final)
    return filename


def _write_metadata_dir(metadata_directory, tag):
    dist_info = "%s-%s.dist-info" % (_NAME, _version())
    d = os.path.join(metadata_directory, dist_info)
    os.makedirs(d, exist_ok=True)
    for name, text in (("METADATA", _metadata()), ("WHEEL", _wheel_file(tag))):
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write(text)
    return dist_info


# ---- the PEP 517 / PEP 660 hooks ----

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _write_metadata_dir(metadata_directory, _tag())


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _write_metadata_dir(metadata_directory, "py3-none-any")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = [(n, d, 0o644) for n, d in _package_files()]
    files.append(("%s/%s" % (_NAME, _LIB), _library(config_settings), 0o755))
    return _write_wheel(wheel_directory, files, _tag())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    pth = (_PYROOT + "\n").encode()
    return _write_wheel(wheel_directory, [("__editable__.%s.pth" % _NAME, pth, 0o644)], "py3-none-any")


def build_sdist(sdist_directory, config_settings=None):
    v = _version()
    base = "%s-%s" % (_NAME, v)
    members = [("pyproject.toml", os.path.join(_PYROOT, "pyproject.toml")),
               ("_backend/dmm_backend.py", os.path.abspath(__file__))]
    members += [(n, os.path.join(_PYROOT, n)) for n, _ in _package_files()]
    filename = base + ".tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    final = os.path.join(sdist_directory, filename)
    mtime = int(time.mktime(_date() + (0, 0, -1)))

    def add(tar, name, data):
        info = tarfile.TarInfo("%s/%s" % (base, name))
        info.size, info.mtime, info.mode = len(data), mtime, 0o644
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(final + ".part", "w:gz", format=tarfile.PAX_FORMAT) as tar:
        add(tar, "PKG-INFO", _metadata().encode())
        add(tar, "LICENSE", _licence())
        for name, path in members:
            with open(path, "rb") as f:
                add(tar, name, f.read())
    os.replace(final + ".part", final)
    return filename


def _main(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="dmm_backend", description="Builds the dmm wheel (see the file's opening).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wheel", help="write the wheel into OUT_DIR and print its path")
    w.add_argument("out_dir")
    w.add_argument("--build-dir", help="a dmm CMake build folder with libdmm_torch.so (default: DMM_BUILD_DIR, "
                                       "else build it)")
    a = ap.parse_args(argv)
    try:
        name = build_wheel(a.out_dir, {"build-dir": a.build_dir} if a.build_dir else None)
    except BuildError as e:
        print("dmm_backend: %s" % e, file=sys.stderr)
        return 1
    print(os.path.join(a.out_dir, name))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
