#!/usr/bin/python3
"""The README's first command, scripts/demo.sh, end to end in a temporary output directory.

A mount left at DIR/checkpoint by an earlier run is simulated first (the demo must unmount it);
then scripts/demo.sh --steps 20 --out DIR must exit 0, print that the resumed loss matched the
loss logged before the crash, report `verify` clean, and leave no mount and no process behind.

Environment: CKPTFS_BIN, CKPTCTL_BIN (passed on to demo.sh: it then does not build build/),
CKPTFS_TEST_TMP (where DIR goes, default /tmp), CKPTFS_KEEP=1 (keep DIR),
CKPTFS_DEMO_LAYOUT (default mf2).
Run: /usr/bin/python3 tests/e2e/test_demo.py [-v]
"""

import sys

sys.dont_write_bytecode = True

import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402

DEMO = os.path.join(ckfs.REPO_ROOT, 'scripts', 'demo.sh')
LAYOUT = os.environ.get('CKPTFS_DEMO_LAYOUT', 'mf2')
TIMEOUT = 540


def procs_mentioning(path):
    """pids whose command line mentions path (not us)."""
    res = []
    for d in os.listdir('/proc'):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open('/proc/%s/cmdline' % d, 'rb') as f:
                cmd = f.read().replace(b'\0', b' ').decode(errors='replace')
            with open('/proc/%s/stat' % d) as f:
                st = f.read()
        except OSError:
            continue
        if st[st.rfind(')') + 2:].split()[0] in ('Z', 'X'):
            continue
        if path in cmd:
            res.append((int(d), cmd))
    return res


class TestDemo(unittest.TestCase):
    def setUp(self):
        ckfs.check_fuse_usable()
        self.out = tempfile.mkdtemp(prefix='ckptfs-test-demo-', dir=ckfs.test_tmp_root())
        self.mnt = os.path.join(self.out, 'checkpoint')
        self.store = os.path.join(self.out, 'store')

    def tearDown(self):
        # whatever happened, leave nothing mounted or running
        if ckfs.is_fuse_mounted(self.mnt):
            subprocess.run(['fusermount3', '-uz', self.mnt], check=False)
        if ckfs.keep_tmp():
            sys.stderr.write('test_demo: keeping %s\n' % self.out)
        elif not ckfs.is_fuse_mounted(self.mnt):
            shutil.rmtree(self.out, ignore_errors=True)

    def test_demo(self):
        # a mount an earlier run left behind, with a file in it
        os.makedirs(self.mnt)
        ckfs.run([ckfs.ckptfs_bin(), self.store, self.mnt], check=True, timeout=60)
        deadline = time.monotonic() + 30
        while not ckfs.is_fuse_mounted(self.mnt):
            self.assertLess(time.monotonic(), deadline, 'the pre-mount did not appear')
            time.sleep(0.05)
        with open(os.path.join(self.mnt, 'stale'), 'w') as f:
            f.write('left by an earlier run\n')

        t0 = time.monotonic()
        p = subprocess.run(['bash', DEMO, '--layout', LAYOUT, '--steps', '20', '--out', self.out],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        took = time.monotonic() - t0
        out = p.stdout
        sys.stdout.write('--- scripts/demo.sh (%.0f s), last lines ---\n%s\n' %
                         (took, '\n'.join(out.splitlines()[-25:])))
        self.assertEqual(p.returncode, 0, 'demo.sh exited %d:\n%s' % (p.returncode, out))

        self.assertIn('unmounting what a previous run left', out)
        self.assertIn('SIGKILL the whole training job', out)
        m = re.search(r'step +(\d+): resumed with loss (\S+), logged before the crash (\S+) '
                      r'-> match', out)
        self.assertIsNotNone(m, 'no resumed-loss match line:\n' + out)
        self.assertEqual(m.group(2), m.group(3))
        self.assertEqual(m.group(1), '10', 'killed while saving step 15: must resume at 10')
        self.assertRegex(out, r'step +11: first step after resume (\S+), logged before the '
                              r'crash \1 -> match')
        self.assertIn('resumed loss matches', out)
        self.assertRegex(out, r'verify: \d+ chunks, \d+ files checked: 0 damaged chunks, '
                              r'0 damaged files')
        self.assertIn('== demo OK', out)

        # nothing left behind
        self.assertFalse(ckfs.is_fuse_mounted(self.mnt), '%s still mounted' % self.mnt)
        with open('/proc/mounts') as f:
            left = [ln for ln in f if self.out in ln]
        self.assertEqual(left, [], 'mounts left behind: %s' % left)
        self.assertEqual(procs_mentioning(self.out), [], 'processes left behind')
        self.assertFalse(os.path.exists(os.path.join(self.out, 'demo', 'trainer.pgid')))


if __name__ == '__main__':
    unittest.main()
