#!/usr/bin/python3
"""A chunk changed on disk is detected: reads fail with EIO (never wrong bytes), mmap readers get
SIGBUS (never wrong bytes), `ckptctl STORE verify` exits 1 naming the file, and an untampered file
in the same store still reads fine. A chunk of the newest step damaged at rest is found by the
check every mount makes, which runs after the mount is up and before anything reads through it.

Run: /usr/bin/python3 tests/mount/test_tamper.py
"""

import sys

sys.dont_write_bytecode = True

import errno  # noqa: E402
import faulthandler  # noqa: E402
import json  # noqa: E402
import mmap  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import content  # noqa: E402

MiB = 1 << 20
TRACKER = 'latest_checkpointed_iteration.txt'
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


class MountCheckTest(unittest.TestCase):
    """Every mount re-hashes the newest complete step of each layout, which a resume reads first
    (fs/steps/steps.c verify_newest); a damaged one leaves the namespace. The check runs on a
    thread of its own that holds the daemon's lock from before the mount comes up until it ends
    (start_checker): the mount returns at once, so a trainer's start overlaps the check, and
    every request waits for it, so no reader ever sees the damaged step."""

    DELAY_MS = 4000  # the check is held this long by CKPTFS_FAULT=mount-check@MS

    def save(self, m, it):
        d = m.path('iter_%07d' % it, 'mp_rank_00')
        os.makedirs(d)
        with open(os.path.join(d, 'model_optim_rng.pt'), 'wb') as f:
            f.write(content('mount-check-%d' % it, 3 * MiB + it))
        with open(m.path(TRACKER), 'w') as f:
            f.write(str(it))

    def damaged_store(self):
        """A store of Megatron steps 2 and 4, unmounted, with one of step 4's own chunks
        flipped at rest; returns its Mount, stopped."""
        m = ckfs.Mount()
        m.start()
        self.save(m, 2)
        m.unmount()
        before = set(ckfs.chunk_files(m.store))
        m.start()
        self.save(m, 4)
        self.assertEqual(ckfs.read_bytes(m.path(TRACKER)).strip(), b'4')
        m.unmount()
        sizes = ckfs.chunk_files(m.store)
        mine = sorted(c for c in sizes if c not in before)
        self.assertTrue(mine, 'step 4 added no chunk files')
        target = max(mine, key=lambda c: sizes[c])
        cpath = os.path.join(m.store, 'chunks', target)
        off = HEADER + (sizes[target] - HEADER) // 2
        with open(cpath, 'r+b') as f:
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0x01]))
        return m

    def assert_resumes_on_2(self, m):
        self.assertEqual(ckfs.read_bytes(m.path(TRACKER)).strip(), b'2', m.log_tail())
        root = os.listdir(m.mnt)
        self.assertIn('iter_0000002', root)
        self.assertNotIn('iter_0000004', root, m.log_tail())
        with open(m.path('.ckptfs', 'steps')) as f:
            table = f.read()
        row4 = [ln for ln in table.splitlines() if 'iter_0000004' in ln]
        self.assertTrue(row4 and 'corrupt' in row4[0], 'step 4 in .ckptfs/steps: %s' % table)

    def test_a_chunk_found_bad_while_mounted_moves_the_tracker_at_once(self):
        """A tracker read asks the index whether a file under the newest step uses a chunk
        marked bad, climbing from the chunks marked bad (index idx_dir_has_bad_chunk, called by
        fs/steps/steps_tree.c steps_tree_has_bad_chunk), instead of walking the step's files. A
        read that finds one of the step's chunks damaged while mounted marks it bad: the next
        tracker read sets the step aside and names the step before."""
        m = ckfs.Mount()
        try:
            m.start()
            self.save(m, 2)
            before = set(ckfs.chunk_files(m.store))
            self.save(m, 4)
            for _ in range(3):
                self.assertEqual(ckfs.read_bytes(m.path(TRACKER)).strip(), b'4', m.log_tail())
            sizes = ckfs.chunk_files(m.store)
            mine = sorted(c for c in sizes if c not in before)
            self.assertTrue(mine, 'step 4 added no chunk files')
            target = max(mine, key=lambda c: sizes[c])
            off = HEADER + (sizes[target] - HEADER) // 2
            with open(os.path.join(m.store, 'chunks', target), 'r+b') as f:
                f.seek(off)
                b = f.read(1)
                f.seek(off)
                f.write(bytes([b[0] ^ 0x01]))
            path = m.path('iter_0000004', 'mp_rank_00', 'model_optim_rng.pt')
            fd = os.open(path, os.O_RDONLY)
            try:  # the pages the save left in the kernel's cache: the read must reach ckptfs
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            got, err = read_until_error(path)
            self.assertIsNotNone(err, 'step 4 read back whole with chunk %s flipped' % target)
            self.assertEqual(err.errno, errno.EIO, err)
            self.assert_resumes_on_2(m)
        finally:
            m.close()

    def test_the_mount_returns_before_the_check_and_readers_wait_for_it(self):
        m = self.damaged_store()
        try:
            m.env['CKPTFS_FAULT'] = 'mount-check@%d' % self.DELAY_MS
            t0 = time.monotonic()
            m.start()
            t_mount = time.monotonic() - t0
            self.assertLess(t_mount, self.DELAY_MS / 1000 - 1,
                            'the mount waited for the check: %.2f s' % t_mount)
            # during the check, at once: ckptctl, which reads the index itself and waits on
            # STORE/check, and a tracker read through the mount, which waits on the daemon
            ctl = subprocess.Popen([ckfs.ckptctl_bin(), '--json', m.store, 'steps'],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            with open(m.path(TRACKER)) as f:
                got = f.read()
            t_read = time.monotonic() - t0
            out, err = ctl.communicate(timeout=60)
            t_ctl = time.monotonic() - t0
            self.assertEqual(got.strip(), '2', m.log_tail())
            self.assertGreater(t_read, self.DELAY_MS / 1000 - 0.2,
                               'the tracker read did not wait for the check: %.2f s' % t_read)
            self.assertEqual(ctl.returncode, 0, out + err)
            self.assertGreater(t_ctl, self.DELAY_MS / 1000 - 0.2,
                               'ckptctl steps did not wait for the check: %.2f s' % t_ctl)
            self.assertIn('waiting for ckptfs', err)
            states = {st['step']: st['state'] for st in json.loads(out)['steps']}
            self.assertEqual(states, {2: 'complete', 4: 'corrupt'}, out)
            self.assert_resumes_on_2(m)
            with open(os.path.join(m.store, 'ckptfs.log')) as f:
                log = f.read()
            # the log says why readers wait, and what the check found
            self.assertIn("checking step 'iter_0000004'", log)
            self.assertIn("checked step 'iter_0000004' in", log)
            self.assertIn("damaged, quarantined", log)
        finally:
            m.close()

    def test_the_command_does_not_wait_for_the_check_of_a_big_step(self):
        """`ckptfs` waits for the check (up to 1 s, fs/fuse/daemon.c REPORT_WAIT_NS) only to say
        on its terminal what the check set aside. For a step checked within that second, the
        wait was the whole check, paid before the trainer could start instead of overlapping
        its start (tests/bench/RESULTS.md "The whole restore"). Over REPORT_WAIT_BYTES (16 MiB)
        stored, the command returns at once and says the check goes on."""
        m = ckfs.Mount()
        try:
            m.start()
            d = m.path('iter_0000002', 'mp_rank_00')
            os.makedirs(d)
            with open(os.path.join(d, 'model_optim_rng.pt'), 'wb') as f:
                f.write(os.urandom(20 * MiB))  # stored as it is: 20 MiB to check
            with open(m.path(TRACKER), 'w') as f:
                f.write('2')
            m.unmount()
            m.env['CKPTFS_FAULT'] = 'mount-check@%d' % self.DELAY_MS
            t0 = time.monotonic()
            m.start()
            t_mount = time.monotonic() - t0
            self.assertLess(t_mount, 0.9, 'the command waited for the check of a 20 MiB step: '
                            '%.2f s' % t_mount)
            self.assertIn('goes on after this command returns', m.start_stderr)
            self.assertEqual(ckfs.read_bytes(m.path(TRACKER)).strip(), b'2', m.log_tail())
            self.assertGreater(time.monotonic() - t0, self.DELAY_MS / 1000 - 0.2,
                               'the tracker read did not wait for the check')
        finally:
            m.close()

    def test_a_daemon_killed_during_the_check_loses_nothing(self):
        m = self.damaged_store()
        try:
            # held long enough for the test to find the daemon's pid, then killed
            m.env['CKPTFS_FAULT'] = 'mount-check@1500,mount-check'
            m.start()
            self.assertTrue(m.wait_daemon_death(30), 'the daemon outlived its fault kill')
            with open(os.path.join(m.store, 'ckptfs.log')) as f:
                self.assertIn("at 'mount-check'", f.read())
            del m.env['CKPTFS_FAULT']
            m.start()
            self.assert_resumes_on_2(m)
        finally:
            m.close()


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
