#!/usr/bin/python3
"""Ownership, times, rename and unlink across every file type, as ext4 keeps them (issue 19:
the areas where pjdfstest's chown, chmod, link, rename, unlink, rmdir, mkdir, open and utimensat
files failed on a ckptfs mount).

Each scenario runs twice, on a plain directory of this machine's disk (ext4) and on a ckptfs
mount, and returns a list of observations: errnos, modes, owners, link counts, sizes, and
whether each time moved. The two lists must be equal: the expectation is what ext4 did in the
same run, not a number written here. Types: regular file, directory, FIFO, socket, symlink,
character and block device. The mount is made with `-o dev,suid` as the plain directory's disk
is: `nodev` (FUSE's default, where opening a device node is EACCES) is the mount's choice.

Run: /usr/bin/python3 tests/mount/test_metadata.py [-v]
"""

import sys

sys.dont_write_bytecode = True

import ctypes  # noqa: E402
import errno  # noqa: E402
import faulthandler  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402

NOBODY = 65534
GROUP = 65533           # nogroup
TYPES = ['reg', 'dir', 'fifo', 'sock', 'symlink', 'chr', 'blk']
TICK = 0.02             # seconds between an action and the one whose times it compares


def make(path, t):
    if t == 'reg':
        with open(path, 'wb') as f:
            f.write(b'x' * 100)
    elif t == 'dir':
        os.mkdir(path, 0o755)
    elif t == 'fifo':
        os.mkfifo(path, 0o644)
    elif t == 'sock':
        os.mknod(path, stat.S_IFSOCK | 0o644)
    elif t == 'symlink':
        os.symlink('target-' + os.path.basename(path), path)
    elif t == 'chr':
        os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 3))
    elif t == 'blk':
        os.mknod(path, stat.S_IFBLK | 0o644, os.makedev(7, 0))


def err(fn, *a, **kw):
    try:
        fn(*a, **kw)
        return 0
    except OSError as e:
        return errno.errorcode.get(e.errno, e.errno)


def st(path):
    return os.lstat(path)


def moved(before, after):
    """Which of mtime and ctime moved between two stats: ('m'|'-', 'c'|'-')."""
    return (('m' if after.st_mtime_ns != before.st_mtime_ns else '-') +
            ('c' if after.st_ctime_ns != before.st_ctime_ns else '-'))


UTIME_OMIT = (1 << 30) - 2      # <linux/stat.h>


class Timespec(ctypes.Structure):
    _fields_ = [('tv_sec', ctypes.c_long), ('tv_nsec', ctypes.c_long)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.futimens.argtypes = [ctypes.c_int, ctypes.POINTER(Timespec)]


def futimens(fd, atime, mtime):
    """futimens(2) with two (sec, nsec) pairs; nsec may be UTIME_OMIT."""
    ts = (Timespec * 2)(Timespec(*atime), Timespec(*mtime))
    if _libc.futimens(fd, ts) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def as_user(uid, gid, fn):
    """Run fn() in a child with uid/gid (groups [gid]); returns its result (an errno name or 0,
    or whatever picklable value fn returns, as repr)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        out = 'crash'
        try:
            os.setgroups([gid])
            os.setgid(gid)
            os.setuid(uid)
            try:
                out = repr(fn())
            except OSError as e:
                out = repr(errno.errorcode.get(e.errno, e.errno))
        finally:
            os.write(w, out.encode())
            os._exit(0)
    os.close(w)
    out = b''
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        out += b
    os.close(r)
    os.waitpid(pid, 0)
    return out.decode()


# -- scenarios: each (root) -> [observations] ----------------------------------------------------

def sc_chown_times(root):
    """chown, chmod and utimens of every type: ctime moves, mtime does not (utimens sets it)."""
    obs = []
    for t in TYPES:
        p = os.path.join(root, t)
        make(p, t)
        s0 = st(p)
        time.sleep(TICK)
        os.chown(p, NOBODY, GROUP, follow_symlinks=False)
        s1 = st(p)
        obs.append((t, 'chown', s1.st_uid, s1.st_gid, moved(s0, s1)))
        time.sleep(TICK)
        os.chown(p, -1, -1, follow_symlinks=False)
        s2 = st(p)
        obs.append((t, 'chown -1 -1', moved(s1, s2)))
        if t != 'symlink':
            time.sleep(TICK)
            os.chmod(p, 0o640)
            s3 = st(p)
            obs.append((t, 'chmod', stat.S_IMODE(s3.st_mode), moved(s2, s3)))
        time.sleep(TICK)
        os.utime(p, ns=(1_000_000_123, 2_000_000_456), follow_symlinks=False)
        s4 = st(p)
        obs.append((t, 'utimens', s4.st_atime_ns, s4.st_mtime_ns))
        time.sleep(TICK)
        # UTIME_OMIT for atime, UTIME_NOW for mtime: os.utime cannot say OMIT; set both now
        os.utime(p, follow_symlinks=False)
        s5 = st(p)
        obs.append((t, 'utimens now', s5.st_mtime_ns > s4.st_mtime_ns, moved(s4, s5)[1]))
    return obs


def sc_chown_clears_setid(root):
    """chown of a set-user-ID / set-group-ID executable clears them, also for root."""
    obs = []
    for mode in (0o4755, 0o2755, 0o6755, 0o2745):
        p = os.path.join(root, 'exe%o' % mode)
        make(p, 'reg')
        os.chmod(p, mode)
        os.chown(p, NOBODY, -1)
        obs.append((oct(mode), 'chown uid', oct(stat.S_IMODE(st(p).st_mode))))
        os.chmod(p, mode)
        os.chown(p, -1, GROUP)
        obs.append((oct(mode), 'chown gid', oct(stat.S_IMODE(st(p).st_mode))))
    d = os.path.join(root, 'sgid-dir')
    os.mkdir(d, 0o2755)
    os.chown(d, NOBODY, -1)
    obs.append(('dir', oct(stat.S_IMODE(st(d).st_mode))))
    return obs


def sc_unprivileged_chown_chmod(root):
    """As the owner (nobody): chown to another user is EPERM, to one's own group works, chmod
    of another's file is EPERM, setting S_ISGID on a file of a group one is not in is cleared."""
    os.chmod(root, 0o777)
    obs = []
    for t in ('reg', 'dir', 'fifo'):
        p = os.path.join(root, 'u-' + t)
        make(p, t)
        os.chown(p, NOBODY, 0)
        obs.append((t, 'chown to root', as_user(NOBODY, GROUP, lambda: err(os.chown, p, 0, -1))))
        obs.append((t, 'chgrp own group', as_user(NOBODY, GROUP,
                                                   lambda: err(os.chown, p, -1, GROUP))))
        obs.append((t, 'gid now', st(p).st_gid))
        os.chown(p, NOBODY, 0)
        obs.append((t, 'chmod g+s, not in group', as_user(
            NOBODY, GROUP, lambda: (err(os.chmod, p, 0o2755),
                                    oct(stat.S_IMODE(os.stat(p).st_mode))))))
        q = os.path.join(root, 'r-' + t)
        make(q, t)
        obs.append((t, 'chmod root\'s', as_user(NOBODY, GROUP, lambda: err(os.chmod, q, 0o777))))
    return obs


def sc_link_times(root):
    """link of every non-directory type: nlink, the file's ctime and the directory's mtime and
    ctime move; link of a directory is EPERM; unlink moves them back."""
    obs = []
    for t in TYPES:
        if t == 'dir':
            continue
        p = os.path.join(root, 'l-' + t)
        make(p, t)
        s0, d0 = st(p), st(root)
        time.sleep(TICK)
        os.link(p, p + '.2', follow_symlinks=False)
        s1, d1 = st(p), st(root)
        obs.append((t, 'link', s1.st_nlink, moved(s0, s1), moved(d0, d1)))
        time.sleep(TICK)
        os.unlink(p + '.2')
        s2, d2 = st(p), st(root)
        obs.append((t, 'unlink', s2.st_nlink, moved(s1, s2), moved(d1, d2)))
    d = os.path.join(root, 'ldir')
    os.mkdir(d)
    obs.append(('dir', 'link', err(os.link, d, d + '.2')))
    return obs


def sc_rename_across_types(root):
    """rename of each type over each type: the errno ext4 gives, then what is where."""
    obs = []
    for a in TYPES:
        for b in TYPES + [None]:
            sub = os.path.join(root, 'r-%s-%s' % (a, b))
            os.mkdir(sub)
            src, dst = os.path.join(sub, 'src'), os.path.join(sub, 'dst')
            make(src, a)
            if b:
                make(dst, b)
            s0, d0 = st(src), st(sub)
            time.sleep(TICK)
            e = err(os.rename, src, dst)
            after = sorted(os.listdir(sub))
            row = [a, b, e, after]
            if not e:
                s1 = st(dst)
                row += [stat.S_IFMT(s1.st_mode) == stat.S_IFMT(s0.st_mode), s1.st_nlink,
                        moved(s0, s1)[1], moved(d0, st(sub))]
            obs.append(tuple(row))
    # a directory over a non-empty directory; into its own subdirectory
    d1, d2 = os.path.join(root, 'full1'), os.path.join(root, 'full2')
    os.makedirs(os.path.join(d2, 'inner'))
    os.mkdir(d1)
    obs.append(('dir over non-empty', err(os.rename, d1, d2)))
    obs.append(('dir into itself', err(os.rename, d2, os.path.join(d2, 'inner', 'x'))))
    # parent link counts follow a directory moving between parents
    a, b = os.path.join(root, 'pa'), os.path.join(root, 'pb')
    os.makedirs(os.path.join(a, 'child'))
    os.mkdir(b)
    os.rename(os.path.join(a, 'child'), os.path.join(b, 'child'))
    obs.append(('parents nlink', st(a).st_nlink, st(b).st_nlink))
    return obs


def sc_unlink_rmdir_types(root):
    """unlink and rmdir of every type: the errno, and the directory's times."""
    obs = []
    for t in TYPES:
        p = os.path.join(root, 'u-' + t)
        make(p, t)
        obs.append((t, 'rmdir', err(os.rmdir, p)))
        d0 = st(root)
        time.sleep(TICK)
        obs.append((t, 'unlink', err(os.unlink, p), moved(d0, st(root))))
        if os.path.lexists(p):
            os.rmdir(p)
    obs.append(('rmdir .', err(os.rmdir, os.path.join(root, '.'))))
    return obs


def sc_create_over_types(root):
    """mkdir, mknod, mkfifo, symlink, link and O_CREAT|O_EXCL over every type: EEXIST;
    open of each type: what ext4 answers (a FIFO without a reader under O_NONBLOCK: ENXIO)."""
    obs = []
    for t in TYPES:
        p = os.path.join(root, 'c-' + t)
        make(p, t)
        obs.append((t, 'mkdir', err(os.mkdir, p)))
        obs.append((t, 'mkfifo', err(os.mkfifo, p)))
        obs.append((t, 'mknod', err(os.mknod, p, stat.S_IFREG | 0o644)))
        obs.append((t, 'symlink', err(os.symlink, 'x', p)))
        obs.append((t, 'open excl', err(os.open, p, os.O_CREAT | os.O_EXCL | os.O_WRONLY)))

        def try_open(flags):
            fd = os.open(p, flags)
            os.close(fd)
        if t not in ('symlink',):
            obs.append((t, 'open wronly nonblock',
                        err(try_open, os.O_WRONLY | os.O_NONBLOCK)))
            obs.append((t, 'open rdonly nonblock', err(try_open, os.O_RDONLY | os.O_NONBLOCK)))
            obs.append((t, 'open directory', err(try_open, os.O_RDONLY | os.O_DIRECTORY)))
        obs.append((t, 'open nofollow', err(try_open, os.O_RDONLY | os.O_NOFOLLOW |
                                            os.O_NONBLOCK)))
    return obs


def sc_sticky(root):
    """In a sticky directory (mode 1777), another user cannot unlink or rename over entries
    they do not own, and can their own."""
    d = os.path.join(root, 'tmp')
    os.mkdir(d)
    os.chmod(d, 0o1777)
    obs = []
    for t in ('reg', 'dir', 'fifo', 'symlink'):
        theirs, mine = os.path.join(d, 'root-' + t), os.path.join(d, 'nobody-' + t)
        make(theirs, t)
        make(mine, t)
        os.chown(mine, NOBODY, GROUP, follow_symlinks=False)
        rm = os.rmdir if t == 'dir' else os.unlink
        obs.append((t, 'remove another\'s', as_user(NOBODY, GROUP, lambda: err(rm, theirs))))
        obs.append((t, 'rename another\'s', as_user(
            NOBODY, GROUP, lambda: err(os.rename, theirs, theirs + '.x'))))
        obs.append((t, 'remove own', as_user(NOBODY, GROUP, lambda: err(rm, mine))))
    return obs


def sc_futimens_atime_open_write(root):
    """futimens of the atime alone (mtime UTIME_OMIT) on a file open for writing, after a
    write: ctime moves, seen by fstat before the close and by stat after it (xfstests
    generic/221)."""
    p = os.path.join(root, 'f')
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b'x' * 4096)
        s0 = os.fstat(fd)
        time.sleep(TICK)
        futimens(fd, (1_000_000, 123), (0, UTIME_OMIT))
        s1 = os.fstat(fd)
    finally:
        os.close(fd)
    s2 = os.stat(p)
    return [('fstat', s1.st_atime_ns, s1.st_ctime_ns > s0.st_ctime_ns,
             s1.st_mtime_ns == s0.st_mtime_ns),
            ('stat after close', s2.st_atime_ns, s2.st_ctime_ns == s1.st_ctime_ns,
             s2.st_mtime_ns == s0.st_mtime_ns)]


SCENARIOS = [sc_chown_times, sc_chown_clears_setid, sc_unprivileged_chown_chmod, sc_link_times,
             sc_rename_across_types, sc_unlink_rmdir_types, sc_create_over_types, sc_sticky,
             sc_futimens_atime_open_write]


class MetadataTest(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        ckfs.check_fuse_usable()

    def run_both(self, fn):
        old = os.umask(0o022)
        plain = ckfs.PlainDir()
        m = ckfs.Mount(opts=('allow_other', 'layout=none', 'dev', 'suid')).start()
        try:
            roots = []
            for side in (plain, m):
                r = side.path('t')
                os.mkdir(r)
                os.chmod(side.mnt, 0o755)
                roots.append(r)
            want = fn(roots[0])
            got = fn(roots[1])
            self.assertEqual(got, want, '%s: ckptfs (first) differs from ext4 (second)' %
                             fn.__name__)
            self.assertGreater(len(want), 0)
        finally:
            os.umask(old)
            m.close()
            plain.close()


def _add(fn):
    def t(self):
        self.run_both(fn)
    t.__name__ = 'test_' + fn.__name__[3:]
    t.__doc__ = fn.__doc__
    setattr(MetadataTest, t.__name__, t)


for _fn in SCENARIOS:
    _add(_fn)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(600, exit=True)
    unittest.main(verbosity=2)
