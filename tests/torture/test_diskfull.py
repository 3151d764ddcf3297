#!/usr/bin/python3
"""Disk full: the STORE lives on a small tmpfs made by the test (CKPTFS_DISKFULL_MIB, sizes in MiB,
default 25,40), and a Megatron-LM-style job (2 ranks, real torch.save of incompressible tensors, then the
tracker) saves steps until the store is full.

Asserted:
  - the save that does not fit fails with ENOSPC, seen by the writer (write, fsync or close),
    never EIO and never silent success: every file whose write and close succeeded reads back
    bit-exact, and the step that failed is never complete;
  - the earlier complete steps stay intact and resolvable: the tracker names the newest complete
    step, its files are bit-exact, `ls` shows it;
  - after space is freed (the failed step's directory and the oldest step removed with rm -rf
    through the mount; on a disk with no free byte the removal itself needs the index to grow,
    which the daemon's 8 MiB STORE/reserve makes possible), the next save succeeds and completes, and `ckptctl verify` is clean;
  - the daemon survives all of it and unmounts cleanly.
test_write_told: on a store whose disk has less than 1 MiB free, a plain write() + close() of
a few MiB of random bytes fails with ENOSPC (at write, as ext4 answers, or at close), and a
file whose write and close succeeded is still there, whole, seconds later and after a remount;
the same write succeeds once there is room.
Needs root (mount -t tmpfs); fails loudly otherwise.

Run: /usr/bin/python3 tests/torture/test_diskfull.py [-v]
"""

import sys

sys.dont_write_bytecode = True

import errno  # noqa: E402
import faulthandler  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import TRACKER, read_tracker, wait_for  # noqa: E402
import torch  # noqa: E402

RANKS = 2
SIZES_MIB = [int(x) for x in os.environ.get('CKPTFS_DISKFULL_MIB', '25,40').split(',') if x]
ELEMS = 1 << 20            # 4 MiB of fp32 random (incompressible mantissas) per rank file


def rank_path(step, rank):
    return 'iter_%07d/mp_rank_%02d/model_optim_rng.pt' % (step, rank)


def state(step, rank):
    g = torch.Generator().manual_seed(step * 100 + rank)
    return {'model': {'w': torch.rand(ELEMS, generator=g)}, 'iteration': step, 'rank': rank}


def blob(step, rank):
    """torch.save bytes of the rank's state (what the writer means to write)."""
    import io
    b = io.BytesIO()
    torch.save(state(step, rank), b)
    return b.getvalue()


def save_step(m, step, done):
    """Write every rank's file then the tracker, as plain writes + fsync + close. Records each
    finished file's sha256 in done. Returns None or the OSError that stopped the save."""
    try:
        for r in range(RANKS):
            p = m.path(rank_path(step, r))
            os.makedirs(os.path.dirname(p), exist_ok=True)
            data = blob(step, r)
            with open(p, 'wb') as f:
                for off in range(0, len(data), 1 << 20):
                    f.write(data[off:off + (1 << 20)])
                f.flush()
                os.fsync(f.fileno())
            done[rank_path(step, r)] = hashlib.sha256(data).hexdigest()
        with open(m.path(TRACKER), 'w') as f:
            f.write(str(step))
    except OSError as e:
        return e
    return None


def fill_to(path, left):
    """Grow file path until about `left` bytes are free on its filesystem; returns the bytes
    free then."""
    sv = os.statvfs(os.path.dirname(path))
    free = sv.f_bavail * sv.f_frsize
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        if free > left:
            os.posix_fallocate(fd, os.fstat(fd).st_size, free - left)
    finally:
        os.close(fd)
    sv = os.statvfs(os.path.dirname(path))
    return sv.f_bavail * sv.f_frsize


def plain_write(path, data):
    """open, write() in 1 MiB pieces, close: the OSError the writer was told, or None."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    except OSError as e:
        return e
    err = None
    try:
        mv = memoryview(data)
        while mv:
            mv = mv[os.write(fd, mv[:1 << 20]):]
    except OSError as e:
        err = e
    try:
        os.close(fd)
    except OSError as e:
        err = err or e
    return err


class TestDiskFull(unittest.TestCase):
    def small_fs(self, size_mib):
        if os.geteuid() != 0:
            self.fail('test_diskfull needs root to mount a size-limited tmpfs')
        self.top = tempfile.mkdtemp(prefix='ckptfs-test-diskfull-', dir=ckfs.test_tmp_root())
        self.fsdir = os.path.join(self.top, 'small')
        os.makedirs(self.fsdir)
        p = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=%dm,mode=0700' % size_mib,
                            'ckptfs-diskfull', self.fsdir], stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            self.fail('cannot mount a tmpfs for the store: %s' % p.stderr.strip())

    def tearDown(self):
        if not hasattr(self, 'fsdir'):
            return
        subprocess.run(['umount', '-l', self.fsdir])
        del self.fsdir
        if not ckfs.keep_tmp():
            shutil.rmtree(self.top, ignore_errors=True)

    def steps(self, m):
        p = m.ckptctl('steps', json_out=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return json.loads(p.stdout)['steps']

    def check_bit_exact(self, m, done, step):
        for r in range(RANKS):
            rel = rank_path(step, r)
            self.assertIn(rel, done)
            self.assertEqual(ckfs.sha256_file(m.path(rel)), done[rel], '%s not bit-exact' % rel)

    def test_write_told(self):
        """A write the store cannot hold fails, at write() or close(), with ENOSPC; one that
        returns success stays (issue 42 item 4)."""
        self.small_fs(32)
        store = os.path.join(self.fsdir, 'store')
        filler = os.path.join(self.fsdir, 'filler')
        with ckfs.Mount(store=store) as m:
            os.mkdir(m.path('d'))
            left = fill_to(filler, 512 * 1024)
            self.assertLess(left, 1 << 20, 'could not fill the store\'s disk: %d bytes free' % left)
            told = {}
            for name, size in (('a.pt', 1 << 20), ('b.pt', 4 << 20)):
                data = os.urandom(size)
                err = plain_write(m.path('d', name), data)
                told[name] = (err, hashlib.sha256(data).hexdigest())
                self.assertIsNotNone(err, '%s: writing %d bytes with %d bytes free returned '
                                     'success%s' % (name, size, left, m.log_tail()))
                self.assertEqual(err.errno, errno.ENOSPC, '%s: %s%s' % (name, err,
                                                                        m.log_tail()))
            # room again: the same kind of write succeeds, and stays
            os.truncate(filler, 0)
            data = os.urandom(2 << 20)
            self.assertIsNone(plain_write(m.path('d', 'c.pt'), data), m.log_tail())
            told['c.pt'] = (None, hashlib.sha256(data).hexdigest())
            time.sleep(3)
            self.check_told(m, told, 'after 3 s')
            m.remount()
            self.check_told(m, told, 'after a remount')
            self.assertTrue(ckfs.pid_alive(m.pid))

    def check_told(self, m, told, when):
        """Every file whose write and close succeeded is there, whole."""
        for name, (err, h) in told.items():
            if err is None:
                self.assertTrue(os.path.exists(m.path('d', name)), '%s is gone %s%s' %
                                (name, when, m.log_tail()))
                self.assertEqual(ckfs.sha256_file(m.path('d', name)), h,
                                 '%s changed %s' % (name, when))

    def test_disk_full(self):
        for size in SIZES_MIB:
            with self.subTest(size_mib=size):
                try:
                    self.small_fs(size)
                    self.disk_full(size)
                finally:
                    self.tearDown()

    def disk_full(self, size_mib):
        t0 = time.monotonic()
        store = os.path.join(self.fsdir, 'store')
        done = {}
        with ckfs.Mount(store=store) as m:
            complete, failed, err = [], None, None
            for step in range(2, 200, 2):
                err = save_step(m, step, done)
                if err is not None:
                    failed = step
                    break
                wait_for('step %d to complete' % step, lambda: read_tracker(m) == str(step),
                         timeout=30.0)
                complete.append(step)
            self.assertIsNotNone(failed, 'never ran out of space in a %d MiB store' % size_mib)
            self.assertEqual(err.errno, errno.ENOSPC,
                             'the save of step %d failed with %s, not ENOSPC%s' %
                             (failed, err, m.log_tail()))
            self.assertGreaterEqual(len(complete), 2, 'store too small for the test: %s' %
                                    complete)
            self.assertTrue(ckfs.pid_alive(m.pid), 'daemon died on ENOSPC%s' % m.log_tail())
            # every file whose write+close succeeded is whole; the rest are not claimed done
            for rel, h in done.items():
                if os.path.exists(m.path(rel)):
                    self.assertEqual(ckfs.sha256_file(m.path(rel)), h, '%s changed' % rel)
            # earlier complete steps intact and resolvable
            newest = complete[-1]
            self.assertEqual(read_tracker(m), str(newest))
            for s in complete:
                self.check_bit_exact(m, done, s)
            time.sleep(0.5)
            st = {s['step']: s['state'] for s in self.steps(m)}
            self.assertNotEqual(st.get(failed), 'complete', 'step %d complete after ENOSPC' %
                                failed)
            for s in complete:
                self.assertEqual(st.get(s), 'complete', 'step %d: %s' % (s, st))
            # free space: the failed step and the oldest complete one
            shutil.rmtree(m.path('iter_%07d' % failed), ignore_errors=True)
            shutil.rmtree(m.path('iter_%07d' % complete[0]))
            if os.path.exists(m.path('iter_%07d' % failed)):
                self.fail('cannot remove the failed step after ENOSPC: %s' %
                          os.listdir(m.path('iter_%07d' % failed)))
            # the next save succeeds (space may come back once the step is pruned: retry)
            nxt = failed + 2
            deadline = time.monotonic() + 30
            while True:
                err = save_step(m, nxt, done)
                if err is None:
                    break
                self.assertEqual(err.errno, errno.ENOSPC, str(err))
                self.assertLess(time.monotonic(), deadline,
                                'no space came back after removing two steps: %s%s' %
                                (err, m.log_tail()))
                time.sleep(1)
            wait_for('step %d to complete' % nxt, lambda: read_tracker(m) == str(nxt),
                     timeout=30.0)
            self.check_bit_exact(m, done, nxt)
            for s in complete[1:]:
                self.check_bit_exact(m, done, s)
            m.unmount()
            v = m.ckptctl('verify')
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
            m.start()
            self.check_bit_exact(m, done, nxt)
        print('diskfull: %d MiB store: steps %s complete, step %d failed with ENOSPC (%s), '
              'step %d saved after freeing space, verify clean (%.1fs)' %
              (size_mib, complete, failed, os.strerror(errno.ENOSPC), nxt,
               time.monotonic() - t0), flush=True)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(600, exit=True)
    unittest.main(verbosity=2)
