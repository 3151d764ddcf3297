#!/usr/bin/python3
"""A chunk changed on disk is detected: reads fail with EIO (never wrong bytes), mmap readers get
SIGBUS (never wrong bytes), `ckptctl STORE verify` exits 1 naming the file, and an untampered file
in the same store still reads fine.

Run: /usr/bin/python3 tests/mount/test_tamper.py
"""

import sys

sys.dont_write_bytecode = True

import errno  # noqa: E402
import faulthandler  # noqa: E402
import mmap  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import content  # noqa: E402

MiB = 1 << 20
HEADER = 32         # chunk file header; the payload starts here


def read_until_error(path):
    """(bytes read before the first error, OSError or None)"""
    got = []
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return b'', e
    try:
        off = 0
        while True:
            try:
                b = os.pread(fd, 256 * 1024, off)
            except OSError as e:
                return b''.join(got), e
            if not b:
                return b''.join(got), None
            got.append(b)
            off += len(b)
    finally:
        os.close(fd)


def mmap_child(path, expect):
    """Fork a child that reads path through MAP_SHARED and compares; return how it ended:
    'sigbus', 'identical' (the damage was not seen), 'WRONG BYTES at N', or an error text."""
    pid = os.fork()
    if pid == 0:
        code = 9
        try:
            signal.signal(signal.SIGBUS, signal.SIG_DFL)
            fd = os.open(path, os.O_RDONLY)
            m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
            code = 3
            for off in range(0, len(m), 65536):
                if m[off:off + 65536] != expect[off:off + 65536]:
                    os.write(2, b'mmap: wrong bytes at %d\n' % off)
                    code = 4
                    break
        except OSError as e:
            os.write(2, b'mmap child: %s\n' % str(e).encode())
            code = 6 if e.errno == errno.EIO else 5
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return 'sigbus' if os.WTERMSIG(status) == signal.SIGBUS else \
            'killed by signal %d' % os.WTERMSIG(status)
    return {3: 'identical', 4: 'WRONG BYTES', 5: 'open/mmap failed', 6: 'eio'}.get(
        os.WEXITSTATUS(status), 'exit %d' % os.WEXITSTATUS(status))


class TamperTest(unittest.TestCase):

    def test_flipped_payload_byte_is_eio(self):
        m = ckfs.Mount(opts=('layout=none',))  # chunk damage, not step semantics
        try:
            m.start()
            self.run_in(m)
        finally:
            m.close()

    def run_in(self, m):
        victim = content('victim', 6 * MiB + 123)
        bystander = content('bystander', 5 * MiB + 7)
        os.mkdir(m.path('iter_0000001'))
        vpath = m.path('iter_0000001', 'victim.pt')
        bpath = m.path('iter_0000001', 'bystander.pt')
        with open(vpath, 'wb') as f:
            f.write(victim)
        m.unmount()
        victim_chunks = set(ckfs.chunk_files(m.store))
        self.assertTrue(victim_chunks, 'no chunk files under %s/chunks' % m.store)
        m.start()
        with open(bpath, 'wb') as f:
            f.write(bystander)
        self.assertEqual(ckfs.read_bytes(vpath), victim)
        m.unmount()
        r = ckfs.ckptctl(m.store, 'verify')
        self.assertEqual(r.returncode, 0, 'verify of an intact store: %s%s' % (r.stdout, r.stderr))
        sizes = ckfs.chunk_files(m.store)
        mine = sorted(c for c in victim_chunks if c in sizes)
        self.assertTrue(mine, 'the victim\'s chunk files are gone')
        # the bystander's chunks are all new ones, so it shares nothing with the victim
        self.assertTrue(set(sizes) - victim_chunks, 'the bystander file added no chunk files')
        target = max(mine, key=lambda c: sizes[c])      # the biggest of the victim's chunks
        cpath = os.path.join(m.store, 'chunks', target)
        size = sizes[target]
        self.assertGreater(size, HEADER, '%s has no payload' % cpath)
        off = HEADER + (size - HEADER) // 2
        with open(cpath, 'r+b') as f:
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0x01]))
        m.start()
        # read(): the bytes before the damage are right, then EIO; never wrong bytes
        for attempt in range(2):
            got, err = read_until_error(vpath)
            self.assertEqual(got, victim[:len(got)],
                             'read returned wrong bytes (attempt %d) instead of EIO' % attempt)
            self.assertIsNotNone(err, 'reading the damaged file succeeded (attempt %d): chunk %s '
                                 'byte %d flipped, %d bytes returned' % (attempt, target, off,
                                                                         len(got)))
            self.assertEqual(err.errno, errno.EIO, 'expected EIO, got %s' % err)
        # mmap: SIGBUS, never wrong bytes
        how = mmap_child(vpath, victim)
        self.assertIn(how, ('sigbus', 'eio'), 'reading the damaged file through mmap: %s' % how)
        # the other file is fine
        self.assertEqual(ckfs.read_bytes(bpath), bystander)
        m.unmount()
        r = ckfs.ckptctl(m.store, 'verify')
        self.assertEqual(r.returncode, 1, 'ckptctl verify of a damaged store exited %d: %s%s' %
                         (r.returncode, r.stdout, r.stderr))
        out = r.stdout + r.stderr
        self.assertIn('victim.pt', out, 'verify does not name the damaged file: %s' % out)
        self.assertNotIn('bystander.pt', out, 'verify names an intact file: %s' % out)
        # the bystander still reads after remount, and the damage persists as EIO
        m.start()
        self.assertEqual(ckfs.read_bytes(bpath), bystander)
        got, err = read_until_error(vpath)
        self.assertEqual(got, victim[:len(got)])
        self.assertIsNotNone(err)
        self.assertEqual(err.errno, errno.EIO)
        m.unmount()


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
