#!/usr/bin/python3
"""Writes inside a large file's stored data on a real mount (issue 42 item 7): each costs what it
writes, not the file's size.

xfstests generic/247 overwrites a 500 MiB file with O_DIRECT from the start while 500
`xfs_io mmap -w; mwrite` processes each write 1 MiB of it from the end, each opening and closing
the file. Every close commits the file; the test below is that pattern on a smaller file, with
a bound on the mmap writers' time that a cost proportional to the file's size per close exceeds,
and the content checked byte for byte before and after a remount.

Run: /usr/bin/python3 tests/mount/test_overwrite.py [-v]
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import hashlib  # noqa: E402
import mmap  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from posixbase import FreshMountTestCase  # noqa: E402

MiB = 1 << 20
SIZE = 192 * MiB        # the file: large enough that copying or re-chunking it per close shows
DIRECT = 64 * MiB       # the O_DIRECT writer's range, from offset 0
WRITERS = 24            # mmap writers, 1 MiB each, from the end backwards
BOUND = 6.0             # seconds the WRITERS open-mmap-write-close cycles may take in all


def repeated(key, n):
    """n bytes of one pseudo-random MiB repeated: the chunks repeat too, so the file's distinct
    chunks fit in the daemon's chunk cache, as generic/247's zeros do."""
    return ckfs.content(key, MiB) * (n // MiB)


def mmap_write(path, off, data):
    """What `xfs_io -c 'mmap -w OFF LEN' -c 'mwrite OFF LEN'` does: open O_RDWR, write data
    through a shared mapping of [off, off + len(data)), unmap, close (the kernel writes the dirty
    pages back at the close's flush)."""
    fd = os.open(path, os.O_RDWR)
    try:
        mm = mmap.mmap(fd, len(data), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                       offset=off)
        try:
            mm[:] = data
        finally:
            mm.close()
    finally:
        os.close(fd)


def direct_write(path, data, errors):
    """Overwrite [0, len(data)) of path in 1 MiB O_DIRECT writes (dd oflag=direct conv=notrunc);
    an OSError goes to errors."""
    buf = mmap.mmap(-1, MiB)   # page-aligned, as O_DIRECT wants
    try:
        fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
        try:
            for off in range(0, len(data), MiB):
                buf[:] = data[off:off + MiB]
                if os.pwrite(fd, buf, off) != MiB:
                    raise OSError('short O_DIRECT write at %d' % off)
        finally:
            os.close(fd)
    except OSError as e:
        errors.append(e)
    finally:
        buf.close()


class OverwriteTest(FreshMountTestCase):
    maxDiff = None

    def test_mmap_writes_racing_direct_writes(self):
        path = self.p('f')
        want = bytearray(repeated('base', SIZE))
        with open(path, 'wb') as f:
            f.write(want)
        direct = repeated('direct', DIRECT)
        want[:DIRECT] = direct
        errors = []
        dio = threading.Thread(target=direct_write, args=(path, direct, errors))
        dio.start()
        took = []
        try:
            for i in range(WRITERS):
                off = SIZE - (i + 1) * MiB
                data = ckfs.content('mmap%d' % i, MiB)
                want[off:off + MiB] = data
                t = time.monotonic()
                mmap_write(path, off, data)
                took.append(time.monotonic() - t)
        finally:
            dio.join()
        self.assertEqual(errors, [])
        self.assertLess(sum(took), BOUND,
                        '%d mmap writes of 1 MiB into a %d MiB file took %.1f s (each: %s)' %
                        (WRITERS, SIZE // MiB, sum(took),
                         ' '.join('%.2f' % t for t in took)))
        digest = hashlib.sha1(want).hexdigest()
        self.assertEqual(ckfs.file_hash(path), digest, 'content differs')
        self.m.remount()
        self.assertEqual(os.stat(path).st_size, SIZE)
        self.assertEqual(ckfs.file_hash(path), digest, 'content differs after a remount')
        r = self.m.ckptctl('verify')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_overwrites_keep_holes_and_neighbours(self):
        """Overwrites in a hole, across chunk boundaries, at the very start and end of the
        data, and a byte at a time, each between closes: the content is exact."""
        path = self.p('g')
        size = 24 * MiB
        want = bytearray(ckfs.content('g', size))
        with open(path, 'wb') as f:
            f.write(want)
        os.truncate(path, size + 8 * MiB)       # a hole after the data, then data again
        with open(path, 'r+b') as f:
            f.seek(size + 6 * MiB)
            f.write(b'tail' * 1024)
        want += bytes(6 * MiB) + b'tail' * 1024 + bytes(2 * MiB - 4096)
        edits = [(0, 1), (0, 4096), (MiB - 7, 3 * MiB), (5 * MiB, 1), (size - 1, 1),
                 (size - 3000, 6000), (size + MiB, 4096), (size + 6 * MiB - 10, 20),
                 (len(want) - 4096, 4096), (12 * MiB + 12345, 2 * MiB)]
        for k, (off, n) in enumerate(edits):
            data = ckfs.content('edit%d' % k, n)
            with open(path, 'r+b') as f:
                f.seek(off)
                f.write(data)
            want[off:off + n] = data
            self.assertEqual(ckfs.read_bytes(path), bytes(want), 'after edit %d' % k)
        fd = os.open(path, os.O_RDWR)
        try:                                   # many small writes between two closes
            for k in range(200):
                off = (k * 104729) % len(want)
                os.pwrite(fd, bytes([k]), off)
                want[off] = k
        finally:
            os.close(fd)
        self.assertEqual(ckfs.read_bytes(path), bytes(want))
        self.m.remount()
        self.assertEqual(ckfs.read_bytes(path), bytes(want), 'after a remount')
        r = self.m.ckptctl('verify')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == '__main__':
    faulthandler.enable()
    unittest.main()
