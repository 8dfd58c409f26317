"""Seal folders from this process and everything it starts: Linux's Landlock (kernel 5.13 and later).

Landlock lets an unprivileged process give up rights for good; the kernel then checks every open, whatever asks
for it (Python's open, ctypes calling libc, a C++ extension, a subprocess such as ``cat``), through any path
(a symbolic link, /proc/self/fd, /proc/PID/root). Its rules only allow, so "everything but these folders" is
written as: reading and writing are allowed beneath every other entry of each folder on the way from / down to a
sealed folder, and reading beneath the few files and folders inside them that stay readable. Reading and writing
are restricted (files, folder listings, making and removing entries); executing and everything else are
untouched, and moving or linking a file out of a sealed folder is refused by Landlock itself. The rules bind the
thread that seals and every thread and process it starts afterwards, not threads that already run: seal before a
library starts a pool (the grader starts its processes with OPENBLAS_NUM_THREADS=1).

The kernel's interface (the ``landlock_*`` system calls and their structures) is documented in
https://docs.kernel.org/userspace-api/landlock.html. On another system, or a kernel without Landlock,
``seal_folders`` returns False and does nothing.
"""

from __future__ import annotations

import ctypes
import os
import platform
import stat
import struct
from pathlib import Path

SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}  # create_ruleset, add_rule, restrict_self
READ_FILE, READ_DIR = 1 << 2, 1 << 3  # LANDLOCK_ACCESS_FS_* (ABI 1)
READ = READ_FILE | READ_DIR
WRITE = (1 << 1) | sum(1 << bit for bit in range(4, 13))  # write a file; remove a folder or file; make any entry
FILE_RIGHTS = READ_FILE | (1 << 1)  # the only rights a rule on a file may carry (with execute, not handled here)
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38


def available() -> bool:
    """Whether this kernel enforces Landlock (its ABI version, asked without creating anything)."""
    calls = SYSCALLS.get(platform.machine())
    if platform.system() != "Linux" or calls is None:
        return False
    return ctypes.CDLL(None, use_errno=True).syscall(calls[0], None, ctypes.c_size_t(0), ctypes.c_uint32(1)) > 0


def seal_folders(folders: list[Path], readable: list[Path] = ()) -> bool:
    """From now on, this thread and the threads and processes it starts can neither read nor write anything
    beneath the ``folders`` but read the ``readable`` files and folders in them. True when the kernel enforces it;
    False, with nothing changed, where Landlock is not available or a rule cannot be made (a folder on the way that
    cannot be listed): never half a ruleset."""
    if not available():
        return False  # another system, or no Landlock in this kernel
    create, add_rule, restrict = SYSCALLS[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    handled = READ | WRITE
    attr = ctypes.create_string_buffer(struct.pack("=Q", handled))  # struct landlock_ruleset_attr, ABI 1's part
    ruleset = libc.syscall(create, attr, ctypes.c_size_t(len(attr.raw)), ctypes.c_uint32(0))
    if ruleset < 0:
        return False  # the kernel refused a ruleset: nothing changed
    try:
        sealed = {folder.resolve() for folder in folders}
        inside = lambda path: any(folder == path or folder in path.parents for folder in sealed)  # noqa: E731
        on_the_way = {parent for folder in sealed for parent in folder.parents if not inside(parent)}
        # every entry of a folder on the way down that is neither on the way nor sealed, then the readable paths
        for parent in on_the_way:
            for entry in os.scandir(parent):
                if Path(entry.path) not in on_the_way | sealed:
                    _allow(libc, add_rule, ruleset, Path(entry.path), handled)
        for path in {p.resolve() for p in readable}:
            if inside(path):
                _allow(libc, add_rule, ruleset, path, READ)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(restrict, ruleset, ctypes.c_uint32(0)):
            raise OSError(ctypes.get_errno(), "landlock_restrict_self: " + os.strerror(ctypes.get_errno()))
    except OSError:
        return False  # nothing is enforced before restrict_self succeeds
    finally:
        os.close(ruleset)
    return True


def _allow(libc, add_rule: int, ruleset: int, path: Path, access: int) -> None:
    """Allow ``access`` beneath ``path`` (a file gets only the file rights)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return  # gone since it was listed, or unreadable anyway
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISLNK(mode):
            return  # what it points to is allowed, or not, where it lives
        if not stat.S_ISDIR(mode):
            access &= FILE_RIGHTS  # a folder right on a file is refused (EINVAL)
        if access:
            rule = ctypes.create_string_buffer(struct.pack("=Qi", access, fd))  # landlock_path_beneath_attr, packed
            if libc.syscall(add_rule, ruleset, RULE_PATH_BENEATH, rule, ctypes.c_uint32(0)) != 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}: " + os.strerror(ctypes.get_errno()))
    finally:
        os.close(fd)
