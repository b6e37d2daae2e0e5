"""Output files written safely: nothing a run leaves half-written, nothing written through a link.

An output (``replay --out``, ``--allowed``, ``--denied``) is written to a new temporary file
beside its target (the same directory, so the same file system) and renamed over the target
only when the run succeeds: a run that fails leaves an earlier file of that name as it was,
and a reader never sees a half-written one. A target that is a symbolic link is refused
(``SymlinkRefused``) unless the caller asks to follow links, in which case the file the link
points to is replaced and the link kept. A target that is no regular file — a device such as
``/dev/null`` or ``/dev/full``, a pipe, ``/dev/stdout`` — is a stream: written in place, as
there is nothing there to keep.
"""

from __future__ import annotations

import os
import secrets
import stat
from typing import IO, Any

#: Paths written as streams whatever they link to (``/dev/stdout`` -> ``/proc/self/fd/1``).
STREAM_PREFIXES = ("/dev/", "/proc/self/fd/", "/proc/thread-self/fd/")


class SymlinkRefused(ValueError):
    """An output path that is a symbolic link, and following links was not asked for."""


def _is_stream(path: str) -> bool:
    if os.path.abspath(path).startswith(STREAM_PREFIXES):
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False  # nothing there yet: a new file


def check_target(option: str, path: str, follow_symlinks: bool) -> None:
    """Raises ``SymlinkRefused`` for an output that would be written through a link."""
    if follow_symlinks or _is_stream(path) or not os.path.islink(path):
        return
    raise SymlinkRefused(
        f"{option} {path} is a symbolic link (to {os.readlink(path)}): refusing to write through it "
        "(give --follow-symlinks to replace the file it points to)"
    )


class OutputFile:
    """One output: ``file`` is written, then ``commit()`` puts it in place or ``discard()``
    drops it (the target untouched)."""

    def __init__(self, option: str, path: str, binary: bool, follow_symlinks: bool = False) -> None:
        check_target(option, path, follow_symlinks)
        self.option, self.path = option, path
        self.stream = _is_stream(path)
        self.target = os.path.realpath(path) if follow_symlinks else path
        self.temp: str | None = None
        if self.stream:
            # commit closes it
            self.file: IO[Any] = open(path, "wb") if binary else open(path, "w", encoding="utf-8")  # noqa: SIM115
            return
        directory, name = os.path.split(os.path.abspath(self.target))
        # O_EXCL: a name nobody else holds; mode 0666 less the umask, as a plain open would make it
        for _ in range(100):
            temp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.tmp")
            try:
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - 100 random names taken
            raise FileExistsError(f"no free temporary name beside {self.target}")
        self.temp = temp
        try:
            existing = os.stat(self.target)
            os.chmod(temp, stat.S_IMODE(existing.st_mode))  # replacing a file keeps its permissions
        except OSError:
            pass
        self.file = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")

    def commit(self) -> None:
        """Closes the file (its last bytes written now: a full disk shows here) and renames it
        over the target. On an error the temporary file is removed and the error raised."""
        try:
            self.file.close()
            if self.temp is not None:
                os.replace(self.temp, self.target)
                self.temp = None
        finally:
            self.discard()

    def finish(self, keep: bool) -> str | None:
        """``commit()`` when ``keep`` (the run went through), else ``discard()`` (an earlier
        file of the name stays as it was); the error of a commit that failed, as the command
        reports it (the last bytes are written here: a full disk shows now)."""
        if not keep:
            self.discard()
            return None
        try:
            self.commit()
        except OSError as e:
            return f"{self.option} {self.path}: cannot write: {e.strerror or e}"
        return None

    def discard(self) -> None:
        """Drops what was written; the target stays as it was (a stream keeps what it got)."""
        try:
            self.file.close()
        except OSError:
            pass
        if self.temp is not None:
            try:
                os.unlink(self.temp)
            except OSError:
                pass
            self.temp = None
