# SPDX-License-Identifier: Apache-2.0
"""What the Python tests share (tests/python/test_*.py): PASS/FAIL lines and the failures so far, and
whether a call raises a given error whose sentence holds every given fragment."""

failures = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def raises(error, fn, *fragments):
    """(True, sentence) when fn() raises `error` naming every fragment; (False, sentence or why not) else."""
    try:
        fn()
    except error as e:
        msg = str(e)
        return all(f in msg for f in fragments), msg
    return False, "(no %s)" % error.__name__
