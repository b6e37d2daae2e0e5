"""Why the enforcement daemon cannot start, and the exit code ``pyclassify enforce`` gives for it."""

from __future__ import annotations

import errno
import os

#: Exit codes of ``enforce`` beyond 1 (invalid input) and 2 (usage), as docs/commands.md lists them.
EXIT_PREREQUISITE = 6  # not root / no CAP_NET_ADMIN, iptables missing, no kernel support
EXIT_IN_USE = 7  # a queue, an address or an interface in use by another, or absent


class EnforceError(RuntimeError):
    """The daemon cannot start (invalid manifests, queue busy, no permission, ...); ``code`` is
    the exit code that says which."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def queue_error(queue: int, e: OSError) -> EnforceError:
    """What binding NFQUEUE ``queue`` failing with ``e`` means."""
    if e.errno == errno.EPERM and os.geteuid() == 0:
        # As root, the kernel answers EPERM when another process has the queue bound.
        return EnforceError(
            f"cannot bind NFQUEUE {queue}: another process listens on it (one listener per "
            "queue): stop it or pick another --queue",
            EXIT_IN_USE,
        )
    if e.errno in (errno.EPERM, errno.EACCES):
        return EnforceError(
            f"cannot bind NFQUEUE {queue}: {e.strerror or e}: enforce needs root (or CAP_NET_ADMIN)", EXIT_PREREQUISITE
        )
    return EnforceError(
        f"cannot bind NFQUEUE {queue}: {e.strerror or e}: does this kernel have "
        "nfnetlink_queue (modprobe nfnetlink_queue)?",
        EXIT_PREREQUISITE,
    )
