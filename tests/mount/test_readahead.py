#!/usr/bin/python3
"""Read-ahead of stored chunks (fs/write/ra.c, issue 22): a sequential reader's next chunks are
loaded into the chunk cache by the daemon's own threads before the reader asks for them; a reader
that jumps about gets none; -o readahead_mb=0 turns it off and an out-of-range value is refused;
and a damaged chunk met by the read-ahead is left to the reader, who gets EIO and has it marked
bad (ra.c invariant 2) -- the bytes returned before it are right.

The figures come from the "chunk reads" line of /.ckptfs/status: chunks served from the cache,
loaded by the reader, and loaded ahead.

Run: /usr/bin/python3 tests/mount/test_readahead.py
"""

import sys

sys.dont_write_bytecode = True

import errno  # noqa: E402
import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import content  # noqa: E402

MiB = 1 << 20
PAGE = 4096
HEADER = 32         # chunk file header; the payload starts here (store/chunkfile.c)


def chunk_reads(m):
    """(from the cache, loaded by the reader, loaded ahead) since the mount."""
    s = m.status_text()
    r = re.search(r'chunk reads: +(\d+) from the cache, (\d+) loaded by the reader, (\d+) '
                  r'loaded ahead', s)
    if not r:
        raise AssertionError('no chunk reads line in the status:\n' + s)
    return tuple(int(x) for x in r.groups())


def extents(m, path):
    r = m.ckptctl('--json', 'ls', path)
    if r.returncode != 0:
        raise AssertionError('ckptctl ls %s: %s%s' % (path, r.stdout, r.stderr))
    return json.loads(r.stdout)['extents']


def read_seq(path, start, end, bs=MiB):
    """Bytes [start, end) read in order, bs at a time, the kernel's own read-ahead off
    (POSIX_FADV_RANDOM: each read asks the daemon for its own pages only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        got, off = [], start
        while off < end:
            b = os.pread(fd, min(bs, end - off), off)
            if not b:
                break
            got.append(b)
            off += len(b)
        return b''.join(got)
    finally:
        os.close(fd)


class ReadAheadTest(unittest.TestCase):

    def mount(self, opts=()):
        m = ckfs.Mount(opts=('layout=none',) + tuple(opts))
        self.addCleanup(m.close)
        m.start()
        return m

    def write_cold(self, m, name, data):
        """Write name, then remount: the chunk cache is empty."""
        with open(m.path(name), 'wb') as f:
            f.write(data)
        m.settle()
        ext = extents(m, '/' + name)
        m.remount()
        return ext

    def test_a_sequential_reader_finds_its_chunks_loaded_ahead(self):
        m = self.mount()
        data = content('seq', 48 * MiB + 5)
        ext = self.write_cold(m, 'seq.bin', data)
        nchunks = len({e['chunk'] for e in ext})
        self.assertGreaterEqual(nchunks, 12)
        self.assertEqual(chunk_reads(m), (0, 0, 0))
        self.assertEqual(read_seq(m.path('seq.bin'), 0, len(data)), data)
        hits, loads, ahead = chunk_reads(m)
        self.assertGreater(ahead, 0, 'no chunk loaded ahead of a sequential reader of %d chunks '
                           '(%d loaded by the reader)' % (nchunks, loads))
        self.assertLess(loads, nchunks, 'the reader loaded every chunk itself')
        self.assertEqual(loads + ahead, nchunks,
                         'each chunk loaded once (cache 64 MiB, file 48 MiB): %d by the reader, '
                         '%d ahead, %d chunks' % (loads, ahead, nchunks))
        self.assertIn('bad chunks:         0', m.status_text())

    def test_off_with_readahead_mb_0_and_for_a_reader_jumping_about(self):
        m = self.mount(('readahead_mb=0',))
        data = content('off', 24 * MiB)
        ext = self.write_cold(m, 'off.bin', data)
        self.assertEqual(read_seq(m.path('off.bin'), 0, len(data)), data)
        _, loads, ahead = chunk_reads(m)
        self.assertEqual(ahead, 0, 'readahead_mb=0 loaded %d chunks ahead' % ahead)
        self.assertEqual(loads, len({e['chunk'] for e in ext}))
        self.assertIn('(readahead_mb=0)', m.status_text())

        m2 = self.mount()
        data = content('jump', 48 * MiB)
        self.write_cold(m2, 'jump.bin', data)
        # each read at least RA_SLACK (8 MiB, ra.c) from where the last ended: no run
        offs = [mib * MiB for mib in (40, 2, 30, 11, 45, 20, 0, 36, 12, 27, 3, 44)]
        fd = os.open(m2.path('jump.bin'), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            for off in offs:
                self.assertEqual(os.pread(fd, PAGE, off), data[off:off + PAGE])
        finally:
            os.close(fd)
        _, loads, ahead = chunk_reads(m2)
        self.assertGreater(loads, 0)
        self.assertEqual(ahead, 0, '%d chunks loaded ahead of a reader jumping about' % ahead)

    def test_an_out_of_range_window_is_refused(self):
        m = ckfs.Mount(opts=('readahead_mb=5000',))
        try:
            with self.assertRaises(ckfs.MountError) as cm:
                m.start()
            self.assertIn('-o readahead_mb=5000: must be a whole number from 0 to 1024', str(cm.exception))
        finally:
            m.close()

    def test_a_damaged_chunk_ahead_is_left_to_its_reader(self):
        m = self.mount()
        data = content('victim', 40 * MiB)
        ext = self.write_cold(m, 'victim.bin', data)
        m.unmount()
        # the damaged chunk: the first one starting past 8 MiB, used once in the file
        uses = {}
        for e in ext:
            uses[e['chunk']] = uses.get(e['chunk'], 0) + 1
        bad = next(e for e in ext if e['offset'] >= 8 * MiB and uses[e['chunk']] == 1)
        cpath = os.path.join(m.store, 'chunks', bad['chunk'][:2], bad['chunk'])
        with open(cpath, 'r+b') as f:
            f.seek(HEADER + 1000)
            b = f.read(1)
            f.seek(HEADER + 1000)
            f.write(bytes([b[0] ^ 0x10]))
        m.start()
        # read up to the page before the damaged chunk's first page: the reader never asks for a
        # byte of it, the read-ahead (16 MiB past the reader) does
        stop = bad['offset'] // PAGE * PAGE - PAGE
        self.assertEqual(read_seq(m.path('victim.bin'), 0, stop), data[:stop])
        before = {e['chunk'] for e in ext if e['offset'] < stop}
        deadline = time.monotonic() + 20
        while True:
            _, loads, ahead = chunk_reads(m)
            if loads + ahead >= len(before) + 1 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertGreaterEqual(loads + ahead, len(before) + 1,
                                'the read-ahead did not reach the damaged chunk: %d loaded by the '
                                'reader, %d ahead, %d chunks before it' % (loads, ahead,
                                                                           len(before)))
        self.assertIn('bad chunks:         0', m.status_text(),
                      'the read-ahead marked the damaged chunk bad; its reader must')
        fd = os.open(m.path('victim.bin'), os.O_RDONLY)
        try:
            with self.assertRaises(OSError) as cm:
                os.pread(fd, MiB, bad['offset'])
            self.assertEqual(cm.exception.errno, errno.EIO)
        finally:
            os.close(fd)
        self.assertIn('bad chunks:         1', m.status_text())
        self.assertIn("cannot read chunk '%s'" % bad['chunk'], m.log_tail(50))


if __name__ == '__main__':
    faulthandler.enable()
    ckfs.check_fuse_usable()
    unittest.main(verbosity=2)
