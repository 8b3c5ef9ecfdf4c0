# SPDX-License-Identifier: Apache-2.0
"""The one way the package writes a file: whole or not at all, and never through a name it did not make.

What the target is decides how (DESIGN 4.17, the same rules as the `dmm` tool's output files):
  - a regular file, or a name that does not exist yet: the content goes to a temporary created
    exclusively beside it (tempfile.mkstemp: O_CREAT | O_EXCL | O_NOFOLLOW, a random name, mode 0600 while
    it is written), is flushed and synced, and the temporary is renamed over the target; a symbolic link
    to a regular file is followed, and the file it names is replaced (the link stays). The temporary is
    written through the descriptor that created it, never reopened by name, so a link or file planted at
    any name cannot receive the bytes. Mode: the replaced file's permission bits, else 0666 less the
    umask (read from /proc/self/status: calling os.umask to read it would change it for every thread;
    0644 where it cannot be read), set with fchmod;
  - a character device or a FIFO: written in place, never created, truncated or removed;
  - a folder, a link to nothing, anything else: OSError, before anything is written.
Only the temporary this call created is ever removed, and only while its name still holds that inode.
"""

import errno
import os
import stat
import tempfile


def _new_file_mode():
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o644


def _in_place(path, write):
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "wb") as f:
        write(f)


def write_whole(path, write):
    """Calls write(f), f a binary file open for writing, to fill `path` as the module says. On OSError
    the temporary is removed and the error re-raised for the caller to word (it knows which file the
    user asked for and why)."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise OSError(errno.ENOENT, "it is a symbolic link to a file that does not exist; name the file "
                          "itself", path) from None
        st = None
    if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        _in_place(path, write)
        return
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "it is a folder; name a file in it", path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "it is neither a regular file, a character device nor a FIFO", path)
    target = os.path.realpath(path) if st is not None else path
    mode = stat.S_IMODE(st.st_mode) & 0o777 if st is not None else _new_file_mode()
    folder, base = os.path.split(target)
    fd, tmp = tempfile.mkstemp(prefix="." + base[:200] + ".dmm-", dir=folder or ".")
    mine = os.fstat(fd)
    renamed = False
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            fd = -1
            write(f)
            f.flush()
            os.fsync(f.fileno())
        now = os.lstat(tmp)
        if (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
            raise OSError(errno.EEXIST, "its temporary was replaced by someone else while it was written; write "
                          "into a folder only you can write", tmp)
        os.replace(tmp, target)
        renamed = True
    finally:
        if fd >= 0:
            os.close(fd)
        if not renamed:
            try:
                now = os.lstat(tmp)
                if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
                    os.unlink(tmp)
            except OSError:
                pass
