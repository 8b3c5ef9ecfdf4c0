"""The one way the package writes a file whole or not at all: beside the target, then renamed over it."""

import os


def write_whole(path, write):
    """Calls write(tmp) to fill a file beside `path`, then renames it over `path`, so `path` is either
    the whole new file or untouched. On OSError the partial file is removed and the error re-raised
    for the caller to word (it knows which file the user asked for and why)."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
