#!/usr/bin/python3
"""Store paths (issue 42 item 3): the daemon never follows a symbolic link inside STORE, and a
STORE owned by another user is refused unless -o allow_foreign_store says to trust its owner.

The owner of a store directory can plant STORE/lock -> /some/root/file; a root mount that
followed it would write its pid there. Each file and directory the daemon opens in STORE is
planted, in turn, as a link to a victim outside the store (an existing file, and a name that
does not exist yet); the mount must refuse or go around the link, and the victims must be
exactly as they were: same bytes, same mode, nothing created next to them, and no descriptor
of the daemon on them.

Run as root (the test chowns a store to another uid): /usr/bin/python3 tests/mount/test_storepaths.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402

NOBODY = 65534
# every name the daemon opens, creates, renames or unlinks at the top of STORE, with the kind
# of victim that a link there would be aimed at
FILES = ('lock', 'clean', 'reserve', 'reserve.tmp', 'check', 'ckptfs.log', 'index.db',
         'index.db-wal', 'index.db-shm')
DIRS = ('staging', 'chunks')


def snapshot(top):
    """{relative path: (mode, size, sha256 of a file's bytes)} of everything under top."""
    out = {}
    for d, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            h = None
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, 'rb') as f:
                    h = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(p, top)] = (st.st_mode, st.st_size, h)
    return out


def daemon_fds_into(pid, top):
    """The daemon's descriptors that resolve to a path under top."""
    bad = []
    fddir = '/proc/%d/fd' % pid
    for n in os.listdir(fddir):
        try:
            t = os.readlink(os.path.join(fddir, n))
        except OSError:
            continue
        if t == top or t.startswith(top + '/'):
            bad.append('fd %s -> %s' % (n, t))
    return bad


def require_root(case):
    if os.geteuid() != 0:
        case.fail('this test must run as root: it chowns a store to uid %d and checks that a '
                  'root mount does not write through links its owner planted' % NOBODY)


class StorePathsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        ckfs.check_fuse_usable()
        cls.tmp = tempfile.mkdtemp(prefix='ckptfs-storepaths-', dir=ckfs.test_tmp_root())
        # a store that was mounted once and written to: every file exists
        cls.base = os.path.join(cls.tmp, 'base')
        with ckfs.Mount(store=cls.base) as m:
            with open(m.path('a.bin'), 'wb') as f:
                f.write(ckfs.content('a', 3 << 20))
                os.fsync(f.fileno())

    @classmethod
    def tearDownClass(cls):
        if not ckfs.keep_tmp():
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def fresh_store(self, name):
        store = os.path.join(self.tmp, name)
        shutil.copytree(self.base, store, symlinks=True)
        return store

    def test_foreign_store_is_refused(self):
        require_root(self)
        store = self.fresh_store('foreign')
        os.chown(store, NOBODY, NOBODY)
        m = ckfs.Mount(store=store)
        try:
            with self.assertRaises(ckfs.MountError) as cm:
                m.start()
            msg = str(cm.exception)
            self.assertIn('allow_foreign_store', msg)
            self.assertIn(str(NOBODY), msg)
            # ckptctl: writing (exclusive) commands are refused, reading ones work
            r = ckfs.ckptctl(store, 'gc')
            self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn('owned by uid %d' % NOBODY, r.stderr)
            r = ckfs.ckptctl(store, 'ls')
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn('a.bin', r.stdout)
        finally:
            m.close()
        with ckfs.Mount(store=store, opts=('allow_foreign_store',)) as m:
            self.assertEqual(ckfs.read_bytes(m.path('a.bin')), ckfs.content('a', 3 << 20))

    def test_links_in_store_are_not_followed(self):
        for name in FILES + DIRS:
            for dangling in (False, True):
                with self.subTest(name=name, dangling=dangling):
                    self.check_link(name, dangling, foreign=False)

    def test_links_in_foreign_store_are_not_followed(self):
        """allow_foreign_store trusts the owner not to race the daemon, not to plant links."""
        require_root(self)
        for name in ('lock', 'check', 'ckptfs.log', 'index.db'):
            with self.subTest(name=name):
                self.check_link(name, True, foreign=True)

    def check_link(self, name, dangling, foreign):
        tag = '%s-%s%s' % (name, 'dangling' if dangling else 'existing',
                           '-foreign' if foreign else '')
        store = self.fresh_store('s-' + tag)
        victims = os.path.join(self.tmp, 'v-' + tag)
        os.mkdir(victims)
        target = os.path.join(victims, 'victim')
        if not dangling:
            if name in DIRS:
                os.mkdir(target, 0o700)
            elif name.startswith('index.db'):
                shutil.copy(os.path.join(store, 'index.db'), target)
            else:
                with open(target, 'wb') as f:
                    f.write(b'root-owned file, must not change\n')
                os.chmod(target, 0o600)
        p = os.path.join(store, name)
        if name == 'reserve.tmp':
            os.unlink(os.path.join(store, 'reserve'))  # so that the mount makes a new one
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)
        os.symlink(target, p)
        if foreign:
            os.chown(store, NOBODY, NOBODY)
        before = snapshot(victims)
        m = ckfs.Mount(store=store, opts=('allow_foreign_store',) if foreign else ())
        try:
            try:
                m.start()
            except ckfs.MountError as e:
                self.assertIn('symbolic link', str(e), 'refused, but not for the link')
            else:
                self.assertEqual(daemon_fds_into(m.pid, victims), [],
                                 'the daemon has the victim open')
                with open(m.path('b.bin'), 'wb') as f:
                    f.write(ckfs.content('b', 1 << 20))
                    os.fsync(f.fileno())
                # a name the daemon removed (clean at mount) is planted again for the unmount
                if not os.path.lexists(p):
                    os.symlink(os.path.join(victims, 'late'), p)
                m.unmount()
        finally:
            m.close()
        self.assertEqual(snapshot(victims), before, 'the victim changed through STORE/' + name)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
