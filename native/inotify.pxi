# A minimal inotify binding, for the policy watcher of `pyclassify enforce`
# (pyclassify/enforce/watch.py, through pyclassify.nfqueue).
#
# Included by _native.pyx after nfqueue.pxi, whose declarations of poll(), close(), errno and
# `_os` it uses.

cdef extern from "<sys/inotify.h>" nogil:
    struct inotify_event:
        int wd
        uint32_t mask
        uint32_t cookie
        uint32_t len
        char name[1]
    int inotify_init1(int flags)
    int inotify_add_watch(int fd, const char *path, uint32_t mask)
    int inotify_rm_watch(int fd, int wd)
    enum:
        IN_NONBLOCK
        IN_CLOEXEC


cdef class Inotify:
    """A minimal inotify binding: ``add_watch(path, mask)``, ``read(timeout_ms)`` ->
    ``[(wd, mask, name), ...]`` (``[]`` on timeout)."""

    cdef int fd

    IN_MODIFY = 0x2
    IN_ATTRIB = 0x4
    IN_CLOSE_WRITE = 0x8
    IN_MOVED_FROM = 0x40
    IN_MOVED_TO = 0x80
    IN_CREATE = 0x100
    IN_DELETE = 0x200
    IN_DELETE_SELF = 0x400
    IN_MOVE_SELF = 0x800
    IN_IGNORED = 0x8000
    IN_ISDIR = 0x40000000
    IN_Q_OVERFLOW = 0x4000

    def __cinit__(self):
        self.fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(errno, f"inotify_init1: {_os.strerror(errno)}")

    def __dealloc__(self):
        if self.fd >= 0:
            close(self.fd)

    def fileno(self):
        return self.fd

    def close(self):
        if self.fd >= 0:
            close(self.fd)
            self.fd = -1

    def add_watch(self, path, uint32_t mask):
        cdef bytes p = _os.fsencode(path)
        cdef int wd = inotify_add_watch(self.fd, p, mask)
        if wd < 0:
            raise OSError(errno, f"inotify_add_watch {path!r}: {_os.strerror(errno)}")
        return wd

    def rm_watch(self, int wd):
        inotify_rm_watch(self.fd, wd)

    def read(self, int timeout_ms=-1):
        cdef pollfd pfd
        cdef uint8_t buf[16384]
        cdef ssize_t got
        cdef size_t off = 0
        cdef inotify_event *ev
        cdef int r
        if self.fd < 0:
            raise ValueError("inotify closed")
        pfd.fd = self.fd
        pfd.events = POLLIN
        pfd.revents = 0
        with nogil:
            r = poll(&pfd, 1, timeout_ms)
        if r <= 0:
            return []
        got = read(self.fd, buf, sizeof(buf))
        if got < 0:
            if errno == EAGAIN or errno == EINTR:
                return []
            raise OSError(errno, f"inotify read: {_os.strerror(errno)}")
        out = []
        while off + 16 <= <size_t>got:
            ev = <inotify_event *>(buf + off)
            name = ""
            if ev.len:
                name = _os.fsdecode((<char *>ev.name)[:ev.len].split(b"\0", 1)[0])
            out.append((ev.wd, ev.mask, name))
            off += 16 + ev.len
        return out
