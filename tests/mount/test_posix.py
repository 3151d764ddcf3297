#!/usr/bin/python3
"""POSIX surface of a real ckptfs mount, one test per operation of issue 2's list.

Every assertion states what a plain directory does (CKPTFS_POSIX_PLAIN=1 runs the same tests on a
plain temporary directory, to check the expectations themselves). A few checks are about ckptfs
only (st_blocks after dedup) and say so.

Run: /usr/bin/python3 tests/mount/test_posix.py [-v] [PosixTest.test_xxx]
"""

import sys

sys.dont_write_bytecode = True

import errno  # noqa: E402
import fcntl  # noqa: E402
import faulthandler  # noqa: E402
import hashlib  # noqa: E402
import mmap  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import content  # noqa: E402
from posixbase import (NOBODY, PLAIN, PosixCase, ename, read_fd_all, rfile,  # noqa: E402
                       wfile)

BIG_MB = int(os.environ.get('CKPTFS_BIG_MB', '300'))
MiB = 1 << 20


class PosixTest(PosixCase):

    # -- open flags --------------------------------------------------------------------------

    def test_create_and_o_trunc(self):
        p = self.p('f')
        fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o640)
        os.write(fd, b'hello world')
        os.close(fd)
        st = os.stat(p)
        self.assertTrue(stat.S_ISREG(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o640)
        self.assertEqual(st.st_size, 11)
        fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
        self.assertEqual(os.fstat(fd).st_size, 0, 'O_TRUNC must empty the file at open')
        os.write(fd, b'hi')
        os.close(fd)
        self.assertEqual(rfile(p), b'hi')
        # O_TRUNC on a big file, then a shorter rewrite: no stale tail
        wfile(p, content('big', 3 * MiB))
        wfile(p, b'short')
        self.assertEqual(rfile(p), b'short')
        self.assertEqual(os.stat(p).st_size, 5)
        # O_CREAT without O_TRUNC keeps the content
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o600))
        self.assertEqual(rfile(p), b'short')
        # ENOENT without O_CREAT, ENOENT for a missing parent
        self.assertErrno(errno.ENOENT, os.open, self.p('nope'), os.O_RDONLY)
        self.assertErrno(errno.ENOENT, os.open, self.p('nodir', 'f'), os.O_CREAT | os.O_WRONLY)
        # ENOTDIR: a file used as a directory
        self.assertErrno(errno.ENOTDIR, os.open, self.p('f', 'x'), os.O_CREAT | os.O_WRONLY)
        # EISDIR: a directory opened for writing
        self.assertErrno(errno.EISDIR, os.open, self.d, os.O_WRONLY)

    def test_o_excl(self):
        p = self.p('f')
        fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, b'one')
        os.close(fd)
        self.assertErrno(errno.EEXIST, os.open, p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.mkdir(self.p('dir'))
        self.assertErrno(errno.EEXIST, os.open, self.p('dir'), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        os.symlink('dangling-target', self.p('lnk'))
        self.assertErrno(errno.EEXIST, os.open, self.p('lnk'), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        self.assertEqual(rfile(p), b'one')
        self.assertFalse(os.path.lexists(self.p('dangling-target')))

    def test_o_append(self):
        p = self.p('f')
        wfile(p, b'abc')
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, b'def')
        self.assertEqual(os.lseek(fd, 0, os.SEEK_CUR), 6)
        fd2 = os.open(p, os.O_WRONLY | os.O_APPEND)
        for i in range(20):
            os.write(fd if i % 2 else fd2, b'%d' % (i % 10))
        os.close(fd)
        os.close(fd2)
        self.assertEqual(rfile(p), b'abcdef' + b''.join(b'%d' % (i % 10) for i in range(20)))
        # MindSpore writes its .tmp with O_CREAT|O_APPEND in pieces
        q = self.p('ms.ckpt.tmp')
        data = content('append', 5 * MiB + 123)
        fd = os.open(q, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
        off = 0
        while off < len(data):
            n = min(len(data) - off, 700_001)
            os.write(fd, data[off:off + n])
            off += n
        os.close(fd)
        self.assertEqual(rfile(q), data)

    def test_o_rdwr(self):
        p = self.p('f')
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, b'0123456789')
        os.lseek(fd, 0, os.SEEK_SET)
        self.assertEqual(os.read(fd, 4), b'0123')
        os.write(fd, b'XY')
        os.lseek(fd, 0, os.SEEK_SET)
        self.assertEqual(os.read(fd, 100), b'0123XY6789')
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, b'end')
        self.assertEqual(os.pread(fd, 100, 0), b'0123XY6789end')
        os.close(fd)
        self.assertEqual(rfile(p), b'0123XY6789end')

    def test_o_direct(self):
        p = self.p('direct')
        blk = MiB
        data = [content('od%d' % i, blk) for i in range(3)]
        buf = mmap.mmap(-1, blk)    # page-aligned buffer, as O_DIRECT wants
        fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_DIRECT, 0o644)
        try:
            # DeepSpeed FastFileWriter: aligned pwrites at offsets, out of order
            for i in (2, 0, 1):
                buf[:] = data[i]
                self.assertEqual(os.pwrite(fd, memoryview(buf), i * blk), blk)
        finally:
            os.close(fd)
        # then an unaligned tail with O_APPEND, and fsync
        tail = content('tail', 1000)
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        os.write(fd, tail)
        os.fsync(fd)
        os.close(fd)
        expect = b''.join(data) + tail
        self.assertEqual(os.stat(p).st_size, len(expect))
        self.assertEqual(rfile(p), expect)
        # aligned O_DIRECT reads
        fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
        try:
            got = []
            for i in range(3):
                self.assertEqual(os.preadv(fd, [buf], i * blk), blk)
                got.append(bytes(buf))
            self.assertEqual(got, data)
        finally:
            os.close(fd)
        # O_DIRECT|O_RDWR|O_CREAT on a new file must open too
        fd = os.open(self.p('direct2'), os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o644)
        os.close(fd)
        buf.close()

    # -- writes ------------------------------------------------------------------------------

    def test_large_sequential_write(self):
        """BIG_MB of data of unknown final size, written sequentially in irregular pieces."""
        n = BIG_MB * MiB
        zeros = 16 * MiB
        rnd = content('bigseq', n - zeros - 8 * MiB)
        data = rnd[:n // 3] + bytes(zeros) + rnd[:8 * MiB] + rnd[n // 3:]
        self.assertEqual(len(data), n)
        sizes = [MiB, 3 * 4096 + 17, 8 * MiB, 65536, 777_777, 1, 4 * MiB + 5]
        p = self.p('big.pt')
        t0 = time.monotonic()
        fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        mv = memoryview(data)
        off, i = 0, 0
        while off < n:
            k = min(sizes[i % len(sizes)], n - off)
            w = os.write(fd, mv[off:off + k])
            off += w
            i += 1
        os.close(fd)
        t1 = time.monotonic()
        self.assertEqual(os.stat(p).st_size, n)
        h = hashlib.sha1()
        fd = os.open(p, os.O_RDONLY)
        total = 0
        while True:
            b = os.read(fd, 4 * MiB)
            if not b:
                break
            h.update(b)
            total += len(b)
        t2 = time.monotonic()
        self.assertEqual(total, n)
        self.assertEqual(h.hexdigest(), hashlib.sha1(data).hexdigest(),
                         'read back differs from what was written')
        # random reads, like torch.load: the tail first, then anywhere
        r = random.Random(7)
        self.assertEqual(os.pread(fd, 65536, n - 65536), data[n - 65536:])
        for _ in range(64):
            o = r.randrange(0, n)
            k = r.randrange(1, 3 * MiB)
            self.assertEqual(os.pread(fd, k, o), data[o:o + k], 'pread(%d, %d)' % (k, o))
        os.close(fd)
        sys.stderr.write('\n  [%d MB: write %.0f MB/s, read %.0f MB/s] ' %
                         (BIG_MB, BIG_MB / (t1 - t0), BIG_MB / (t2 - t1)))

    def test_pwrite_offsets_and_overwrite(self):
        p = self.p('f')
        model = bytearray()

        def pw(fd, data, off):
            self.assertEqual(os.pwrite(fd, data, off), len(data))
            if off > len(model):
                model.extend(bytes(off - len(model)))
            model[off:off + len(data)] = data

        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        pw(fd, b'A' * 100, 0)
        pw(fd, content('x1', 50_000), MiB + 3)          # leaves a hole
        pw(fd, b'B' * 10, 50)                           # overwrite inside
        pw(fd, content('x2', 2 * MiB), 500_000)         # spans the hole and the data
        pw(fd, b'C', 0)
        pw(fd, content('x3', 4096), 10 * MiB)           # far beyond EOF
        self.assertEqual(os.fstat(fd).st_size, len(model))
        self.assertEqual(read_fd_all(fd), bytes(model))
        self.assertEqual(os.pread(fd, 10, len(model) + 5), b'')
        self.assertEqual(os.pread(fd, 10, len(model) - 3), bytes(model[-3:]))
        os.close(fd)
        self.assertEqual(rfile(p), bytes(model))
        # overwrite a few bytes in the middle of a sequentially written, closed file
        q = self.p('g')
        seq = bytearray(content('seq', 6 * MiB))
        wfile(q, seq)
        fd = os.open(q, os.O_WRONLY)
        for off in (0, 3 * MiB + 1, 6 * MiB - 4):
            os.pwrite(fd, b'ZZZZ', off)
            seq[off:off + 4] = b'ZZZZ'
        os.close(fd)
        self.assertEqual(rfile(q), bytes(seq))
        self.assertEqual(os.stat(q).st_size, 6 * MiB)

    def test_ftruncate_grow_and_shrink(self):
        p = self.p('f')
        data = content('tr', 3 * MiB)
        wfile(p, data)
        fd = os.open(p, os.O_RDWR)
        os.ftruncate(fd, 5 * MiB)                       # grow: zeros
        self.assertEqual(os.fstat(fd).st_size, 5 * MiB)
        self.assertEqual(read_fd_all(fd), data + bytes(2 * MiB))
        os.ftruncate(fd, 1000)                          # shrink
        self.assertEqual(os.fstat(fd).st_size, 1000)
        self.assertEqual(read_fd_all(fd), data[:1000])
        os.ftruncate(fd, 3000)                          # grow again: old bytes must not return
        self.assertEqual(read_fd_all(fd), data[:1000] + bytes(2000))
        os.ftruncate(fd, 0)
        self.assertEqual(read_fd_all(fd), b'')
        os.pwrite(fd, b'xy', 10)
        self.assertEqual(read_fd_all(fd), bytes(10) + b'xy')
        os.close(fd)
        self.assertEqual(rfile(p), bytes(10) + b'xy')
        # truncate by path; safetensors HEAD: ftruncate to the final size, then pwrite into it
        os.truncate(p, 4)
        self.assertEqual(rfile(p), bytes(4))
        q = self.p('st')
        body = content('st', 2 * MiB)
        fd = os.open(q, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
        os.ftruncate(fd, len(body))
        os.pwrite(fd, body[MiB:], MiB)
        os.pwrite(fd, body[:MiB], 0)
        os.close(fd)
        self.assertEqual(rfile(q), body)

    def test_fsync_fdatasync(self):
        p = self.p('f')
        fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, content('fs', MiB))
        self.assertIsNone(os.fsync(fd))
        os.write(fd, b'more')
        self.assertIsNone(os.fdatasync(fd))
        os.close(fd)
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)                                    # fsync on a read-only fd works too
        os.close(fd)
        dfd = os.open(self.d, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(dfd)                                   # directory fsync (DCP, careful writers)
        os.close(dfd)
        self.assertEqual(rfile(p), content('fs', MiB) + b'more')

    # -- rename ------------------------------------------------------------------------------

    def test_stable_st_ino(self):
        wfile(self.p('f'), b'f')
        os.mkdir(self.p('d'))
        os.symlink('f', self.p('l'))
        inos = {n: os.lstat(self.p(n)).st_ino for n in ('f', 'd', 'l')}
        self.assertEqual(len(set(inos.values())), 3)
        for _ in range(3):
            for n in inos:
                self.assertEqual(os.lstat(self.p(n)).st_ino, inos[n])
        try:  # make the kernel forget dentries and inodes, so lookups go to the daemon again
            with open('/proc/sys/vm/drop_caches', 'w') as f:
                f.write('2')
        except OSError:
            pass
        for n in inos:
            self.assertEqual(os.lstat(self.p(n)).st_ino, inos[n], n)
        os.rename(self.p('f'), self.p('d', 'f2'))
        self.assertEqual(os.lstat(self.p('d', 'f2')).st_ino, inos['f'], 'rename changed st_ino')
        fd = os.open(self.p('d', 'f2'), os.O_RDONLY)
        self.assertEqual(os.fstat(fd).st_ino, inos['f'])
        os.close(fd)
        # a new file never reuses the number of a file that is still there
        wfile(self.p('n'), b'')
        self.assertNotIn(os.lstat(self.p('n')).st_ino, inos.values())

    def test_lstat_symlink_readlink(self):
        wfile(self.p('target'), b'data')
        os.symlink('target', self.p('rel'))
        os.symlink('/nonexistent/abs/path', self.p('abs'))
        os.symlink('x' * 1000, self.p('long'))
        st = os.lstat(self.p('rel'))
        self.assertTrue(stat.S_ISLNK(st.st_mode))
        self.assertEqual(st.st_size, len('target'))
        self.assertEqual(os.readlink(self.p('rel')), 'target')
        self.assertEqual(os.readlink(self.p('abs')), '/nonexistent/abs/path')
        self.assertEqual(os.readlink(self.p('long')), 'x' * 1000)
        self.assertEqual(rfile(self.p('rel')), b'data')
        self.assertTrue(stat.S_ISREG(os.stat(self.p('rel')).st_mode))
        self.assertErrno(errno.ENOENT, os.stat, self.p('abs'))
        self.assertErrno(errno.EEXIST, os.symlink, 'other', self.p('rel'))
        self.assertErrno(errno.EINVAL, os.readlink, self.p('target'))
        # writing through a symlink writes the target
        with open(self.p('rel'), 'ab') as f:
            f.write(b'+')
        self.assertEqual(rfile(self.p('target')), b'data+')
        # a directory symlink is followed in paths
        os.mkdir(self.p('realdir'))
        os.symlink('realdir', self.p('dirlink'))
        wfile(self.p('dirlink', 'inside'), b'i')
        self.assertEqual(rfile(self.p('realdir', 'inside')), b'i')
        os.unlink(self.p('rel'))
        self.assertEqual(rfile(self.p('target')), b'data+')

    # -- permissions and owners --------------------------------------------------------------

    def test_chmod_enforced_for_other_uid(self):
        p = self.p('model.safetensors')
        wfile(p, b'weights')
        os.chmod(p, 0o400)
        self.assertEqual(stat.S_IMODE(os.stat(p).st_mode), 0o400)
        # root bypasses permission bits, as on any filesystem
        os.close(os.open(p, os.O_WRONLY))

        def try_open(path, flags):
            fd = os.open(path, flags)
            try:
                return os.read(fd, 100).decode() if flags == os.O_RDONLY else 'opened'
            finally:
                os.close(fd)

        self.assertChildErrno(ckfs.run_as(NOBODY, NOBODY, try_open, p, os.O_RDONLY), errno.EACCES,
                              'open(O_RDONLY) of a 0400 root file')
        os.chmod(p, 0o404)
        self.assertEqual(self.assertChildOk(ckfs.run_as(NOBODY, NOBODY, try_open, p, os.O_RDONLY),
                                            'open(O_RDONLY) of a 0404 file'), 'weights')
        self.assertChildErrno(ckfs.run_as(NOBODY, NOBODY, try_open, p, os.O_WRONLY), errno.EACCES,
                              'open(O_WRONLY) of a 0404 file')
        self.assertChildErrno(ckfs.run_as(NOBODY, NOBODY, try_open, p, os.O_RDWR), errno.EACCES,
                              'open(O_RDWR) of a 0404 file')
        self.assertChildErrno(ckfs.run_as(NOBODY, NOBODY, os.truncate, p, 0), errno.EACCES,
                              'truncate of a 0404 file')
        self.assertChildErrno(ckfs.run_as(NOBODY, NOBODY, os.chmod, p, 0o666), errno.EPERM,
                              'chmod of a file owned by root')
        os.chmod(p, 0o606)
        self.assertChildOk(ckfs.run_as(NOBODY, NOBODY, try_open, p, os.O_WRONLY),
                           'open(O_WRONLY) of a 0606 file')
        # directory write permission governs create and unlink
        self.assertChildErrno(ckfs.run_as(NOBODY, NOBODY, wfile, self.p('new'), b'x'),
                              errno.EACCES, 'create in a 0755 root directory')
        self.assertChildErrno(ckfs.run_as(NOBODY, NOBODY, os.unlink, p), errno.EACCES,
                              'unlink in a 0755 root directory')
        os.chmod(self.d, 0o777)
        self.assertChildOk(ckfs.run_as(NOBODY, NOBODY, wfile, self.p('new'), b'x'),
                           'create in a 0777 directory')
        # search permission on directories
        os.mkdir(self.p('private'), 0o700)
        wfile(self.p('private', 'f'), b'f')
        os.chmod(self.p('private', 'f'), 0o644)
        self.assertChildErrno(ckfs.run_as(NOBODY, NOBODY, try_open, self.p('private', 'f'),
                                          os.O_RDONLY), errno.EACCES,
                              'open below a 0700 root directory')
        # execute bit
        os.chmod(self.p('private'), 0o755)
        script = self.p('private', 'run.sh')
        wfile(script, b'#!/bin/sh\necho ran\n')
        os.chmod(script, 0o644)
        self.assertErrno(errno.EACCES, subprocess.run, [script])   # even root needs an x bit
        os.chmod(script, 0o755)
        r = subprocess.run([script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(r.stdout, b'ran\n', r.stderr)

    def test_owner_of_created_files(self):
        os.chmod(self.d, 0o777)

        def create_all(d):
            os.umask(0o027)
            wfile(os.path.join(d, 'by_nobody'), b'n', 0o666)
            os.mkdir(os.path.join(d, 'dir_by_nobody'), 0o777)
            os.symlink('by_nobody', os.path.join(d, 'lnk_by_nobody'))
            return 'done'

        self.assertChildOk(ckfs.run_as(NOBODY, NOBODY, create_all, self.d), 'create')
        for n, mode in (('by_nobody', 0o640), ('dir_by_nobody', 0o750), ('lnk_by_nobody', None)):
            st = os.lstat(self.p(n))
            self.assertEqual((st.st_uid, st.st_gid), (NOBODY, NOBODY), n)
            if mode is not None:
                self.assertEqual(stat.S_IMODE(st.st_mode), mode, '%s: umask not applied' % n)
        wfile(self.p('by_root'), b'r')
        st = os.stat(self.p('by_root'))
        self.assertEqual((st.st_uid, st.st_gid), (os.getuid(), os.getgid()))
        # chown by root
        os.chown(self.p('by_root'), 1234, 5678)
        st = os.stat(self.p('by_root'))
        self.assertEqual((st.st_uid, st.st_gid), (1234, 5678))
        # the owner (not root) can chmod its own file and the new mode is enforced
        self.assertChildOk(ckfs.run_as(NOBODY, NOBODY, os.chmod, self.p('by_nobody'), 0o400),
                           'chmod of own file')
        self.assertEqual(stat.S_IMODE(os.stat(self.p('by_nobody')).st_mode), 0o400)
        self.assertChildErrno(ckfs.run_as(NOBODY, NOBODY, wfile, self.p('by_nobody'), b'x'),
                              errno.EACCES, 'write to own 0400 file')

    # -- times -------------------------------------------------------------------------------

    def test_mtime_ctime_real_and_monotonic(self):
        tick = 0.03
        t0 = time.time_ns()
        p = self.p('f')
        wfile(p, b'1')
        st = os.stat(p)
        t1 = time.time_ns()
        slack = 2 * 10**9
        self.assertTrue(t0 - slack <= st.st_mtime_ns <= t1 + slack,
                        'mtime %d is not the real time (%d..%d)' % (st.st_mtime_ns, t0, t1))
        self.assertTrue(t0 - slack <= st.st_ctime_ns <= t1 + slack, 'ctime is not real')
        prev = st
        for i in range(5):
            time.sleep(tick)
            with open(p, 'ab') as f:
                f.write(b'x')
            st = os.stat(p)
            self.assertGreater(st.st_mtime_ns, prev.st_mtime_ns, 'write %d: mtime' % i)
            self.assertGreaterEqual(st.st_ctime_ns, prev.st_ctime_ns)
            prev = st
        time.sleep(tick)
        os.truncate(p, 1)
        st = os.stat(p)
        self.assertGreater(st.st_mtime_ns, prev.st_mtime_ns, 'truncate: mtime')
        prev = st
        time.sleep(tick)
        os.chmod(p, 0o600)
        st = os.stat(p)
        self.assertGreater(st.st_ctime_ns, prev.st_ctime_ns, 'chmod: ctime')
        self.assertEqual(st.st_mtime_ns, prev.st_mtime_ns, 'chmod must not change mtime')
        # explicit times (cp -p, rsync -t, touch -d) are kept to the nanosecond
        os.utime(p, ns=(1_600_000_000_123_456_789, 1_700_000_000_987_654_321))
        st = os.stat(p)
        self.assertEqual(st.st_mtime_ns, 1_700_000_000_987_654_321)
        self.assertEqual(st.st_atime_ns, 1_600_000_000_123_456_789)
        # directories: every change of the entries moves mtime and ctime forward
        d = self.p('checkpoint-100')
        os.mkdir(d)
        prev = os.stat(d)
        steps = [('create', lambda: wfile(os.path.join(d, 'a'), b'a')),
                 ('mkdir', lambda: os.mkdir(os.path.join(d, 'sub'))),
                 ('rename within', lambda: os.rename(os.path.join(d, 'a'), os.path.join(d, 'b'))),
                 ('rename out', lambda: os.rename(os.path.join(d, 'b'), self.p('b'))),
                 ('rename in', lambda: os.rename(self.p('b'), os.path.join(d, 'c'))),
                 ('symlink', lambda: os.symlink('c', os.path.join(d, 'l'))),
                 ('unlink', lambda: os.unlink(os.path.join(d, 'c'))),
                 ('rmdir', lambda: os.rmdir(os.path.join(d, 'sub')))]
        for what, fn in steps:
            time.sleep(tick)
            fn()
            st = os.stat(d)
            self.assertGreater(st.st_mtime_ns, prev.st_mtime_ns, 'dir mtime after %s' % what)
            self.assertGreater(st.st_ctime_ns, prev.st_ctime_ns, 'dir ctime after %s' % what)
            prev = st
        # Hugging Face rotates by directory mtime: newer checkpoint dirs sort later
        time.sleep(tick)
        os.mkdir(self.p('checkpoint-200'))
        self.assertGreater(os.stat(self.p('checkpoint-200')).st_mtime_ns,
                           os.stat(d).st_mtime_ns)

    # -- locks -------------------------------------------------------------------------------

    def _child_lock(self, path, kind):
        def fn():
            fd = os.open(path, os.O_RDWR)
            try:
                if kind == 'lockf':
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                else:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return 'locked'
            finally:
                os.close(fd)
        return ckfs.in_child(fn)

    def test_fcntl_lockf(self):
        p = self.p('lock')
        wfile(p, b'')
        fd = os.open(p, os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        res = self._child_lock(p, 'lockf')
        self.assertEqual(res[0], 'err', 'second process got a conflicting fcntl lock')
        self.assertIn(res[1], (errno.EAGAIN, errno.EACCES), ename(res[1]))
        fcntl.lockf(fd, fcntl.LOCK_UN)
        self.assertEqual(self._child_lock(p, 'lockf'), ('ok', 'locked'))
        os.close(fd)

    def test_flock(self):
        p = self.p('lock')
        wfile(p, b'')
        fd = os.open(p, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        res = self._child_lock(p, 'flock')
        self.assertEqual(res[0], 'err', 'second process got a conflicting flock')
        self.assertEqual(res[1], errno.EWOULDBLOCK, ename(res[1]))
        fcntl.flock(fd, fcntl.LOCK_UN)
        self.assertEqual(self._child_lock(p, 'flock'), ('ok', 'locked'))
        os.close(fd)

    # -- mmap --------------------------------------------------------------------------------

    def test_mmap_private_and_shared_read(self):
        p = self.p('model.safetensors')
        data = content('mm', 5 * MiB + 333)
        wfile(p, data)
        fd = os.open(p, os.O_RDONLY)
        ms = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
        mp = mmap.mmap(fd, 0, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(fd)
        self.assertEqual(len(ms), len(data))
        self.assertEqual(ms[:], data)
        self.assertEqual(mp[:], data)
        r = random.Random(3)
        for _ in range(100):
            o = r.randrange(len(data))
            self.assertEqual(ms[o:o + 4096], data[o:o + 4096])
        # a private copy-on-write change never reaches the file
        mp[0:4] = b'JUNK'
        mp.close()
        ms.close()
        self.assertEqual(rfile(p), data)

    def test_mmap_shared_write(self):
        p = self.p('f')
        data = bytearray(content('mw', 2 * MiB))
        wfile(p, data)
        fd = os.open(p, os.O_RDWR)
        m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        m[100:110] = b'0123456789'
        data[100:110] = b'0123456789'
        m.flush()
        m.close()
        os.close(fd)
        self.assertEqual(rfile(p), bytes(data))

    def test_mmap_sees_later_writes(self):
        p = self.p('f')
        wfile(p, bytes(64 * 1024))
        fd = os.open(p, os.O_RDONLY)
        m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
        self.assertEqual(m[:8], bytes(8))
        wfd = os.open(p, os.O_WRONLY)
        os.pwrite(wfd, b'CHANGED!', 0)
        os.close(wfd)
        self.assertEqual(m[:8], b'CHANGED!', 'a MAP_SHARED mapping must see a later write()')
        m.close()
        os.close(fd)

    # -- processes ---------------------------------------------------------------------------

    def test_close_to_open_consistency(self):
        p = self.p('latest')
        wfile(p, b'global_step1')
        self.assertEqual(rfile(p), b'global_step1')   # our page cache now holds it

        def writer(path, data):
            wfile(path, data.encode())
            return 'ok'

        for i in range(2, 12):
            data = 'global_step%d' % i
            self.assertEqual(ckfs.in_child(writer, p, data), ('ok', 'ok'))
            self.assertEqual(rfile(p), data.encode(), 'stale content after the writer closed')
        big = content('c2o', 3 * MiB)
        wfile(p, big)

        def reader(path):
            return hashlib.sha1(rfile(path)).hexdigest()

        self.assertEqual(ckfs.in_child(reader, p), ('ok', hashlib.sha1(big).hexdigest()))

        def size(path):
            return os.stat(path).st_size

        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b'12345')
        os.close(fd)
        self.assertEqual(ckfs.in_child(size, p), ('ok', len(big) + 5))

    # -- statfs / du -------------------------------------------------------------------------

    def test_statfs(self):
        sv = os.statvfs(self.m.mnt)
        self.assertGreater(sv.f_bsize, 0)
        self.assertGreater(sv.f_frsize, 0)
        self.assertGreater(sv.f_blocks, 0)
        self.assertGreater(sv.f_bfree, 0)
        self.assertLessEqual(sv.f_bfree, sv.f_blocks)
        self.assertLessEqual(sv.f_bavail, sv.f_bfree)
        self.assertGreaterEqual(sv.f_namemax, 255)
        du = shutil.disk_usage(self.m.mnt)
        self.assertGreater(du.total, 0)
        self.assertGreater(du.free, 0)
        self.assertLessEqual(du.used, du.total)
        # the space is the backing filesystem's: within a factor of it
        back = shutil.disk_usage(self.m.tmp)
        self.assertLessEqual(du.free, back.total * 2)
        self.assertGreaterEqual(du.total, back.free // 2,
                                'statfs total %d is far below the backing free space %d' %
                                (du.total, back.free))
        r = subprocess.run(['df', '-P', self.m.mnt], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)

    def _du(self, path, *args):
        r = subprocess.run(['du', '-s', '-B1'] + list(args) + [path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.split()[0])

    def test_du_reports_stored_bytes(self):
        """du --apparent-size is the logical size; st_blocks (plain du) is what the store
        actually holds for the file: little for zeros and repeated data, all of random data."""
        cases = [('zeros', bytes(64 * MiB)),
                 ('repeated', content('rep', MiB) * 32),
                 ('random', content('du-random', 8 * MiB))]
        for name, data in cases:
            q = self.p(name)
            before = None if PLAIN else ckfs.chunk_bytes(self.m.store)
            fd = os.open(q, os.O_CREAT | os.O_WRONLY, 0o644)
            mv = memoryview(data)
            while mv:
                mv = mv[os.write(fd, mv[:4 * MiB]):]
            os.fsync(fd)
            os.close(fd)
            st = os.stat(q)
            self.assertEqual(st.st_size, len(data))
            self.assertEqual(self._du(q, '--apparent-size'), len(data))
            if PLAIN:
                continue    # a plain directory stores written zeros; the rest is ckptfs's
            grown = ckfs.chunk_bytes(self.m.store) - before
            used = st.st_blocks * 512
            self.assertEqual(self._du(q), used)
            if name == 'random':
                self.assertGreater(used, len(data) // 2,
                                   'random data cannot be stored in %d bytes' % used)
            else:
                self.assertLess(used, len(data) // 3,
                                '%s: st_blocks*512 = %d for %d logical bytes of dedup-able data'
                                % (name, used, len(data)))
            # the truth: about what the store grew by for this (new, unshared) content
            self.assertLessEqual(abs(used - grown), max(grown // 4, 256 * 1024),
                                 '%s: st_blocks*512 = %d but the store grew by %d bytes' %
                                 (name, used, grown))

    # -- links -------------------------------------------------------------------------------

    def test_hard_link_works_or_eperm(self):
        a, b = self.p('a'), self.p('b')
        wfile(a, b'shared')
        try:
            os.link(a, b)
        except OSError as e:
            self.assertIn(e.errno, (errno.EPERM, errno.EOPNOTSUPP),
                          'link failed with an unclear errno %s' % ename(e.errno))
            self.assertFalse(os.path.lexists(b), 'failed link left a name behind')
            self.assertEqual(os.stat(a).st_nlink, 1)
            self.assertErrno(e.errno, os.link, a, self.p('c'))
            self.assertEqual(rfile(a), b'shared')
            return
        sa, sb = os.stat(a), os.stat(b)
        self.assertEqual(sa.st_ino, sb.st_ino)
        self.assertEqual((sa.st_nlink, sb.st_nlink), (2, 2))
        with open(a, 'ab') as f:
            f.write(b'+')
        self.assertEqual(rfile(b), b'shared+')
        os.unlink(a)
        self.assertEqual(os.stat(b).st_nlink, 1)
        self.assertEqual(rfile(b), b'shared+')
        self.assertErrno(errno.EEXIST, os.link, b, b)

    def test_sendfile_and_copy_file_range(self):
        src = self.p('src')
        data = content('cp', 7 * MiB + 11)
        wfile(src, data)
        shutil.copyfile(src, self.p('copy1'))           # sendfile on Linux
        self.assertEqual(rfile(self.p('copy1')), data)
        with open(src, 'rb') as fi, open(self.p('copy2'), 'wb') as fo:
            off = 0
            while off < len(data):
                n = os.copy_file_range(fi.fileno(), fo.fileno(), len(data) - off)
                self.assertGreater(n, 0)
                off += n
        self.assertEqual(rfile(self.p('copy2')), data)
        r = subprocess.run(['cp', '--reflink=auto', src, self.p('copy3')],
                           stderr=subprocess.PIPE, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(rfile(self.p('copy3')), data)


class RemountTest(PosixCase):
    mount_opts = ()

    def test_persistence_across_remount(self):
        """A tree of every kind of entry comes back identical after unmount and mount."""
        t = self.p('tree')
        os.makedirs(os.path.join(t, 'iter_0000010', 'mp_rank_00'))
        os.makedirs(os.path.join(t, 'empty_dir'))
        files = {
            'iter_0000010/mp_rank_00/model_optim_rng.pt': content('p1', 9 * MiB + 17),
            'iter_0000010/zeros': bytes(3 * MiB),
            'latest_checkpointed_iteration.txt': b'10',
            'empty': b'',
            'small': b'x' * 4095,
            'dup1': content('dup', 2 * MiB),
            'dup2': content('dup', 2 * MiB),
        }
        for k, v in files.items():
            wfile(os.path.join(t, k), v)
        # a file changed after its first close: pwrite + truncate
        fd = os.open(os.path.join(t, 'small'), os.O_RDWR)
        os.pwrite(fd, b'PATCH', 1000)
        os.ftruncate(fd, 3000)
        os.close(fd)
        files['small'] = (b'x' * 1000 + b'PATCH' + b'x' * 4095)[:3000]
        os.symlink('iter_0000010', os.path.join(t, 'latest'))
        os.symlink('/abs/dangling', os.path.join(t, 'dangling'))
        os.chmod(os.path.join(t, 'iter_0000010', 'zeros'), 0o400)
        os.chmod(os.path.join(t, 'empty_dir'), 0o750)
        os.utime(os.path.join(t, 'small'), ns=(1_600_000_000_000_000_001, 1_650_000_000_000_000_002))
        os.chown(os.path.join(t, 'empty'), 1000, 1001)
        before = snapshot(t)
        for k, v in files.items():
            self.assertEqual(rfile(os.path.join(t, k)), v, k)
        self.m.remount()
        after = snapshot(t)
        self.assertEqual(diff_snapshots(before, after), [])
        for k, v in files.items():
            self.assertEqual(rfile(os.path.join(t, k)), v, k)
        # and once more, after a change made on the second mount
        wfile(os.path.join(t, 'second'), b'2')
        before = snapshot(t)
        self.m.remount()
        self.assertEqual(diff_snapshots(before, snapshot(t)), [])


def snapshot(root):
    """{relpath: (type, mode, uid, gid, size, mtime_ns, ino, symlink target or sha1)}"""
    res = {}
    for dp, dn, fn in os.walk(root):
        for n in sorted(dn + fn):
            q = os.path.join(dp, n)
            st = os.lstat(q)
            if stat.S_ISLNK(st.st_mode):
                extra = os.readlink(q)
            elif stat.S_ISREG(st.st_mode):
                extra = hashlib.sha1(rfile(q)).hexdigest()
            else:
                extra = None
            mtime = st.st_mtime_ns if not stat.S_ISDIR(st.st_mode) else None
            res[os.path.relpath(q, root)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode),
                                             st.st_uid, st.st_gid, st.st_size
                                             if not stat.S_ISDIR(st.st_mode) else None,
                                             mtime, st.st_ino, extra)
    return res


FIELDS = ('type', 'mode', 'uid', 'gid', 'size', 'mtime_ns', 'ino', 'content/target')


def diff_snapshots(a, b):
    out = []
    for k in sorted(set(a) | set(b)):
        if k not in a or k not in b:
            out.append('%s: %s' % (k, 'appeared' if k not in a else 'vanished'))
            continue
        for f, x, y in zip(FIELDS, a[k], b[k]):
            if x != y:
                out.append('%s: %s %r -> %r' % (k, f, x, y))
    return out


class CliTest(unittest.TestCase):
    """The daemon's command line: clear one-line failures, no stray mounts."""

    def test_help_version_and_failures(self):
        if PLAIN:
            return
        ckfs.check_fuse_usable()
        b = ckfs.ckptfs_bin()
        for arg in ('--help', '--version'):
            r = ckfs.run([b, arg], timeout=30)
            self.assertEqual(r.returncode, 0, '%s %s: %s' % (b, arg, r.stderr))
            self.assertTrue((r.stdout + r.stderr).strip(), '%s prints nothing' % arg)
        with ckfs.Mount() as m:
            # a second daemon on the same STORE must refuse, with one clear line
            m2 = ckfs.Mount(store=m.store)
            try:
                with self.assertRaises(ckfs.MountError) as cm:
                    m2.start()
                msg = str(cm.exception)
                self.assertFalse(ckfs.is_fuse_mounted(m2.mnt))
            finally:
                m2.close()
            self.assertIn('exited', msg)
            tail = msg.split(': ', 1)[1]
            self.assertEqual(len(tail.strip().splitlines()), 1,
                             'want one clear line, got: %r' % tail)
            # the first mount is untouched
            wfile(m.path('still'), b'works')
            self.assertEqual(rfile(m.path('still')), b'works')
            # a missing mountpoint
            r = ckfs.run([b, os.path.join(m.tmp, 'store2'), os.path.join(m.tmp, 'nonexistent')],
                         timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertFalse(ckfs.is_fuse_mounted(os.path.join(m.tmp, 'nonexistent')))
            self.assertEqual(len((r.stderr + r.stdout).strip().splitlines()), 1,
                             'want one clear line, got: %r' % (r.stderr + r.stdout))
            # a STORE that is a regular file
            bad = os.path.join(m.tmp, 'notadir')
            wfile(bad, b'')
            mp = os.path.join(m.tmp, 'mp4')
            os.mkdir(mp)
            r = ckfs.run([b, bad, mp], timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertFalse(ckfs.is_fuse_mounted(mp))
            self.assertEqual(len((r.stderr + r.stdout).strip().splitlines()), 1,
                             'want one clear line, got: %r' % (r.stderr + r.stdout))


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
