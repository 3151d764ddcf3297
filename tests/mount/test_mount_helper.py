#!/usr/bin/python3
"""ckptfs mounted the way every FUSE filesystem is (issue 23): through mount(8) and fuse3's
mount.fuse3 helper, from the command line and from an fstab line, unmounted by umount(8); and
unknown -o options refused before anything is mounted, with an error naming the option.

The build's binary is not on the standard PATH that mount(8) gives its helpers, so these use
the helper's `-t fuse` form, `PROGRAM#STORE` (mount.fuse3(8)), which runs the same code path
as `-t fuse.ckptfs STORE` with ckptfs installed; scripts/test-package.sh checks
`mount -t fuse.ckptfs` and fstab with the installed package in a clean Debian root.
The fstab tests use a private fstab (`mount -T FILE`), never /etc/fstab.

Environment: CKPTFS_BIN, CKPTCTL_BIN (../lib/ckfs.py).
Run: /usr/bin/python3 tests/mount/test_mount_helper.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402

SAVE = r'''
import os, sys
mnt = sys.argv[1]
d = os.path.join(mnt, 'iter_0000007', 'mp_rank_00')
os.makedirs(d)
with open(os.path.join(d, 'model_optim_rng.pt'), 'wb') as f:
    f.write(os.urandom(1 << 20))
with open(os.path.join(mnt, 'latest_checkpointed_iteration.txt'), 'w') as f:
    f.write('7')
'''


def mount_options(mnt):
    """the options field of mnt's /proc/mounts line, or None"""
    with open('/proc/mounts') as f:
        for line in f:
            p = line.split()
            if p[1] == mnt:
                return p[2], p[3]
    return None


class TestMountHelper(unittest.TestCase):
    def setUp(self):
        ckfs.check_fuse_usable()
        if not shutil.which('mount.fuse3', path='/sbin:/usr/sbin:/bin:/usr/bin'):
            self.fail('mount.fuse3 not found: install Debian\'s fuse3 (scripts/install-deps.sh)')
        self.tmp = tempfile.mkdtemp(prefix='ckptfs-test-', dir=ckfs.test_tmp_root())
        self.store = os.path.join(self.tmp, 'store')
        self.mnt = os.path.join(self.tmp, 'mnt')
        os.makedirs(self.mnt)
        self.bin = os.path.abspath(ckfs.ckptfs_bin())

    def tearDown(self):
        if ckfs.is_fuse_mounted(self.mnt):
            subprocess.run(['umount', self.mnt])
            if ckfs.is_fuse_mounted(self.mnt):
                subprocess.run(['fusermount3', '-uz', self.mnt])
        ckfs.wait_store_released(self.store)
        if not ckfs.keep_tmp():
            shutil.rmtree(self.tmp, ignore_errors=True)

    def umount(self):
        p = subprocess.run(['umount', self.mnt], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIsNone(mount_options(self.mnt), 'still mounted after umount')

    def save_and_check(self):
        p = subprocess.run([sys.executable, '-c', SAVE, self.mnt], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        deadline = time.monotonic() + 30
        while 'complete' not in ckfs.read_bytes(os.path.join(self.mnt, '.ckptfs',
                                                             'steps')).decode():
            self.assertLess(time.monotonic(), deadline, 'step 7 never completed')
            time.sleep(0.1)
        with open(os.path.join(self.mnt, 'latest_checkpointed_iteration.txt')) as f:
            self.assertEqual(f.read().strip(), '7')

    def test_mount_command(self):
        p = subprocess.run(['mount', '-t', 'fuse', '%s#%s' % (self.bin, self.store), self.mnt,
                            '-o', 'keep_checkpoint_max=3,allow_other'],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        kind, opts = mount_options(self.mnt)
        self.assertEqual(kind, 'fuse.ckptfs')
        self.assertIn('allow_other', opts.split(','))
        self.save_and_check()
        self.umount()
        # what the daemon wrote is there at the next mount (umount stopped it cleanly)
        r = ckfs.ckptctl(self.store, 'steps')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('iter_0000007', r.stdout)

    def test_fstab(self):
        fstab = os.path.join(self.tmp, 'fstab')
        with open(fstab, 'w') as f:
            f.write('# ckptfs test\n%s#%s %s fuse keep_checkpoint_max=3,allow_other,nofail 0 0\n'
                    % (self.bin, self.store, self.mnt))
        p = subprocess.run(['mount', '-T', fstab, '-a'], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(mount_options(self.mnt)[0], 'fuse.ckptfs')
        self.save_and_check()
        self.umount()
        # mount by mount point alone, as `mount /mnt/ckpt` with an fstab entry
        p = subprocess.run(['mount', '-T', fstab, self.mnt], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.mnt, 'latest_checkpointed_iteration.txt')) as f:
            self.assertEqual(f.read().strip(), '7')
        self.umount()

    def test_unknown_option(self):
        for argv in ([self.bin, '-o', 'keep_checkpoint_max=3,keep_checkpiont_max=2',
                      self.store, self.mnt],
                     ['mount', '-t', 'fuse', '%s#%s' % (self.bin, self.store), self.mnt,
                      '-o', 'keep_checkpiont_max=2']):
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            self.assertNotEqual(p.returncode, 0, ' '.join(argv))
            self.assertIn("unknown option(s): `-o keep_checkpiont_max=2'", p.stderr)
            self.assertIn('ckptfs --help', p.stderr)
            self.assertIsNone(mount_options(self.mnt), 'a refused mount left a mount')
        self.assertFalse(os.path.exists(self.store), 'a refused mount created the store')

    def test_numbers_parsed_strictly(self):
        """Issue 42: on cb3ae28 keep_checkpoint_max=-1 mounted as 4294967295, =3abc as 3, and
        write_buffer=10 as 10 bytes. Each is refused, naming the option and its range."""
        for opt, words in (('keep_checkpoint_max=-1', 'from 0 to 1000000'),
                           ('keep_checkpoint_max=3abc', 'from 0 to 1000000'),
                           ('keep_checkpoint_max=', 'whole number'),
                           ('keep_every=-4', 'from 0 to'),
                           ('ranks=0', 'from 1 to'),
                           ('nodes=2x', 'from 1 to'),
                           ('zstd_level=20', 'from 1 to 19'),
                           ('cache_mb=99999999999', 'from 1 to'),
                           ('write_buffer=10', 'at least 1M')):
            p = subprocess.run([self.bin, '-o', opt, self.store, self.mnt],
                               capture_output=True, text=True, timeout=120)
            self.assertNotEqual(p.returncode, 0, opt)
            self.assertIn('-o ' + opt + ':', p.stderr)
            self.assertIn(words, p.stderr, opt)
            self.assertIsNone(mount_options(self.mnt), 'a refused mount left a mount')
        self.assertFalse(os.path.exists(self.store), 'a refused mount created the store')


if __name__ == '__main__':
    faulthandler.dump_traceback_later(600, exit=True)
    unittest.main(verbosity=2)
