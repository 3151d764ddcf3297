#!/usr/bin/python3
"""The namespace of a real ckptfs mount: rename (atomic replacement, open files, directories,
ENOTEMPTY, RENAME_NOREPLACE, EISDIR/ENOTDIR, EINVAL, EXDEV), unlink and rmdir (of open and
mapped files), and readdir (a large directory with d_type, a directory listed while removed).
Split from test_posix.py (issue 2's list); every assertion states what a plain directory does
(CKPTFS_POSIX_PLAIN=1 runs the same tests on a plain temporary directory).

Run: /usr/bin/python3 tests/mount/test_namespace.py [-v] [NamespaceTest.test_xxx]
"""

import sys

sys.dont_write_bytecode = True

import errno  # noqa: E402
import faulthandler  # noqa: E402
import mmap  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import stat  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

from ckfs import content  # noqa: E402
from posixbase import (DT_DIR, DT_LNK, DT_REG, DT_UNKNOWN, PLAIN, RENAME_NOREPLACE,  # noqa: E402
                       PosixCase, libc, raw_readdir, read_fd_all, renameat2, rfile, wfile)

MiB = 1 << 20


class NamespaceTest(PosixCase):

    def test_rename_replaces_atomically(self):
        """A reader that keeps opening the target sees the old or the new file, never ENOENT
        and never a mix, while a writer replaces it by rename over and over."""
        target = self.p('ckpt.pt')
        size = 256 * 1024

        def version(v):
            return b'%08d' % v + content('ver%d' % v, size - 8)

        wfile(target, version(0))
        stop = self.p('stop')
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            msg = b''
            reads = 0
            try:
                while not os.path.exists(stop):
                    try:
                        b = rfile(target)
                    except OSError as e:
                        msg = b'open/read failed: %s' % str(e).encode()
                        break
                    v = int(b[:8])
                    if b != version(v):
                        msg = b'torn content: version %d, %d bytes' % (v, len(b))
                        break
                    reads += 1
            except BaseException as e:  # noqa: BLE001
                msg = repr(e).encode()
            os.write(w, msg or b'ok %d' % reads)
            os._exit(0)
        os.close(w)
        try:
            for v in range(1, 31):
                tmp = self.p('ckpt.pt.tmp%d' % v)
                wfile(tmp, version(v))
                os.rename(tmp, target)
            wfile(stop, b'')
        finally:
            if not os.path.exists(stop):
                os.kill(pid, signal.SIGKILL)
            out = os.read(r, 4096)
            os.close(r)
            os.waitpid(pid, 0)
        self.assertTrue(out.startswith(b'ok'), out.decode(errors='replace'))
        self.assertEqual(rfile(target), version(30))
        self.assertEqual(sorted(os.listdir(self.d)), ['ckpt.pt', 'stop'])

    def test_rename_open_file(self):
        a, b = self.p('a.tmp'), self.p('a')
        fd = os.open(a, os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, b'first-')
        ino = os.fstat(fd).st_ino
        os.rename(a, b)                                 # safetensors HEAD renames while open
        os.write(fd, b'second')
        os.fsync(fd)
        self.assertEqual(os.pread(fd, 100, 0), b'first-second')
        self.assertEqual(os.fstat(fd).st_size, 12)
        os.close(fd)
        self.assertFalse(os.path.lexists(a))
        self.assertEqual(rfile(b), b'first-second')
        self.assertEqual(os.stat(b).st_ino, ino)
        # a reader keeps reading across a rename
        rfd = os.open(b, os.O_RDONLY)
        os.rename(b, self.p('c'))
        self.assertEqual(os.read(rfd, 100), b'first-second')
        os.close(rfd)
        # rename of an open file onto an existing name
        wfile(self.p('old'), b'old contents')
        fd = os.open(self.p('c'), os.O_WRONLY | os.O_APPEND)
        os.rename(self.p('c'), self.p('old'))
        os.write(fd, b'+')
        os.close(fd)
        self.assertEqual(rfile(self.p('old')), b'first-second+')

    def test_rename_nonempty_dir(self):
        a = self.p('iter_0000100.tmp')
        os.makedirs(os.path.join(a, 'mp_rank_00', 'deep'))
        files = {'mp_rank_00/model_optim_rng.pt': content('m', 3 * MiB + 1),
                 'mp_rank_00/deep/x': b'x', 'meta.json': b'{}'}
        for k, v in files.items():
            wfile(os.path.join(a, k), v)
        ino = os.stat(a).st_ino
        b = self.p('iter_0000100')
        os.rename(a, b)
        self.assertFalse(os.path.lexists(a))
        self.assertEqual(os.stat(b).st_ino, ino)
        for k, v in files.items():
            self.assertEqual(rfile(os.path.join(b, k)), v)
        # into another directory, and over an empty directory (allowed: it is replaced)
        os.mkdir(self.p('other'))
        os.mkdir(self.p('other', 'empty'))
        os.rename(b, self.p('other', 'empty'))
        self.assertEqual(sorted(os.listdir(self.p('other'))), ['empty'])
        self.assertEqual(rfile(self.p('other', 'empty', 'meta.json')), b'{}')
        self.assertEqual(sorted(os.listdir(self.d)), ['other'])
        # the moved directory's '..' is its new parent
        self.assertEqual(os.stat(self.p('other', 'empty', '..')).st_ino,
                         os.stat(self.p('other')).st_ino)

    def test_rename_enotempty(self):
        os.makedirs(self.p('src', 's'))
        os.makedirs(self.p('dst', 'd'))
        self.assertErrno(errno.ENOTEMPTY, os.rename, self.p('src'), self.p('dst'))
        self.assertTrue(os.path.isdir(self.p('src', 's')))
        self.assertTrue(os.path.isdir(self.p('dst', 'd')))
        self.assertErrno(errno.ENOTEMPTY, os.replace, self.p('src'), self.p('dst'))

    def test_rename_noreplace_eexist(self):
        wfile(self.p('a'), b'a')
        wfile(self.p('b'), b'b')
        self.assertErrno(errno.EEXIST, renameat2, self.p('a'), self.p('b'), RENAME_NOREPLACE)
        self.assertEqual(rfile(self.p('a')), b'a')
        self.assertEqual(rfile(self.p('b')), b'b')
        os.mkdir(self.p('d'))
        self.assertErrno(errno.EEXIST, renameat2, self.p('a'), self.p('d'), RENAME_NOREPLACE)
        renameat2(self.p('a'), self.p('c'), RENAME_NOREPLACE)
        self.assertEqual(rfile(self.p('c')), b'a')
        self.assertFalse(os.path.lexists(self.p('a')))

    def test_rename_eisdir_enotdir(self):
        wfile(self.p('f'), b'f')
        os.mkdir(self.p('d'))
        os.mkdir(self.p('e'))
        wfile(self.p('e', 'x'), b'x')
        self.assertErrno(errno.EISDIR, os.rename, self.p('f'), self.p('d'))    # file over dir
        self.assertErrno(errno.ENOTDIR, os.rename, self.p('d'), self.p('f'))   # dir over file
        self.assertErrno(errno.ENOTDIR, os.rename, self.p('f', 'x'), self.p('y'))
        self.assertErrno(errno.ENOTDIR, os.rename, self.p('e', 'x'), self.p('f', 'y'))
        self.assertErrno(errno.ENOENT, os.rename, self.p('missing'), self.p('y'))
        self.assertErrno(errno.ENOENT, os.rename, self.p('f'), self.p('nodir', 'y'))
        os.rename(self.p('f'), self.p('f'))                               # same name: no-op
        self.assertEqual(rfile(self.p('f')), b'f')
        self.assertEqual(sorted(os.listdir(self.d)), ['d', 'e', 'f'])

    def test_rename_dir_into_itself_einval(self):
        os.makedirs(self.p('a', 'b', 'c'))
        self.assertErrno(errno.EINVAL, os.rename, self.p('a'), self.p('a', 'b', 'c', 'a'))
        self.assertErrno(errno.EINVAL, os.rename, self.p('a'), self.p('a', 'x'))
        self.assertTrue(os.path.isdir(self.p('a', 'b', 'c')))

    def test_rename_exdev(self):
        wfile(self.p('f'), b'f')
        other = '/dev/shm' if PLAIN else self.m.tmp
        if os.stat(other).st_dev == os.stat(self.d).st_dev:
            self.fail('no other filesystem to test EXDEV against (%s)' % other)
        self.assertErrno(errno.EXDEV, os.rename, self.p('f'), os.path.join(other, 'xdev-%d' %
                                                                             os.getpid()))

    # -- unlink / rmdir ----------------------------------------------------------------------

    def test_unlink_and_rmdir(self):
        wfile(self.p('f'), b'f')
        os.makedirs(self.p('d', 'sub'))
        os.unlink(self.p('f'))
        self.assertFalse(os.path.lexists(self.p('f')))
        self.assertErrno(errno.ENOENT, os.unlink, self.p('f'))
        self.assertErrno(errno.ENOTEMPTY, os.rmdir, self.p('d'))
        self.assertErrno(errno.EISDIR, os.unlink, self.p('d'))
        wfile(self.p('g'), b'g')
        self.assertErrno(errno.ENOTDIR, os.rmdir, self.p('g'))
        os.rmdir(self.p('d', 'sub'))
        os.rmdir(self.p('d'))
        self.assertEqual(os.listdir(self.d), ['g'])
        # a name freed by unlink can be created again as a new, empty file
        os.unlink(self.p('g'))
        wfile(self.p('g'), b'')
        self.assertEqual(rfile(self.p('g')), b'')
        # shutil.rmtree of a checkpoint-like tree
        t = self.p('global_step10')
        for i in range(4):
            os.makedirs(os.path.join(t, 'r%d' % i), exist_ok=True)
            wfile(os.path.join(t, 'r%d' % i, 'x.pt'), content('rt%d' % i, 100_000))
            os.symlink('x.pt', os.path.join(t, 'r%d' % i, 'l'))
        shutil.rmtree(t)
        self.assertFalse(os.path.lexists(t))

    def test_unlink_open_file(self):
        p = self.p('f')
        data = content('uo', 2 * MiB + 7)
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, data)
        rfd = os.open(p, os.O_RDONLY)
        os.unlink(p)
        self.assertFalse(os.path.lexists(p))
        self.assertNotIn('f', os.listdir(self.d))
        self.assertEqual(read_fd_all(rfd), data)
        os.pwrite(fd, b'tail', len(data))
        self.assertEqual(read_fd_all(fd), data + b'tail')
        self.assertEqual(os.fstat(fd).st_size, len(data) + 4)
        os.fsync(fd)
        os.close(fd)
        self.assertEqual(read_fd_all(rfd), data + b'tail')
        os.close(rfd)
        # a new file under the same name is a different, empty file
        wfile(p, b'new')
        self.assertEqual(rfile(p), b'new')

    def test_unlink_open_file_nlink_zero(self):
        p = self.p('f')
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        self.assertEqual(os.fstat(fd).st_nlink, 1)
        os.unlink(p)
        self.assertEqual(os.fstat(fd).st_nlink, 0)
        os.close(fd)

    def test_unlink_mmapped_file(self):
        p = self.p('f')
        data = content('um', 3 * MiB + 5)
        wfile(p, data)
        fd = os.open(p, os.O_RDONLY)
        ms = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
        mp = mmap.mmap(fd, 0, mmap.MAP_PRIVATE, mmap.PROT_READ)
        os.close(fd)
        os.unlink(p)
        self.assertFalse(os.path.lexists(p))
        self.assertEqual(ms[:], data)
        self.assertEqual(mp[:], data)
        ms.close()
        mp.close()

    # -- readdir / inodes --------------------------------------------------------------------

    def test_readdir_large_with_d_type(self):
        big = self.p('big')
        os.mkdir(big)
        kinds = {}
        for i in range(5000):
            name = 'entry-%05d' % i
            q = os.path.join(big, name)
            if i % 10 == 3:
                os.mkdir(q)
                kinds[name] = 'dir'
            elif i % 10 == 7:
                os.symlink('entry-%05d' % (i - 1), q)
                kinds[name] = 'lnk'
            else:
                os.close(os.open(q, os.O_CREAT | os.O_WRONLY, 0o644))
                kinds[name] = 'reg'
        raw = raw_readdir(big)
        names = [n for n, _, _ in raw if n not in ('.', '..')]
        self.assertEqual(len(names), len(set(names)), 'readdir returned duplicates')
        self.assertEqual(set(names), set(kinds))
        want = {'dir': DT_DIR, 'lnk': DT_LNK, 'reg': DT_REG}
        bad = [(n, t) for n, _, t in raw if n in kinds and t != want[kinds[n]]]
        self.assertEqual(bad[:5], [], '%d entries with a wrong d_type (%d = DT_UNKNOWN)' %
                         (len(bad), DT_UNKNOWN))
        for n, ino, _ in raw[:200]:
            if n in kinds:
                self.assertEqual(ino, os.lstat(os.path.join(big, n)).st_ino,
                                 'd_ino of %s differs from lstat st_ino' % n)
        for e in os.scandir(big):
            k = kinds[e.name]
            self.assertEqual(e.is_dir(follow_symlinks=False), k == 'dir', e.name)
            self.assertEqual(e.is_file(follow_symlinks=False), k == 'reg', e.name)
            self.assertEqual(e.is_symlink(), k == 'lnk', e.name)
        self.assertEqual(sorted(os.listdir(big)), sorted(kinds))
        # readdir while the directory changes under an open handle does not lose entries
        # that were neither added nor removed
        it = os.scandir(big)
        seen = []
        for i, e in enumerate(it):
            seen.append(e.name)
            if i == 100:
                os.unlink(os.path.join(big, 'entry-04999'))
        it.close()
        missing = set(kinds) - set(seen) - {'entry-04999'}
        self.assertEqual(sorted(missing)[:5], [], 'readdir lost entries during an unlink')
        self.assertEqual(len(seen), len(set(seen)), 'readdir returned duplicates')
        del kinds['entry-04999']
        # one handle: telldir/seekdir come back to the same entry across READDIR requests, and
        # rewinddir lists the directory as it is now (POSIX readdir, rewinddir)
        d = libc.opendir(os.fsencode(big))
        self.assertTrue(d)
        try:
            def next_name():
                ent = libc.readdir64(d)
                return os.fsdecode(ent.contents.d_name) if ent else None
            for _ in range(3000):
                next_name()
            pos = libc.telldir(d)
            after = [next_name() for _ in range(5)]
            for _ in range(1000):
                next_name()
            libc.seekdir(d, pos)
            self.assertEqual([next_name() for _ in range(5)], after)
            os.mkdir(os.path.join(big, 'added-after-opendir'))
            libc.rewinddir(d)
            names = []
            while True:
                n = next_name()
                if n is None:
                    break
                names.append(n)
            self.assertEqual(sorted(n for n in names if n not in ('.', '..')),
                             sorted(list(kinds) + ['added-after-opendir']))
        finally:
            libc.closedir(d)

    def test_directory_known_from_a_listing_outlives_rmdir_while_open(self):
        """The kernel learns a directory from a listing alone (READDIRPLUS, which ckptfs
        answers with the attributes of directories: an `ls -l` of the root sends no LOOKUP per
        step) and holds a reference to it, as after a LOOKUP (libfuse fuse_lowlevel.h,
        readdirplus). The daemon counts it: a directory opened through the listed name and
        then removed still answers fstat, with no link, like any directory removed while
        open. Uncounted, the rmdir deleted it from the index and the fstat failed ENOENT."""
        base = self.p('listed')
        os.mkdir(base)
        for i in range(50):
            os.mkdir(os.path.join(base, 'd%02d' % i))
        # the kernel forgets every dentry and inode: the listing is what tells it of d07
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('2')
        self.assertEqual(len(os.listdir(base)), 50)
        fd = os.open(os.path.join(base, 'd07'), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.rmdir(os.path.join(base, 'd07'))
            st = os.fstat(fd)
            self.assertTrue(stat.S_ISDIR(st.st_mode))
            self.assertEqual(st.st_nlink, 0)
        finally:
            os.close(fd)
        self.assertEqual(len(os.listdir(base)), 49)
        for e in os.scandir(base):  # what the listing gave is what a stat gives
            self.assertEqual(e.stat(follow_symlinks=False).st_ino, e.inode())
            self.assertEqual(e.stat(follow_symlinks=False), os.lstat(e.path), e.name)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
