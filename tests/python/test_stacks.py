# SPDX-License-Identifier: Apache-2.0
"""dmm._stacks (the frames of dmm.torch's history) without a GPU, over this build's libdmm_torch.so
(DMM_LIB): the hook is called from C through ctypes as the library calls it.

What is proven: a hook called from C inside a named function numbers a stack whose innermost Python
frame is that function (file, line, name); the same stack gets the same number, another line another
number, the same source compiled under another file name another (stacks are told apart by the code
objects' identities, not their values); frames() hands out new dicts each call; native addresses are
named (dmm's own frames left out, the interpreter's cut, a libc function named with its object), before
the Python frames; past MAX_STACKS every new stack shares one marker number and is counted; a hook
that fails numbers 0 and raises nothing; frames() of 0 or an unknown number is [].
Exit 0 = all held, 1 = a check failed, 77 = no DMM_LIB (run it through CTest).
"""

import ctypes
import os
import sys

from _checks import check, failures

if not os.environ.get("DMM_LIB"):
    print("SKIP: needs this build's unsanitized libdmm_torch.so in DMM_LIB (run through CTest)")
    sys.exit(77)

from dmm import _lib, _stacks  # noqa: E402

ALLOC, FREE = 0, 1
hook = _stacks._HOOK(_stacks._gather)
from_c = ctypes.cast(hook, _stacks._HOOK)  # calling it goes through C into the hook, as the library does


def allocate_here(event=ALLOC, native=()):
    arr = (ctypes.c_void_p * max(1, len(native)))(*native)
    return from_c(event, arr, len(native))


def allocate_elsewhere():
    return allocate_here()


def addr(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value


def main():
    n1 = allocate_here()
    line = allocate_here.__code__.co_firstlineno + 2
    fr = _stacks.frames(n1)
    check(n1 >= 1 and fr and fr[0] == {"filename": os.path.abspath(__file__), "line": line, "name": "allocate_here"},
          "the innermost frame is the function that called into C (%r)" % (fr[:1],))
    check(len(fr) >= 2 and fr[1]["name"] == "main", "its caller follows (%r)" % (fr[1:2],))
    n2 = allocate_here()
    check(n2 != n1, "another call site (line) is another stack (%d, %d)" % (n1, n2))
    again = [allocate_here() for _ in range(2)]
    check(again[0] == again[1], "the same stack gets the same number (%r)" % again)
    n3 = allocate_elsewhere()
    check(_stacks.frames(n3)[1]["name"] == "allocate_elsewhere", "a deeper caller is in its stack")
    src = "def twin(call):\n    return call()\n"
    twins = []
    for name in ("/a/one.py", "/b/two.py"):
        space = {}
        exec(compile(src, name, "exec"), space)
        twins.append(space["twin"](allocate_here))
    check(twins[0] != twins[1] and _stacks.frames(twins[1])[1]["filename"] == "/b/two.py",
          "equal code under two file names: two stacks, each with its own file (%r)" % twins)
    a, b = _stacks.frames(n1), _stacks.frames(n1)
    a[0]["name"] = "edited"
    check(b[0]["name"] == "allocate_here" and _stacks.frames(n1)[0]["name"] == "allocate_here",
          "frames() hands out new dicts: a caller's edit changes no later answer")

    lib = _lib.load()
    libc = ctypes.CDLL(None)
    own, getpid, interp = addr(lib.dmm_torch_now_ns), addr(libc.getpid), addr(ctypes.pythonapi.Py_IncRef)
    n4 = allocate_here(native=(own, getpid, interp, getpid))
    fr = _stacks.frames(n4)
    check("getpid" in fr[0]["name"] and "libc" in os.path.basename(fr[0]["filename"]) and fr[0]["line"] == 0,
          "a native frame is named with its object (%r)" % (fr[0],))
    check(not any("dmm_torch_now_ns" in f["name"] for f in fr), "dmm's own native frames are left out")
    base = os.path.basename(_stacks._native(interp)["filename"])
    if base.startswith("python") or base.startswith("libpython"):
        check(fr[1]["name"] == "allocate_here", "the interpreter's native frames are cut: the Python frames follow")
    else:
        print("SKIP the interpreter cut: Py_IncRef lies in %s" % base)
    name, obj, off = ctypes.create_string_buffer(8), ctypes.create_string_buffer(8), ctypes.c_uint64()
    check(lib.dmm_torch_native_symbol(None, name, 8, obj, 8, ctypes.byref(off)) == -1, "a NULL address is unknown")

    saved, _stacks.MAX_STACKS = _stacks.MAX_STACKS, len(_stacks._table)
    before = _stacks.stats()["overflowed"]
    over = [allocate_elsewhere(), allocate_here(native=(getpid,))]
    check(over[0] == over[1] and _stacks.frames(over[0]) == [] and _stacks.stats()["overflowed"] == before + 2,
          "past MAX_STACKS new stacks share the marker (no frames) and are counted")
    _stacks.MAX_STACKS = saved

    numbers, _stacks._numbers = _stacks._numbers, None  # the table broken: the hook fails inside
    check(allocate_here() == 0, "a hook that fails numbers 0 and raises nothing")
    _stacks._numbers = numbers
    check(_stacks.frames(0) == [] and _stacks.frames(10 ** 9) == [] and _stacks.frames("1") == [],
          "frames of 0, an unknown number or a non-number: []")
    print("%d check(s) failed" % len(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
