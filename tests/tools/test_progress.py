#!/usr/bin/python3
"""ckptctl's progress line (issue 23): verify, export, gc, fsck and import, run on a real store
holding one Megatron-LM step of 64 MiB, print on a terminal the standard line, "\\r"-updated,
with files done, bytes done, a rate and the time left ("verify: 1/1 files, 64.0 MiB/64.0 MiB,
410.2 MiB/s, 0:00 left"), each phase ending on a forced line with everything done, and erase it
before they exit; with stderr on a pipe they print no progress at all (no "\\r", no "left", no
escape sequence). Every run must exit 0.

The terminal is a real pseudo-terminal (pty.openpty) holding the command's stderr; its output
post-processing is turned off, so a "\\r" read from it is one the command wrote.

Run: /usr/bin/python3 tests/tools/test_progress.py   (CKPTFS_BIN / CKPTCTL_BIN name the binaries)
"""

import sys
import os

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import errno  # noqa: E402
import faulthandler  # noqa: E402
import pty  # noqa: E402
import re  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import termios  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

import ckfs  # noqa: E402

MiB = 1 << 20
STEP_DIR = 'iter_0000001'
RANK_FILE = os.path.join('mp_rank_00', 'model_optim_rng.pt')
TRACKER = 'latest_checkpointed_iteration.txt'
TIMEOUT = 300

# the standard line (tools/ckptctl/out.c, ctl_progress_work) with everything done: the forced
# last line of a phase
SIZE = r'\d+(?:\.\d)? (?:B|[KMGTPE]iB)'
DONE_LINE = (r'\r(?P<what>[a-z]+): (?P<n>\d+)/(?P=n) (?P<noun>[a-z ]+), (?P<b>%s)/(?P=b), '
             r'%s/s, 0:00 left\x1b\[K' % (SIZE, SIZE))


def run_on_tty(argv):
    """Run argv with stderr on a new pseudo-terminal and stdout on a file.
    Returns (exit status, stdout, everything written to the terminal) as text."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST  # no "\n" -> "\r\n": every "\r" read is the command's own
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    got = bytearray()
    with tempfile.TemporaryFile() as out:
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=slave)
        finally:
            os.close(slave)
        try:
            deadline = time.monotonic() + TIMEOUT
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    p.kill()
                    p.wait()
                    raise AssertionError('%s did not finish within %d s; its terminal shows '
                                         '%r' % (' '.join(argv), TIMEOUT, bytes(got)))
                r, _, _ = select.select([master], [], [], left)
                if not r:
                    continue
                try:
                    b = os.read(master, 65536)
                except OSError as e:
                    if e.errno != errno.EIO:  # EIO: every holder of the slave closed it
                        raise
                    break
                if not b:
                    break
                got += b
        finally:
            os.close(master)
        rc = p.wait(timeout=TIMEOUT)
        out.seek(0)
        stdout = out.read().decode(errors='surrogateescape')
    return rc, stdout, got.decode(errors='surrogateescape')


class ProgressTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ckfs.check_fuse_usable()
        cls.tmp = tempfile.mkdtemp(prefix='ckptfs-progress-', dir=ckfs.test_tmp_root())
        cls.src = os.path.join(cls.tmp, 'plain')  # the same step as a plain directory
        data = os.urandom(64 * MiB)
        m = ckfs.Mount()
        try:
            m.start()
            cls.store = m.store
            for top in (m.mnt, cls.src):
                os.makedirs(os.path.join(top, STEP_DIR, os.path.dirname(RANK_FILE)))
                with open(os.path.join(top, STEP_DIR, RANK_FILE), 'wb') as f:
                    f.write(data)
                with open(os.path.join(top, TRACKER), 'w') as f:
                    f.write('1')
            m.settle()
            m.unmount()  # gc and fsck need the store unmounted
        except BaseException:
            m.close()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise
        cls.mount = m

    @classmethod
    def tearDownClass(cls):
        cls.mount.stop()
        if not ckfs.keep_tmp():
            shutil.rmtree(cls.mount.tmp, ignore_errors=True)
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def argv(self, store, *args):
        return [ckfs.ckptctl_bin(), store] + list(args)

    def check(self, name, tty_argv, pipe_argv, noun='files'):
        """Run tty_argv with stderr on a terminal and pipe_argv with stderr on a pipe (the same
        command, with destinations of their own), and check what each printed."""
        rc, out, err = run_on_tty(tty_argv)
        self.assertEqual(rc, 0, '%s on a terminal exited %d: %s%r' % (name, rc, out, err))
        for want in ('\r', name + ': ', noun, '/s', ' left'):
            self.assertIn(want, err, '%r missing from what %s showed: %r' % (want, name, err))
        done = [m for m in re.finditer(DONE_LINE, err) if m.group('what') == name]
        self.assertTrue(done, 'no progress line of %s with everything done in %r' % (name, err))
        self.assertTrue(any(noun in m.group('noun') for m in done), err)
        self.assertTrue(any(m.group('b') == '64.0 MiB' for m in done), err)
        self.assertTrue(err.endswith('\r\x1b[K'), 'the line was not erased at exit: %r' % err)
        self.assertNotIn('\n', err, 'something else was printed on stderr: %r' % err)

        p = ckfs.run(pipe_argv, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 0, '%s piped exited %d: %s%s' %
                         (name, p.returncode, p.stdout, p.stderr))
        for unwanted in ('\r', 'left', '\x1b'):
            self.assertNotIn(unwanted, p.stderr, '%s printed progress on a pipe: %r' %
                             (name, p.stderr))
        return out, p.stdout

    def test_verify(self):
        out, piped = self.check('verify', self.argv(self.store, 'verify'),
                                self.argv(self.store, 'verify'))
        for text in (out, piped):
            self.assertIn('0 damaged files', text)
        self.assertEqual(out, piped)  # the result on stdout does not depend on the terminal

    def test_fsck(self):
        out, piped = self.check('fsck', self.argv(self.store, 'fsck'),
                                self.argv(self.store, 'fsck'))
        for text in (out, piped):
            self.assertIn('fsck: clean', text)

    def test_gc(self):
        out, piped = self.check('gc', self.argv(self.store, 'gc'), self.argv(self.store, 'gc'),
                                noun='chunk files')
        for text in (out, piped):
            self.assertIn('gc: removed 0 unlinked inodes and 0 chunks', text)

    def test_export(self):
        dests = [os.path.join(self.tmp, 'export-' + k) for k in ('tty', 'pipe')]
        out, piped = self.check('export', self.argv(self.store, 'export', '1', dests[0]),
                                self.argv(self.store, 'export', '1', dests[1]))
        for d, text in zip(dests, (out, piped)):
            self.assertIn('every file verified', text)
            self.assertEqual(ckfs.file_hash(os.path.join(d, STEP_DIR, RANK_FILE)),
                             ckfs.file_hash(os.path.join(self.src, STEP_DIR, RANK_FILE)))

    def test_import(self):
        stores = [os.path.join(self.tmp, 'import-' + k) for k in ('tty', 'pipe')]
        out, piped = self.check('import', self.argv(stores[0], 'import', self.src),
                                self.argv(stores[1], 'import', self.src))
        for text in (out, piped):
            self.assertRegex(text, r'%s +megatron +1 +64\.0 MiB +complete' % STEP_DIR)


if __name__ == '__main__':
    faulthandler.enable()
    unittest.main(verbosity=2)
