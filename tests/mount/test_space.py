#!/usr/bin/python3
"""Space: deleting files gives the space back (on unlink, at unmount, or by `ckptctl gc`), and
the same bytes written twice are stored once.

Run: /usr/bin/python3 tests/mount/test_space.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import content  # noqa: E402

MiB = 1 << 20
SLACK = 8 * MiB         # index growth, headers, a partial chunk
FREE_TOLERANCE = 64 * MiB   # the disk is shared with other processes


def free_bytes(path):
    sv = os.statvfs(path)
    return sv.f_bavail * sv.f_frsize


def write_fsync(path, data):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        mv = memoryview(data)
        while mv:
            mv = mv[os.write(fd, mv[:8 * MiB]):]
        os.fsync(fd)
    finally:
        os.close(fd)


class SpaceTest(unittest.TestCase):

    def setUp(self):
        self.m = ckfs.Mount()
        try:
            self.m.start()
        except BaseException:
            self.m.close()
            raise

    def tearDown(self):
        self.m.close()

    def test_space_comes_back_after_delete(self):
        m = self.m
        base = m.chunk_bytes()
        free0 = free_bytes(m.store)
        os.mkdir(m.path('global_step1'))
        names = []
        for i in range(4):
            p = m.path('global_step1', 'part%d.pt' % i)
            write_fsync(p, content('space%d' % i, 50 * MiB))
            names.append(p)
        logical = 200 * MiB
        grown = m.chunk_bytes() - base
        free1 = free_bytes(m.store)
        self.assertGreaterEqual(grown, logical * 95 // 100,
                                'random data stored in only %d bytes of chunk files' % grown)
        self.assertLessEqual(grown, logical * 115 // 100,
                             '%d logical bytes took %d bytes of chunk files' % (logical, grown))
        for p in names:
            os.unlink(p)
        os.rmdir(m.path('global_step1'))
        released = None
        if m.chunk_bytes() - base <= SLACK:
            released = 'at unlink'
        else:
            m.unmount()
            if ckfs.chunk_bytes(m.store) - base <= SLACK:
                released = 'at unmount'
            else:
                r = ckfs.ckptctl(m.store, 'gc')
                self.assertEqual(r.returncode, 0, 'ckptctl gc: %s%s' % (r.stdout, r.stderr))
                if ckfs.chunk_bytes(m.store) - base <= SLACK:
                    released = 'by ckptctl gc'
            m.start()
        left = ckfs.chunk_bytes(m.store) - base
        self.assertIsNotNone(released, '%d bytes of chunk files are left after deleting every '
                             'file, unmounting and ckptctl gc' % left)
        free2 = free_bytes(m.store)
        self.assertGreaterEqual(free2, free0 - FREE_TOLERANCE,
                                'free space on the store\'s disk: %d before, %d with the files, '
                                '%d after deleting them' % (free0, free1, free2))
        sys.stderr.write('\n  [200 MB stored as %.1f MB of chunks, released %s; free %+.0f MB '
                         'after writing, %+.0f MB at the end] ' %
                         (grown / MiB, released, (free1 - free0) / MiB, (free2 - free0) / MiB))
        # the store still works
        write_fsync(m.path('after'), b'after')
        self.assertEqual(ckfs.read_bytes(m.path('after')), b'after')

    def test_same_bytes_twice_are_stored_once(self):
        m = self.m
        base = m.chunk_bytes()
        data = content('dedup', 100 * MiB)
        write_fsync(m.path('a.pt'), data)
        g1 = m.chunk_bytes() - base
        write_fsync(m.path('b.pt'), data)
        g2 = m.chunk_bytes() - base
        self.assertGreaterEqual(g1, 95 * MiB, 'first copy stored in only %d bytes' % g1)
        self.assertLess(g2 - g1, SLACK, 'the second, identical copy added %d bytes' % (g2 - g1))
        # and a copy shifted by a few bytes (a longer header) still shares almost everything
        write_fsync(m.path('c.pt'), b'a longer header!' + data)
        g3 = m.chunk_bytes() - base
        self.assertLess(g3 - g2, 10 * MiB, 'a copy with 16 bytes prepended added %d bytes' %
                        (g3 - g2))
        self.assertEqual(ckfs.file_hash(m.path('b.pt')), ckfs.file_hash(m.path('a.pt')))
        m.remount()
        for n in ('a.pt', 'b.pt'):
            with open(m.path(n), 'rb') as f:
                self.assertEqual(f.read(), data, n)
        sys.stderr.write('\n  [100 MB: first copy %.1f MB, second +%.2f MB, shifted +%.2f MB] ' %
                         (g1 / MiB, (g2 - g1) / MiB, (g3 - g2) / MiB))


class QuarantineLimitTest(unittest.TestCase):
    def test_keep_quarantine(self):
        """Issue 40.4: steps set aside were never removed (every torn save stayed on the disk).
        With -o keep_quarantine=2, five abandoned Megatron saves leave the last two in
        .ckptfs/quarantine; the others are pruned, their space given back, their history kept."""
        with ckfs.Mount(opts=('keep_quarantine=2',)) as m:
            for n in range(1, 6):
                d = m.path('iter_%07d' % n, 'mp_rank_00')
                # each save written by processes that exit without a tracker claim: abandoned
                # (two of them, as a job's ranks: one process alone would leave a copy, policy
                # rule 3)
                r = ckfs.run(['mkdir', '-p', d], timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                r = ckfs.run(['/usr/bin/python3', '-c',
                              'import os,sys; '
                              'open(os.path.join(sys.argv[1], "model_optim_rng.pt"), "wb")'
                              '.write(os.urandom(1 << 20))', d], timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                q = m.path('.ckptfs', 'quarantine')
                ckfs.wait_for('iter_%07d set aside' % n, lambda: (
                    os.listdir(m.mnt), any(x.startswith('iter_%07d.' % n)
                                           for x in os.listdir(q)))[1], timeout=30)
            kept = sorted(x.split('.')[0] for x in os.listdir(m.path('.ckptfs', 'quarantine')))
            self.assertEqual(kept, ['iter_0000004', 'iter_0000005'])
            steps = json.loads(m.ckptctl('steps', json_out=True).stdout)['steps']
            by = {s['name']: s['state'] for s in steps}
            self.assertEqual([by['iter_%07d' % n] for n in range(1, 6)],
                             ['pruned'] * 3 + ['incomplete'] * 2, by)
            show = json.loads(m.ckptctl('show', 'iter_0000001', json_out=True).stdout)['versions'][0]
            self.assertIn('quarantine limit', json.dumps(show))
            # du of the mount does not see .ckptfs (the root's listing leaves it out): status
            # says what the quarantine holds
            with open(m.path('.ckptfs', 'status')) as f:
                status = f.read()
            self.assertRegex(status, r'quarantined: +2 steps, \d+ bytes stored, in '
                             r'\.ckptfs/quarantine \(keep_quarantine=2;')
            held = int(re.search(r'quarantined: +2 steps, (\d+) bytes', status).group(1))
            self.assertGreaterEqual(held, 2 << 20)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
