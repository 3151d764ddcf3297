#!/usr/bin/python3
"""STORE and MOUNTPOINT that would lose or hide data are refused before anything is mounted or
created (issue 42.2; issue 40.7): the same directory, a store inside the mount point or a
mount point inside the store (also through a symbolic link), a mount point that holds
checkpoints, and a directory of checkpoints given as STORE (the two arguments swapped).

On cb3ae28 `ckptfs X X` mounted and lost a file written through it, `ckptfs S S/chunks`
deadlocked on its own mount, `ckptfs store ckpts` hid a run's checkpoints (the trainer then
started from step 0), and `ckptfs ckpts mnt` turned a directory of checkpoints into a store.

Environment: CKPTFS_BIN, CKPTCTL_BIN (../lib/ckfs.py).
Run: /usr/bin/python3 tests/mount/test_paths.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402


def tree(path):
    """{relative path: bytes} of every file under path"""
    res = {}
    for dp, _, fn in os.walk(path):
        for n in fn:
            p = os.path.join(dp, n)
            with open(p, 'rb') as f:
                res[os.path.relpath(p, path)] = f.read()
    return res


class TestPaths(unittest.TestCase):
    def setUp(self):
        ckfs.check_fuse_usable()
        self.tmp = tempfile.mkdtemp(prefix='ckptfs-test-', dir=ckfs.test_tmp_root())

    def tearDown(self):
        with open('/proc/mounts') as f:
            mounts = [line.split()[1] for line in f]
        for mnt in mounts:
            if mnt.startswith(self.tmp):
                ckfs.run(['fusermount3', '-uz', mnt], timeout=30)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def p(self, *parts):
        return os.path.join(self.tmp, *parts)

    def refused(self, store, mnt, *words, opts=()):
        """ckptfs [opts] store mnt exits non-zero, mounts nothing, says every word."""
        argv = [ckfs.ckptfs_bin()] + (['-o', ','.join(opts)] if opts else []) + [store, mnt]
        r = ckfs.run(argv, timeout=60)
        self.assertNotEqual(r.returncode, 0, '%s mounted: %s' % (argv, r.stderr))
        self.assertFalse(ckfs.is_fuse_mounted(os.path.realpath(mnt)), argv)
        for w in words:
            self.assertIn(w, r.stderr, argv)
        return r

    def test_overlap(self):
        os.makedirs(self.p('X'))
        self.refused(self.p('X'), self.p('X'), 'the same directory')
        self.assertEqual(os.listdir(self.p('X')), [], 'nothing created in X')
        # a store inside its mount point, existing or still to be created
        self.refused(self.p('X', 'store'), self.p('X'), 'the store is inside the mountpoint')
        self.assertFalse(os.path.exists(self.p('X', 'store')))
        # a mount point inside a real store (made by a first mount)
        m = ckfs.Mount(store=self.p('S'), mnt=self.p('m')).start()
        with open(m.path('f'), 'wb') as f:
            f.write(b'kept')
        m.unmount()
        before = tree(self.p('S', 'chunks'))
        self.refused(self.p('S'), self.p('S', 'chunks'), 'the mountpoint is inside the store')
        # the same through a symbolic link, and with relative paths
        os.symlink('S', self.p('S-link'))
        self.refused(self.p('S-link'), self.p('S'), 'the same directory')
        cwd = os.getcwd()
        try:
            os.chdir(self.tmp)
            self.refused('S', 'S/chunks', 'overlap')
        finally:
            os.chdir(cwd)
        self.assertEqual(tree(self.p('S', 'chunks')), before)
        m.start()                      # the store is untouched and serves its file
        with open(m.path('f'), 'rb') as f:
            self.assertEqual(f.read(), b'kept')
        m.close()

    def test_mountpoint_with_checkpoints(self):
        """A directory of a run's checkpoints is not hidden under a mount, nor made a store."""
        ck = self.p('checkpoint')
        os.makedirs(os.path.join(ck, 'iter_0000100', 'mp_rank_00'))
        with open(os.path.join(ck, 'iter_0000100', 'mp_rank_00', 'model_optim_rng.pt'),
                  'wb') as f:
            f.write(os.urandom(4096))
        with open(os.path.join(ck, 'latest_checkpointed_iteration.txt'), 'w') as f:
            f.write('100')
        before = tree(ck)
        r = self.refused(self.p('store'), ck, 'is not empty', "'ckptctl ", ' import ',
                         '-o nonempty')
        self.assertFalse(os.path.exists(self.p('store')), r.stderr)
        # the arguments swapped: the checkpoints would become a store
        os.makedirs(self.p('mnt'))
        self.refused(ck, self.p('mnt'), 'is not a ckptfs store', 'swapped')
        self.assertEqual(tree(ck), before, 'the checkpoints are untouched')
        self.assertEqual(sorted(os.listdir(ck)),
                         ['iter_0000100', 'latest_checkpointed_iteration.txt'])
        # -o nonempty is the way to mount over them anyway
        m = ckfs.Mount(store=self.p('store'), mnt=ck, opts=('nonempty',)).start()
        self.assertEqual(os.listdir(m.mnt), [])
        m.close()
        self.assertEqual(tree(ck), before)

    def test_source_is_the_store(self):
        """The mount's source in /proc/mounts is the store (cb3ae28: 'ckptfs'), so
        `findmnt -S STORE` finds it; a comma in the path survives fuse_opt's option list."""
        m = ckfs.Mount(store=self.p('st,ore'), mnt=self.p('mnt')).start()
        r = ckfs.run(['findmnt', '-n', '-o', 'TARGET', '-S', self.p('st,ore')], timeout=30)
        self.assertEqual(r.stdout.strip(), self.p('mnt'), r.stderr)
        m.close()

    def test_empty_directories_accepted(self):
        """An empty directory, or a new filesystem's root (lost+found), is a new store."""
        os.makedirs(self.p('fsroot', 'lost+found'))
        m = ckfs.Mount(store=self.p('fsroot'), mnt=self.p('mnt')).start()
        with open(m.path('f'), 'wb') as f:
            f.write(b'x')
        m.close()
        self.assertTrue(os.path.exists(self.p('fsroot', 'index.db')))


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '280')),
                                      exit=True)
    unittest.main(verbosity=2)
