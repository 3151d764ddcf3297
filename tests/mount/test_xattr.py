#!/usr/bin/python3
"""Every file type, extended attributes and POSIX ACLs on a real mount (issue 19), each
expectation what ext4 does (CKPTFS_XATTR_PLAIN=1 runs the same tests on a plain temporary
directory to check them; the mount test then also remounts and checks they were kept).

- FIFOs, sockets, character and block device nodes: mknod works, stat shows the type, mode and
  rdev, a FIFO carries data between a writer and a reader, all survive a remount, rm removes
  them; `ckptctl export` makes them again.
- Extended attributes: user.*, trusted.*, security.* set, read, listed,
  replaced and removed; XATTR_CREATE / XATTR_REPLACE, ENODATA, ERANGE (a short buffer, a
  256-byte name), E2BIG (a value over 64 KiB), EOPNOTSUPP (an unknown namespace); a 64 KiB value
  round-trips; they survive a remount and go with their file; setfattr/getfattr read the same.
- POSIX ACLs (setfacl/getfacl from Debian's acl): an entry for another user is enforced by the
  kernel (default_permissions); the mode's group bits show the mask; chmod rewrites the mask; a
  directory's default ACL is inherited by a new file and directory, and the umask does not
  apply there while it does elsewhere.

Run: /usr/bin/python3 tests/mount/test_xattr.py [-v]
"""

import sys

sys.dont_write_bytecode = True

import ctypes  # noqa: E402
import errno  # noqa: E402
import faulthandler  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from posixbase import FreshMountTestCase  # noqa: E402

PLAIN = os.environ.get('CKPTFS_XATTR_PLAIN') == '1'
NOBODY = 65534

libc = ctypes.CDLL(None, use_errno=True)
libc.getxattr.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
libc.getxattr.restype = ctypes.c_ssize_t
libc.listxattr.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
libc.listxattr.restype = ctypes.c_ssize_t


def raw_getxattr(path, name, size):
    """(result, errno) of getxattr(2) with a buffer of size bytes (0: size query)."""
    buf = ctypes.create_string_buffer(max(size, 1))
    r = libc.getxattr(path.encode(), name.encode(), buf if size else None, size)
    return r, (ctypes.get_errno() if r < 0 else 0)


def raw_listxattr(path, size):
    buf = ctypes.create_string_buffer(max(size, 1))
    r = libc.listxattr(path.encode(), buf if size else None, size)
    return r, (ctypes.get_errno() if r < 0 else 0)


def run(*argv, check=True, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise AssertionError('%s: %s%s' % (' '.join(argv), r.stdout, r.stderr))
    return r


def as_nobody(fn):
    """Run fn() in a child as uid/gid nobody; returns what it returned (an errno or 0)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                fn()
            except OSError as e:
                code = e.errno
        except BaseException:
            code = 255
        os.write(w, str(code).encode())
        os._exit(0)
    os.close(w)
    out = os.read(r, 64)
    os.close(r)
    os.waitpid(pid, 0)
    return int(out or b'254')


class XattrTest(FreshMountTestCase):
    maxDiff = None
    plain = PLAIN
    mount_opts = ('allow_other',)   # the tests act as nobody too

    def setUp(self):
        super().setUp()
        os.chmod(self.m.mnt, 0o755)

    def remount(self):
        if not PLAIN:
            self.m.remount()

    def err(self, fn, *a, **kw):
        try:
            fn(*a, **kw)
        except OSError as e:
            return e.errno
        return 0

    # -- file types --------------------------------------------------------------------------

    def test_special_files(self):
        kinds = {
            'fifo': (stat.S_IFIFO | 0o640, 0),
            'sock': (stat.S_IFSOCK | 0o600, 0),
            'null': (stat.S_IFCHR | 0o666, os.makedev(1, 3)),
            'blk': (stat.S_IFBLK | 0o660, os.makedev(7, 0)),
        }
        old = os.umask(0)
        try:
            for name, (mode, dev) in kinds.items():
                os.mknod(self.p(name), mode, dev)
            os.mkfifo(self.p('fifo2'), 0o600)
        finally:
            os.umask(old)
        s = socket.socket(socket.AF_UNIX)
        s.bind(self.p('bound.sock'))
        s.close()
        for phase in ('made', 'remounted'):
            for name, (mode, dev) in kinds.items():
                st = os.lstat(self.p(name))
                self.assertEqual(st.st_mode, mode, '%s %s' % (name, phase))
                self.assertEqual(st.st_rdev, dev, '%s %s' % (name, phase))
                self.assertEqual(st.st_size, 0)
            self.assertTrue(stat.S_ISSOCK(os.lstat(self.p('bound.sock')).st_mode))
            self.assertTrue(stat.S_ISFIFO(os.lstat(self.p('fifo2')).st_mode))
            self.remount()
        # a FIFO carries data from a writer to a reader (the kernel's pipe, as on ext4)
        got = []
        t = threading.Thread(target=lambda: got.append(ckfs.read_bytes(self.p('fifo'))))
        t.start()
        with open(self.p('fifo'), 'wb') as f:
            f.write(b'through the fifo')
        t.join(10)
        self.assertEqual(got, [b'through the fifo'])
        self.assertEqual(sorted(os.listdir(self.m.mnt)),
                         sorted(list(kinds) + ['fifo2', 'bound.sock']))
        for name in list(kinds) + ['fifo2', 'bound.sock']:
            os.unlink(self.p(name))
        self.assertEqual(os.listdir(self.m.mnt), [])

    def test_export_makes_special_files_again(self):
        """A Megatron step holding a FIFO and a device node exports them as such."""
        if PLAIN:
            self.skipTest('ckptctl export is ckptfs\'s')
        import torch
        step = self.p('iter_0000100')
        os.makedirs(os.path.join(step, 'mp_rank_00'))
        torch.save({'w': torch.ones(8)}, os.path.join(step, 'mp_rank_00', 'model_optim_rng.pt'))
        os.mkfifo(os.path.join(step, 'mp_rank_00', 'pipe'), 0o640)
        os.mknod(os.path.join(step, 'null'), stat.S_IFCHR | 0o644, os.makedev(1, 3))
        with open(self.p('latest_checkpointed_iteration.txt'), 'w') as f:
            f.write('100')
        dst = os.path.join(self.m.tmp, 'export')
        deadline = time.monotonic() + 20
        while True:     # the step completes once its file is durable
            r = self.m.ckptctl('export', '100', dst)
            if r.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        st = os.lstat(os.path.join(dst, 'iter_0000100', 'mp_rank_00', 'pipe'))
        self.assertTrue(stat.S_ISFIFO(st.st_mode))
        st = os.lstat(os.path.join(dst, 'iter_0000100', 'null'))
        self.assertTrue(stat.S_ISCHR(st.st_mode))
        self.assertEqual(st.st_rdev, os.makedev(1, 3))

    # -- extended attributes -----------------------------------------------------------------

    def test_xattr_set_get_list_remove(self):
        f = self.p('f')
        with open(f, 'wb') as fh:
            fh.write(b'data')
        names = ['user.a', 'user.checkpoint.step', 'trusted.t', 'security.s']
        for i, n in enumerate(names):
            os.setxattr(f, n, b'value %d' % i)
        # 64 KiB, the VFS's XATTR_SIZE_MAX; ext4 without ea_inode stores one block's worth
        big = os.urandom(3000 if PLAIN else 65536)
        os.setxattr(f, 'user.big', big)
        os.setxattr(f, 'user.empty', b'')
        for phase in ('set', 'remounted'):
            for i, n in enumerate(names):
                self.assertEqual(os.getxattr(f, n), b'value %d' % i, phase)
            self.assertEqual(os.getxattr(f, 'user.big'), big, phase)
            self.assertEqual(os.getxattr(f, 'user.empty'), b'', phase)
            # the order is the filesystem's (ext4 groups by namespace): compared as sets
            self.assertEqual(sorted(n for n in os.listxattr(f)
                                    if not n.startswith('security.selinux')),
                             sorted(names + ['user.big', 'user.empty']), phase)
            self.remount()
        # flags
        self.assertEqual(self.err(os.setxattr, f, 'user.a', b'x', os.XATTR_CREATE), errno.EEXIST)
        self.assertEqual(self.err(os.setxattr, f, 'user.no', b'x', os.XATTR_REPLACE),
                         errno.ENODATA)
        os.setxattr(f, 'user.a', b'replaced', os.XATTR_REPLACE)
        self.assertEqual(os.getxattr(f, 'user.a'), b'replaced')
        # errors
        self.assertEqual(self.err(os.getxattr, f, 'user.missing'), errno.ENODATA)
        self.assertEqual(self.err(os.removexattr, f, 'user.missing'), errno.ENODATA)
        self.assertEqual(self.err(os.setxattr, f, 'user.' + 'n' * 251, b'x'), errno.ERANGE)
        self.assertEqual(self.err(os.setxattr, f, 'user.huge', b'x' * 65537), errno.E2BIG)
        self.assertEqual(self.err(os.setxattr, f, 'bogus.name', b'x'), errno.EOPNOTSUPP)
        self.assertEqual(raw_getxattr(f, 'user.a', 0), (8, 0))
        self.assertEqual(raw_getxattr(f, 'user.a', 3), (-1, errno.ERANGE))
        need, e = raw_listxattr(f, 0)
        self.assertEqual(e, 0)
        self.assertEqual(raw_listxattr(f, need - 1), (-1, errno.ERANGE))
        # removal; setfattr/getfattr agree
        os.removexattr(f, 'user.big')
        self.assertNotIn('user.big', os.listxattr(f))
        run('setfattr', '-n', 'user.tool', '-v', 'from-setfattr', f)
        self.assertEqual(os.getxattr(f, 'user.tool'), b'from-setfattr')
        out = run('getfattr', '-d', '-m', '-', f).stdout
        self.assertIn('user.tool="from-setfattr"', out)
        # directories and symlinks (user.* only on files and directories, as the kernel says)
        os.mkdir(self.p('d'))
        os.setxattr(self.p('d'), 'user.dir', b'd')
        self.assertEqual(os.getxattr(self.p('d'), 'user.dir'), b'd')
        os.symlink('f', self.p('l'))
        self.assertEqual(self.err(os.setxattr, self.p('l'), 'user.x', b'x',
                                  0, follow_symlinks=False), errno.EPERM)
        os.setxattr(self.p('l'), 'trusted.x', b'x', follow_symlinks=False)
        self.assertEqual(os.getxattr(self.p('l'), 'trusted.x', follow_symlinks=False), b'x')
        # the attributes go with their file, and a new file of that name has none
        os.unlink(f)
        open(f, 'wb').close()
        self.assertEqual([n for n in os.listxattr(f) if not n.startswith('security.')], [])
        if not PLAIN:
            r = self.m.ckptctl('verify')
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_user_xattr_needs_write_permission(self):
        f = self.p('f')
        open(f, 'wb').close()
        os.chmod(f, 0o644)
        os.setxattr(f, 'user.owner', b'root')
        self.assertEqual(as_nobody(lambda: os.getxattr(f, 'user.owner')), 0)
        self.assertEqual(as_nobody(lambda: os.setxattr(f, 'user.x', b'1')), errno.EACCES)
        self.assertEqual(as_nobody(lambda: os.setxattr(f, 'trusted.x', b'1')), errno.EPERM)

    # -- POSIX ACLs ----------------------------------------------------------------------------

    def test_acl_enforced_and_mode_kept_in_step(self):
        f = self.p('secret')
        with open(f, 'wb') as fh:
            fh.write(b'for nobody too')
        os.chmod(f, 0o600)
        self.assertEqual(as_nobody(lambda: ckfs.read_bytes(f)), errno.EACCES)
        run('setfacl', '-m', 'u:%d:r' % NOBODY, f)
        self.assertEqual(as_nobody(lambda: ckfs.read_bytes(f)), 0)
        self.assertEqual(as_nobody(lambda: open(f, 'ab').close()), errno.EACCES)
        # the mode's group bits are the mask
        self.assertEqual(stat.S_IMODE(os.stat(f).st_mode), 0o640)
        out = run('getfacl', '-n', f).stdout
        self.assertIn('user:%d:r--' % NOBODY, out)
        self.assertIn('mask::r--', out)
        # chmod g-r rewrites the mask: the named entry no longer grants
        os.chmod(f, 0o600)
        self.assertIn('mask::---', run('getfacl', '-n', f).stdout)
        self.assertEqual(as_nobody(lambda: ckfs.read_bytes(f)), errno.EACCES)
        os.chmod(f, 0o640)
        self.remount()
        self.assertEqual(as_nobody(lambda: ckfs.read_bytes(f)), 0)
        self.assertIn('user:%d:r--' % NOBODY, run('getfacl', '-n', f).stdout)
        # removing the ACL leaves the mode
        run('setfacl', '-b', f)
        self.assertNotIn('user:%d' % NOBODY, run('getfacl', '-n', f).stdout)
        self.assertEqual(as_nobody(lambda: ckfs.read_bytes(f)), errno.EACCES)

    def test_default_acl_inherited_umask_elsewhere(self):
        d = self.p('shared')
        os.mkdir(d, 0o755)
        run('setfacl', '-d', '-m', 'u:%d:rwx,g::rx,o::-,m::rwx' % NOBODY, d)
        old = os.umask(0o077)
        try:
            with open(os.path.join(d, 'new'), 'wb') as fh:
                fh.write(b'x')
            os.mkdir(os.path.join(d, 'sub'))
            with open(self.p('plain'), 'wb') as fh:
                fh.write(b'x')
        finally:
            os.umask(old)
        # outside: the umask applies
        self.assertEqual(stat.S_IMODE(os.stat(self.p('plain')).st_mode), 0o600)
        # inside: the default ACL, masked by the mode asked for (0666 for a file), no umask
        newf = os.path.join(d, 'new')
        self.assertEqual(stat.S_IMODE(os.stat(newf).st_mode), 0o660)
        out = run('getfacl', '-n', newf).stdout
        self.assertIn('user:%d:rwx' % NOBODY, out)
        self.assertIn('mask::rw-', out)
        self.assertEqual(as_nobody(lambda: open(newf, 'ab').close()), 0)
        sub = os.path.join(d, 'sub')
        self.assertEqual(stat.S_IMODE(os.stat(sub).st_mode), 0o770)
        self.assertIn('default:user:%d:rwx' % NOBODY, run('getfacl', '-n', sub).stdout)
        self.remount()
        self.assertIn('default:user:%d:rwx' % NOBODY, run('getfacl', '-n', sub).stdout)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(600, exit=True)
    unittest.main(verbosity=2)
