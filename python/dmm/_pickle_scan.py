# SPDX-License-Identifier: Apache-2.0
"""Reads a pickle from an untrusted file within bounds, checking its opcode stream before anything is
unpickled: plain data only, nested at most `max_depth` deep, at most `max_bytes` long.

Why a scan before the load: the C unpickler builds objects iteratively, but it hashes dict keys and
set members as it goes, and hashing a tuple recurses in C without a guard, so a small pickle of a tuple
nested a million deep, used as a key, kills the interpreter with SIGSEGV before any Python code can
look at it. The scan walks the opcodes one by one (no recursion), keeping for each value on the
unpickler's stack how deep it nests (scalars 0, containers 1 + their deepest item, memo entries as they
were stored), and refuses the file at the first container deeper than the bound. It also refuses every
opcode that names a class or calls something (GLOBAL, REDUCE, BUILD, ...: only plain data is loaded),
out-of-band buffers, a memo entry read before it was written, and a stack or mark that underflows.

Cost: one pass, linear in the bytes (in pure Python, runs of memo references taken at once: about the C
unpickler's own time again); memory: the text, plus one small int per stack entry and memo entry. The
file is read in pieces and scanned as it arrives, so an input that is not a pickle (/dev/zero: opcode 0x00) is refused at its first bytes and
an endless one at the size bound, never read to its end.

Depth of a value that grows after it was stored in the memo (a list appended to later) is the depth it
had when stored: that can only under-count mutable containers, which hashing never enters (they are
unhashable), so the C unpickler's hashing is always within the bound; the caller's code must not
recurse into the data (dmm.trace describes values without repr).

Pure, stdlib only; raises ScanError (a ValueError) with a sentence.
"""

import re
import struct

__all__ = ["ScanError", "read_plain_pickle"]

_PIECE = 16 << 20
_BINGET_RUN = re.compile(rb"(?:h.)+", re.S)  # consecutive BINGETs (a one-byte argument each)
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from

# opcodes that name a global or call one, or bring data from outside the stream
_REFUSED = {
    0x63: "GLOBAL", 0x93: "STACK_GLOBAL", 0x52: "REDUCE", 0x62: "BUILD", 0x69: "INST", 0x6F: "OBJ",
    0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 0x50: "PERSID",
    0x51: "BINPERSID", 0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER",
}
# newline-terminated arguments (protocol 0): INT, LONG, FLOAT, STRING, UNICODE push a scalar
_TEXT_SCALARS = frozenset(b"ILFSV")
# a fixed-size argument, and whether the opcode pushes a scalar: BININT1 BININT2 BININT BINFLOAT
_FIXED_SCALARS = {0x4B: 1, 0x4D: 2, 0x4A: 4, 0x47: 8}
# one-byte length prefix: SHORT_BINUNICODE, SHORT_BINSTRING, SHORT_BINBYTES, LONG1
_SHORT_SCALARS = frozenset((0x8C, 0x55, 0x43, 0x8A))
# four-byte length: BINUNICODE, BINSTRING, BINBYTES, LONG4; eight-byte: BINUNICODE8, BINBYTES8, BYTEARRAY8
_LONG_SCALARS = frozenset((0x58, 0x54, 0x42, 0x8B))
_LONGER_SCALARS = frozenset((0x8D, 0x8E, 0x96))
_EMPTY = frozenset((0x7D, 0x5D, 0x29, 0x8F))  # EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE, EMPTY_SET
_NO_ARG_SCALARS = frozenset((0x4E, 0x88, 0x89))  # NONE, NEWTRUE, NEWFALSE


class ScanError(ValueError):
    """The stream is not a plain-data pickle within the bounds; the message says why and where. kind:
    "malformed" (not a pickle, or a broken one), "depth", "size" (a bound passed: the caller names its
    flag), or "code" (an opcode that loads a class or calls one; then `data` holds the bytes read so far,
    checked up to that opcode, so that the caller may let a refusing unpickler name the class: it stops
    at that opcode)."""

    def __init__(self, message, kind="malformed"):
        ValueError.__init__(self, message)
        self.kind = kind
        self.data = None


class _NeedMore(Exception):
    pass


class _Scan:
    """The scanner's state between pieces of the file."""

    def __init__(self, max_depth):
        self.max_depth = max_depth
        self.pos = 0          # the next opcode (everything before it is checked)
        self.stack = []       # the depth of each value on the unpickler's stack
        self.marks = []       # stack heights at each MARK
        self.memo = {}        # memo index -> depth of the value stored there
        self.stop = -1        # the byte after STOP, once seen

    def _deep(self, d, pos):
        raise ScanError("its data is nested more than %d deep (at byte %d); refused before unpickling, since "
                        "deeper data can crash the unpickler" % (self.max_depth, pos), "depth")

    def _fold(self, k, pos):
        """The items above stack height k, taken into the container below them."""
        stack = self.stack
        if k < 1 or k > len(stack):
            raise ScanError("its opcode stream is malformed (items with no container below, at byte %d)" % pos)
        if k < len(stack):
            d = max(stack[k:]) + 1
            del stack[k:]
            if d > stack[-1]:
                stack[-1] = d
                if d > self.max_depth:
                    self._deep(d, pos)

    def _build(self, k, pos):
        """The items above stack height k become one new container."""
        stack = self.stack
        if k < 0 or k > len(stack):
            raise ScanError("its opcode stream is malformed (a stack underflow at byte %d)" % pos)
        d = (max(stack[k:]) if k < len(stack) else 0) + 1
        del stack[k:]
        stack.append(d)
        if d > self.max_depth:
            self._deep(d, pos)

    def run(self, data, final):
        """Checks data from self.pos on; returns when it needs more bytes (unless final) or at STOP."""
        pos, stack, marks, memo = self.pos, self.stack, self.marks, self.memo
        push = stack.append
        n = len(data)
        try:
            while True:
                op = data[pos]  # (IndexError at the end of what has arrived: more is needed)
                if op == 0x68:  # BINGET, the commonest: runs of them fill shared lists, taken at once
                    if data[pos + 2] == 0x68:
                        end = _BINGET_RUN.match(data, pos).end()
                        stack.extend(map(memo.__getitem__, data[pos + 1:end:2]))
                        pos = end
                    else:
                        push(memo[data[pos + 1]])
                        pos += 2
                    continue
                if op == 0x28:  # MARK
                    marks.append(len(stack))
                    pos += 1
                elif op == 0x94:  # MEMOIZE
                    if not stack:
                        raise ScanError("its opcode stream is malformed (MEMOIZE on an empty stack, at byte %d)" % pos)
                    memo[len(memo)] = stack[-1]
                    pos += 1
                elif op in _FIXED_SCALARS:
                    if pos + _FIXED_SCALARS[op] >= n:
                        raise _NeedMore
                    push(0)
                    pos += 1 + _FIXED_SCALARS[op]
                elif op in _SHORT_SCALARS:
                    size = data[pos + 1]
                    push(0)
                    pos += 2 + size
                elif op == 0x75 or op == 0x65 or op == 0x90:  # SETITEMS, APPENDS, ADDITEMS
                    if not marks:
                        raise ScanError("its opcode stream is malformed (no MARK before byte %d)" % pos)
                    self._fold(marks.pop(), pos)
                    pos += 1
                elif op in _EMPTY:
                    push(1)
                    pos += 1
                elif op == 0x73:  # SETITEM
                    self._fold(len(stack) - 2, pos)
                    pos += 1
                elif op == 0x61:  # APPEND
                    self._fold(len(stack) - 1, pos)
                    pos += 1
                elif op == 0x85 or op == 0x86 or op == 0x87:  # TUPLE1, TUPLE2, TUPLE3
                    self._build(len(stack) - (op - 0x84), pos)
                    pos += 1
                elif op == 0x74 or op == 0x6C or op == 0x64 or op == 0x91:  # TUPLE, LIST, DICT, FROZENSET
                    if not marks:
                        raise ScanError("its opcode stream is malformed (no MARK before byte %d)" % pos)
                    self._build(marks.pop(), pos)
                    pos += 1
                elif op == 0x6A or op == 0x72 or op == 0x71:  # LONG_BINGET, LONG_BINPUT, BINPUT
                    size = 1 if op == 0x71 else 4
                    if pos + size >= n:
                        raise _NeedMore
                    idx = data[pos + 1] if size == 1 else _U32(data, pos + 1)[0]
                    if op == 0x6A:
                        push(memo[idx])
                    elif not stack:
                        raise ScanError("its opcode stream is malformed (a PUT on an empty stack, at byte %d)" % pos)
                    else:
                        memo[idx] = stack[-1]
                    pos += 1 + size
                elif op in _LONG_SCALARS:
                    if pos + 4 >= n:
                        raise _NeedMore
                    push(0)
                    pos += 5 + _U32(data, pos + 1)[0]
                elif op in _LONGER_SCALARS:
                    if pos + 8 >= n:
                        raise _NeedMore
                    push(0)
                    pos += 9 + _U64(data, pos + 1)[0]
                elif op in _NO_ARG_SCALARS:
                    push(0)
                    pos += 1
                elif op == 0x95:  # FRAME
                    pos += 9
                elif op == 0x80:  # PROTO
                    pos += 2
                elif op == 0x30:  # POP: the top value, or the mark itself when none is above it (as pickle does)
                    if marks and marks[-1] == len(stack):
                        marks.pop()
                    elif stack:
                        stack.pop()
                    else:
                        raise ScanError("its opcode stream is malformed (POP on an empty stack, at byte %d)" % pos)
                    pos += 1
                elif op == 0x31:  # POP_MARK
                    if not marks:
                        raise ScanError("its opcode stream is malformed (no MARK before byte %d)" % pos)
                    del stack[marks.pop():]
                    pos += 1
                elif op == 0x32:  # DUP
                    if not stack:
                        raise ScanError("its opcode stream is malformed (DUP on an empty stack, at byte %d)" % pos)
                    push(stack[-1])
                    pos += 1
                elif op in _TEXT_SCALARS or op == 0x70 or op == 0x67:  # ... and PUT, GET (protocol 0)
                    eol = data.find(b"\n", pos + 1)
                    if eol < 0:
                        raise _NeedMore
                    if op in _TEXT_SCALARS:
                        push(0)
                    else:
                        text = bytes(data[pos + 1:eol])
                        if not text.isdigit() or len(text) > 18:
                            raise ScanError("its opcode stream is malformed (a memo index %r at byte %d)"
                                            % (text[:20], pos))
                        if op == 0x67:
                            push(memo[int(text)])
                        elif not stack:
                            raise ScanError("its opcode stream is malformed (a PUT on an empty stack, at byte %d)"
                                            % pos)
                        else:
                            memo[int(text)] = stack[-1]
                    pos = eol + 1
                elif op == 0x2E:  # STOP
                    if len(stack) != 1 or marks:
                        raise ScanError("its opcode stream is malformed (it stops with %d values and %d marks on "
                                        "the stack, at byte %d)" % (len(stack), len(marks), pos))
                    self.stop = pos + 1
                    return
                elif op in _REFUSED:
                    raise ScanError("it uses %s (at byte %d), which loads a class or calls a function; only plain "
                                    "data (dicts, lists, strings, numbers) is loaded from a file, because "
                                    "unpickling anything else can run code" % (_REFUSED[op], pos), "code")
                else:
                    raise ScanError("byte %d is 0x%02x, which is no pickle opcode: not a pickle" % (pos, op))
        except KeyError:
            raise ScanError("its opcode stream is malformed (a memo entry read before it was written, at byte %d)"
                            % pos) from None
        except (_NeedMore, IndexError, struct.error):
            self.pos = pos
            if final:
                raise ScanError("it ends in the middle (after %d bytes, before its STOP opcode): truncated" % n) \
                    from None


def read_plain_pickle(f, max_bytes, max_depth):
    """The bytes of the pickle that file object `f` (binary) holds, up to its STOP, after they passed the
    scan; ScanError otherwise. Reads at most max_bytes + 1 bytes."""
    data = bytearray()
    scan = _Scan(max_depth)
    while True:
        piece = f.read(min(_PIECE, max_bytes + 1 - len(data)))
        if piece:
            data += piece
        if len(data) > max_bytes:
            scan.run(data[:max_bytes], False)
            if scan.stop >= 0:
                return bytes(data[:scan.stop])
            raise ScanError("it holds more than %d bytes and goes on, the most a snapshot may be here (an input "
                            "that never ends, such as a device or a pipe, is not one)" % max_bytes, "size")
        try:
            scan.run(data, not piece)
        except ScanError as e:
            if e.kind == "code":
                e.data = bytes(data)
            raise
        if scan.stop >= 0:
            return bytes(data[:scan.stop])
