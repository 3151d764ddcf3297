#!/usr/bin/python3
"""A cold restore reads each chunk of the newest step from the disk once (issue 45): after a
remount on a cold node, the mount's check of the newest step (fs/steps/steps.c verify_newest)
and the trainer's first read of that step share the disk read and the decode, instead of the
check reading the step and the trainer reading it again.

The figure is the daemon's read_bytes in /proc/PID/io (bytes it had the block layer read:
chunk files are read with O_DIRECT, so every load counts, and after drop_caches so does every
other page-cache miss), over the stored size of the step's chunk files. Before issue 45 it was
2 (the check, then the reader); it must be about 1.

Needs root (drop_caches) and a store on a block device (read_bytes counts nothing on tmpfs):
both fail loudly, with the reason.

Run: /usr/bin/python3 tests/mount/test_restore.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import content  # noqa: E402

MiB = 1 << 20
TRACKER = 'latest_checkpointed_iteration.txt'
RANKS = 2
# What the daemon may read besides the step's chunk files, bytes: the index (SQLite), its own
# log and executable pages missed after drop_caches. Measured at 1-3 MiB; a second read of the
# step is its whole size.
OTHER_READS = 6 * MiB


def daemon_read_bytes(pid):
    with open('/proc/%d/io' % pid) as f:
        r = re.search(r'^read_bytes: (\d+)$', f.read(), re.M)
    if not r:
        raise AssertionError('no read_bytes in /proc/%d/io' % pid)
    return int(r.group(1))


def check_reads(status):
    """(chunks the mount's check read, kept in the cache, left in the page cache, read back
    from there) from the status."""
    r = re.search(r'mount check reads: +(\d+) chunks, (\d+) kept in the cache, (\d+) left in '
                  r'the page cache \((\d+) read back from there\)', status)
    if not r:
        raise AssertionError('no mount check line in the status:\n' + status)
    return tuple(int(x) for x in r.groups())


def drop_caches():
    os.sync()
    try:
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('3\n')
    except OSError as e:
        raise AssertionError('cannot drop the page cache (%s): this test needs root' % e)


def save(m, it, per_rank, random=False):
    """Megatron-LM's save of step it, RANKS files of per_rank bytes, then the tracker.
    Returns {path under the mount: bytes}."""
    files = {}
    for r in range(RANKS):
        d = os.path.join('iter_%07d' % it, 'mp_rank_%02d' % r)
        os.makedirs(m.path(d))
        rel = os.path.join(d, 'model_optim_rng.pt')
        files[rel] = os.urandom(per_rank) if random else content('%s-%d' % (rel, it), per_rank)
        with open(m.path(rel), 'wb') as f:
            f.write(files[rel])
    with open(m.path(TRACKER), 'w') as f:
        f.write(str(it))
    return files


class ColdRestoreTest(unittest.TestCase):

    def cold_restore(self, opts, per_rank):
        """Save step 1 and step 2 (RANKS files of per_rank random bytes), unmount, drop the page
        cache, mount, and read the step the tracker names as a trainer resuming would. Returns
        (daemon read_bytes, stored bytes of step 2's chunk files, the status text)."""
        m = ckfs.Mount(opts=opts)
        self.addCleanup(m.close)
        m.start()
        save(m, 1, MiB)
        m.settle()
        before = set(ckfs.chunk_files(m.store))
        files = save(m, 2, per_rank, random=True)
        m.unmount()
        sizes = ckfs.chunk_files(m.store)
        stored = sum(s for c, s in sizes.items() if c not in before)
        self.assertGreater(len(set(sizes) - before), 2 * RANKS, 'the step is a few chunks')
        self.assertGreater(stored, RANKS * per_rank * 99 // 100, 'random bytes stored raw')
        drop_caches()
        m.start()
        self.assertEqual(ckfs.read_bytes(m.path(TRACKER)).strip(), b'2', m.log_tail())
        for rel, data in sorted(files.items()):
            self.assertEqual(ckfs.read_bytes(m.path(rel)), data, rel)
        got = daemon_read_bytes(m.pid)
        status = m.status_text()
        log = m.log_tail(20)
        self.assertIn("checked step 'iter_0000002'", log, 'the mount did not check the step')
        self.assertIn('intact', log)
        self.assertGreater(got, stored // 2, 'read_bytes counts nothing here (is the store on '
                           'tmpfs?): %d bytes read, %d stored' % (got, stored))
        return got, stored, status

    def assert_once(self, got, stored, status):
        line = re.search(r'^mount check reads:.*$', status, re.M)
        sys.stderr.write('read_bytes %.1f MiB for %.1f MiB stored: %.2fx; %s\n' %
                         (got / MiB, stored / MiB, got / stored, line.group(0) if line else ''))
        self.assertLess(got, stored + OTHER_READS,
                        'the daemon read %.1f MiB for a step of %.1f MiB stored (%.2fx): the '
                        'step crossed the disk more than once\n%s' %
                        (got / MiB, stored / MiB, got / stored, status))

    def test_the_check_and_the_first_read_share_the_disk_read(self):
        """A step that fits in the chunk cache (64 MiB by default)."""
        got, stored, status = self.cold_restore((), 6 * MiB)
        self.assert_once(got, stored, status)
        checked, kept, primed, back = check_reads(status)
        self.assertGreater(checked, 2 * RANKS)
        self.assertEqual(kept, checked, 'a step within half the cache is kept whole')

    def test_a_step_larger_than_the_cache_is_read_once_too(self):
        """A step of 4 times the chunk cache."""
        got, stored, status = self.cold_restore(('cache_mb=8',), 16 * MiB)
        self.assert_once(got, stored, status)
        checked, kept, primed, back = check_reads(status)
        self.assertLess(kept, checked)
        self.assertEqual(primed, checked, 'every chunk left in the page cache too')
        self.assertGreaterEqual(back, checked - kept,
                                'each chunk not in the cache read back from the page cache')


if __name__ == '__main__':
    faulthandler.enable()
    ckfs.check_fuse_usable()
    unittest.main(verbosity=2)
