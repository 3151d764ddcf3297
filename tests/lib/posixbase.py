"""posixbase.py - the base classes and small helpers of the POSIX mount tests.

MountedTestCase: one mount per test class (the daemon from ckfs.Mount, or with
CKPTFS_POSIX_PLAIN=1 a plain directory, to check the assertions against ext4/tmpfs); each test
works in a fresh directory named after the test, self.d, mode 0755 under umask 022:

    class RenameTest(MountedTestCase):
        mount_opts = ('allow_other',)       # the default
        def test_x(self):
            wfile(self.p('a'), b'x')
            self.assertErrno(errno.ENOENT, os.rename, self.p('b'), self.p('c'))

FreshMountTestCase: a new mount per test (self.m), on a plain directory when the class sets
plain = True.

PosixCase: a MountedTestCase mounted allow_other, with assertChildErrno/assertChildOk for what
a child process run as NOBODY got (test_posix.py, test_namespace.py).

Helpers: ename (errno name), wfile/rfile (whole-file write and read), renameat2(2),
new_mount/close_mount (start, and stop and remove, a mount or a plain directory), read_fd_all,
raw_readdir (readdir(3) with d_ino and d_type), libc.
"""

import ctypes
import errno
import os
import unittest

import ckfs

PLAIN = os.environ.get('CKPTFS_POSIX_PLAIN') == '1'

AT_FDCWD = -100
RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT = 1, 2, 4

NOBODY = 65534

_libc = libc = ctypes.CDLL(None, use_errno=True)
_libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                            ctypes.c_uint]


def ename(e):
    """The errno name of e ('ENOENT'), 'success' for None."""
    return errno.errorcode.get(e, str(e)) if e is not None else 'success'


def wfile(path, data, mode=0o644):
    """Create or truncate path (with mode, under the umask) and write all of data."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        mv = memoryview(data)
        while mv:
            mv = mv[os.write(fd, mv):]
    finally:
        os.close(fd)


def rfile(path):
    with open(path, 'rb') as f:
        return f.read()


def renameat2(src, dst, flags):
    """renameat(2) with flags (RENAME_NOREPLACE, ...); raises OSError on failure."""
    if _libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), src)


def new_mount(plain=PLAIN, **kw):
    """A started ckfs.Mount(**kw), or a ckfs.PlainDir when plain; nothing is left behind when
    the start fails."""
    if plain:
        return ckfs.PlainDir()
    m = ckfs.Mount(**kw)
    try:
        m.start()
    except BaseException:
        m.close()
        raise
    return m


def close_mount(m):
    """Unmount (raising if the unmount was not clean) and remove temp dirs."""
    try:
        m.unmount()
    finally:
        m.stop()
        m.remove_tmp()


class MountedTestCase(unittest.TestCase):
    """One mount per class, with mount_opts (a plain directory under CKPTFS_POSIX_PLAIN=1);
    self.d is the test's own directory in it."""
    mount_opts = ('allow_other',)

    @classmethod
    def setUpClass(cls):
        os.umask(0o022)
        cls.m = new_mount(opts=cls.mount_opts)
        os.chmod(cls.m.mnt, 0o755)

    @classmethod
    def tearDownClass(cls):
        close_mount(cls.m)

    def setUp(self):
        os.umask(0o022)
        self.d = self.m.path(self._testMethodName)
        os.mkdir(self.d)
        os.chmod(self.d, 0o755)

    def p(self, *parts):
        return os.path.join(self.d, *parts)

    def assertErrno(self, en, fn, *a, **kw):
        """fn(*a) must fail with errno en (en may be a tuple of accepted values)."""
        accepted = en if isinstance(en, tuple) else (en,)
        try:
            fn(*a, **kw)
        except OSError as e:
            self.assertIn(e.errno, accepted, '%s%r: expected %s, got %s (%s)' %
                          (fn.__name__, a, '/'.join(ename(x) for x in accepted),
                           ename(e.errno), e))
            return e
        self.fail('%s%r: expected %s, but it succeeded' %
                  (fn.__name__, a, '/'.join(ename(x) for x in accepted)))


class FreshMountTestCase(unittest.TestCase):
    """A new mount with mount_opts for every test (self.m, closed by the test's cleanup), or a
    plain directory when the class sets plain = True."""
    plain = False
    mount_opts = ()

    @classmethod
    def setUpClass(cls):
        if not cls.plain:
            ckfs.check_fuse_usable()

    def setUp(self):
        self.m = (ckfs.PlainDir() if self.plain else ckfs.Mount(opts=self.mount_opts)).start()
        self.addCleanup(self.m.close)

    def p(self, *parts):
        return self.m.path(*parts)


def read_fd_all(fd, bs=1 << 20):
    """The whole file open at fd, read from offset 0 in bs-byte reads."""
    os.lseek(fd, 0, os.SEEK_SET)
    out = []
    while True:
        b = os.read(fd, bs)
        if not b:
            return b''.join(out)
        out.append(b)


# -- raw readdir, for d_type -------------------------------------------------------------------

class Dirent64(ctypes.Structure):
    _fields_ = [('d_ino', ctypes.c_uint64), ('d_off', ctypes.c_int64),
                ('d_reclen', ctypes.c_ushort), ('d_type', ctypes.c_ubyte),
                ('d_name', ctypes.c_char * 256)]


libc.opendir.restype = ctypes.c_void_p
libc.opendir.argtypes = [ctypes.c_char_p]
libc.readdir64.restype = ctypes.POINTER(Dirent64)
libc.readdir64.argtypes = [ctypes.c_void_p]
libc.closedir.argtypes = [ctypes.c_void_p]
libc.telldir.restype = ctypes.c_long
libc.telldir.argtypes = [ctypes.c_void_p]
libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
libc.rewinddir.argtypes = [ctypes.c_void_p]
DT_UNKNOWN, DT_DIR, DT_REG, DT_LNK = 0, 4, 8, 10


def raw_readdir(path):
    """[(name, d_ino, d_type)] from readdir(3), including . and .."""
    d = libc.opendir(os.fsencode(path))
    if not d:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    res = []
    try:
        while True:
            ctypes.set_errno(0)
            ent = libc.readdir64(d)
            if not ent:
                e = ctypes.get_errno()
                if e:
                    raise OSError(e, os.strerror(e), path)
                return res
            ent = ent.contents
            res.append((os.fsdecode(ent.d_name), ent.d_ino, ent.d_type))
    finally:
        libc.closedir(d)


class PosixCase(MountedTestCase):
    """A MountedTestCase mounted allow_other, with the checks of a child run as NOBODY."""
    mount_opts = ('allow_other',)

    def assertChildErrno(self, res, en, what):
        self.assertEqual(res[0], 'err', '%s as uid %d: expected %s, but it succeeded (%r)' %
                         (what, NOBODY, ename(en), res))
        self.assertEqual(res[1], en, '%s as uid %d: expected %s, got %s' %
                         (what, NOBODY, ename(en), ename(res[1])))

    def assertChildOk(self, res, what):
        self.assertEqual(res[0], 'ok', '%s as uid %d: expected success, got %s (%s)' %
                         (what, NOBODY, ename(res[1]) if len(res) > 1 else '?', res))
        return res[1]
