#!/usr/bin/python3
"""ckptctl on a real store: status, ls, verify and gc, mounted and unmounted, text and --json,
and the exit codes (0 ok, 1 verify found damage, 2 error or usage).

Run: /usr/bin/python3 tests/tools/test_ckptctl.py   (CKPTFS_BIN / CKPTCTL_BIN name the binaries)
"""

import sys
import os

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import faulthandler  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

import ckfs  # noqa: E402
from ckfs import content  # noqa: E402

MiB = 1 << 20
HEADER = 32         # chunk file header; the payload starts here


def flip(path, off):
    with open(path, 'r+b') as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x01]))


class CkptctlTest(ckfs.CkptctlCase, unittest.TestCase):
    def setUp(self):
        # layout=none: these names would otherwise be a step and its (virtual) tracker
        self.m = ckfs.Mount(opts=('layout=none',)).start()
        m = self.m
        os.makedirs(m.path('iter_0000100'))
        self.model = content('model', 5 * MiB)
        with open(m.path('iter_0000100', 'model.pt'), 'wb') as f:
            f.write(self.model)
        with open(m.path('iter_0000100', 'copy.pt'), 'wb') as f:
            f.write(self.model)
        with open(m.path('bystander.bin'), 'wb') as f:
            f.write(content('bystander', 3 * MiB))
        with open(m.path('latest_checkpointed_iteration.txt'), 'w') as f:
            f.write('100')
        os.symlink('iter_0000100', m.path('cur'))
        m.settle()  # ckptctl reads the index: what is durable

    def tearDown(self):
        self.m.close()

    def test_status_ls_mounted_and_not(self):
        m = self.m
        st = self.ctl('status', json_out=True)
        self.assertTrue(st['mounted'])
        self.assertEqual(st['owner_pid'], m.pid)
        self.assertEqual(st['files'], 4)
        self.assertEqual(st['symlinks'], 1)
        self.assertEqual(st['logical_bytes'], 13 * MiB + 3)
        self.assertLess(st['stored_bytes'], 9 * MiB)     # the copy is deduplicated
        self.assertIn('mounted (daemon pid %d)' % m.pid, self.ctl('status').stdout)
        ents = {e['name']: e for e in self.ctl('ls', json_out=True)['entries']}
        self.assertEqual(set(ents), {'iter_0000100', 'bystander.bin', 'cur',
                                     'latest_checkpointed_iteration.txt'})
        self.assertEqual(ents['cur']['target'], 'iter_0000100')
        self.assertEqual(ents['iter_0000100']['type'], 'dir')
        f = self.ctl('ls', '/iter_0000100/model.pt', json_out=True)
        self.assertEqual(f['size'], 5 * MiB)
        self.assertEqual(sum(x['logical_bytes'] for x in f['extents']), 5 * MiB)
        self.assertEqual(len(f['xxh3_128']), 32)
        out = self.ctl('ls', 'iter_0000100').stdout
        self.assertIn('model.pt', out)
        r = self.ctl('ls', 'nope', rc=2)
        self.assertIn("'nope' does not exist in store", r.stderr)
        m.unmount()
        st = self.ctl('status', json_out=True)
        self.assertFalse(st['mounted'])
        self.assertTrue(st['stopped_cleanly'])
        self.assertIn('not mounted, clean', self.ctl('status').stdout)

    def test_ls_of_a_file_unlinked_meanwhile_is_one_snapshot(self):
        """ckptctl ls FILE on a mounted store whose daemon unlinks FILE between ls's lookup of
        the path and its read of the inode (CI of stop 54: the torture suite's ckptctl loop got
        "cannot read an inode ... No such file or directory", exit 2). ls reads one snapshot:
        the file as it was when looked up, whole."""
        m = self.m
        path = m.path('bystander.bin')
        env = dict(os.environ, CKPTFS_FAULT='ls-resolved@3000')
        p = subprocess.Popen([ckfs.ckptctl_bin(), m.store, '--json', 'ls', '/bystander.bin'],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        time.sleep(1.0)
        os.unlink(path)
        m.settle()
        self.assertFalse(os.path.exists(path))
        out, err = p.communicate(timeout=120)
        self.assertIn("at 'ls-resolved'", err)
        self.assertEqual(p.returncode, 0, out + err)
        f = json.loads(out)
        self.assertEqual(f['size'], 3 * MiB)
        self.assertEqual(sum(x['logical_bytes'] for x in f['extents']), 3 * MiB)
        r = self.ctl('ls', '/bystander.bin', rc=2)
        self.assertIn("'/bystander.bin' does not exist in store", r.stderr)

    def test_verify_tamper(self):
        m = self.m
        r = self.ctl('verify')
        self.assertIn('store is mounted by pid', r.stdout)
        m.unmount()
        self.ctl('verify')
        ext = self.ctl('ls', 'iter_0000100/model.pt', json_out=True)['extents']
        target = max(ext, key=lambda x: x['stored_bytes'])['chunk']
        cpath = os.path.join(m.store, 'chunks', target[:2], target)
        flip(cpath, HEADER + (os.path.getsize(cpath) - HEADER) // 2)
        r = self.ctl('verify', rc=1)
        self.assertIn('1 damaged chunks, 2 damaged files', r.stdout)
        self.assertIn('damaged: /iter_0000100/model.pt (chunk %s: checksum mismatch)' % target,
                      r.stdout)
        self.assertIn('damaged: /iter_0000100/copy.pt', r.stdout)
        self.assertNotIn('bystander', r.stdout)
        self.assertEqual(self.ctl('status', json_out=True)['bad_chunks'], 1)
        v = self.ctl('verify', json_out=True, rc=1)
        self.assertEqual(v['damaged_chunk_count'], 1)
        self.assertEqual(sorted(v['damaged_chunks'][0]['files']),
                         ['/iter_0000100/copy.pt', '/iter_0000100/model.pt'])
        # mounted: the same verdict, nothing recorded
        m.start()
        r = self.ctl('verify', rc=1)
        self.assertIn('not recorded', r.stdout)
        m.unmount()
        # repaired: clean again, and the mark is cleared
        flip(cpath, HEADER + (os.path.getsize(cpath) - HEADER) // 2)
        r = self.ctl('verify')
        self.assertIn('cleared 1 marks', r.stdout)
        self.assertEqual(self.ctl('status', json_out=True)['bad_chunks'], 0)
        # a missing chunk file
        os.rename(cpath, cpath + '.away')
        r = self.ctl('verify', rc=1)
        self.assertIn('missing', r.stdout)
        os.rename(cpath + '.away', cpath)
        self.ctl('verify')

    def test_gc(self):
        m = self.m
        r = self.ctl('gc')
        self.assertIn('gc: store is mounted by pid %d' % m.pid, r.stdout)
        m.unmount()
        # an orphan chunk file: a copy of a real one under a name the index does not know
        ext = self.ctl('ls', 'bystander.bin', json_out=True)['extents'][0]
        src = os.path.join(m.store, 'chunks', ext['chunk'][:2], ext['chunk'])
        orphan = os.path.join(m.store, 'chunks', ext['chunk'][:2], ext['chunk'][:2] + '0' * 30)
        with open(src, 'rb') as a, open(orphan, 'wb') as b:
            b.write(a.read())
        g = self.ctl('gc', json_out=True)
        self.assertTrue(g['swept'])
        self.assertEqual(g['chunks_removed'], 1)
        self.assertEqual(g['freed_bytes'], os.path.getsize(src))
        self.assertFalse(os.path.exists(orphan))
        self.ctl('verify')

    def test_gc_dry_run(self):
        """Issue 40: gc --dry-run on an unmounted store says what a sweep would remove (the
        same keys as a sweep's --json) and removes nothing; the sweep after it removes exactly
        that. While mounted it is accepted and only counts, as gc does."""
        m = self.m
        # garbage of both kinds: an inode unlinked while open when its daemon died (it and its
        # chunks), and a chunk file the index does not know
        doomed = content('doomed', 3 * MiB)
        with open(m.path('doomed.bin'), 'wb') as f:
            f.write(doomed)
        m.settle()
        held = open(m.path('doomed.bin'), 'rb')
        os.unlink(m.path('doomed.bin'))
        m.kill_daemon()
        held.close()
        ext = self.ctl('ls', 'bystander.bin', json_out=True)['extents'][0]
        src = os.path.join(m.store, 'chunks', ext['chunk'][:2], ext['chunk'])
        orphan = os.path.join(m.store, 'chunks', ext['chunk'][:2], ext['chunk'][:2] + '0' * 30)
        with open(src, 'rb') as a, open(orphan, 'wb') as b:
            b.write(a.read())
        before = ckfs.chunk_files(m.store)
        dry = self.ctl('gc', '--dry-run', json_out=True)
        self.assertEqual(ckfs.chunk_files(m.store), before, 'gc --dry-run removed chunk files')
        self.assertFalse(dry['swept'])
        self.assertEqual(dry['inodes_removed'], 1, dry)
        self.assertGreaterEqual(dry['chunks_removed'], 2, dry)
        text = self.ctl('gc', '--dry-run').stdout
        self.assertIn('would remove 1 unlinked inodes and %d chunks' % dry['chunks_removed'],
                      text)
        self.assertIn('nothing removed', text)
        self.assertEqual(ckfs.chunk_files(m.store), before, 'gc --dry-run removed chunk files')
        real = self.ctl('gc', json_out=True)
        self.assertTrue(real['swept'])
        self.assertEqual(set(dry), set(real))
        for k in ('inodes_removed', 'chunks_removed', 'freed_bytes', 'chunk_files',
                  'chunk_bytes'):
            self.assertEqual(dry[k], real[k], k)
        after = ckfs.chunk_files(m.store)
        self.assertEqual(real['freed_bytes'], sum(before.values()) - sum(after.values()))
        # chunk files are named by their 32-hex-digit digest (the store keeps others, such as
        # emptied files it reuses)
        def named(files):
            return [k for k in files if len(os.path.basename(k)) == 32]
        self.assertEqual(len(named(before)) - len(named(after)), real['chunks_removed'])
        self.assertEqual(len(named(after)), real['chunk_files'])
        self.assertFalse(os.path.exists(orphan))
        self.ctl('verify')
        # mounted: accepted, and counts what is left (nothing now)
        m.start()
        r = self.ctl('gc', '--dry-run')
        self.assertIn('gc: store is mounted by pid %d' % m.pid, r.stdout)
        g = self.ctl('gc', '--dry-run', json_out=True)
        self.assertEqual((g['swept'], g['unreferenced_chunk_files']), (False, 0))
        self.ctl('status', '--dry-run', rc=2)

    def test_mount_point_names_the_store(self):
        """Issue 40.5: 'ckptctl MOUNTPOINT status' failed with 'is this a ckptfs store?'."""
        m = self.m
        for root in (m.mnt, m.mnt + '/'):
            r = ckfs.run([ckfs.ckptctl_bin(), '--json', root, 'status'], timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            st = json.loads(r.stdout)
            self.assertEqual(os.path.realpath(st['store']), os.path.realpath(m.store))
            self.assertEqual(st['owner_pid'], m.pid)

    def lost_index_refused(self, what):
        """Every way in refuses the store, names fsck --rebuild and leaves every chunk file."""
        m = self.m
        before = ckfs.chunk_files(m.store)
        self.assertGreater(len(before), 0)
        for args in (('verify',), ('fsck',), ('status',), ('gc',)):
            r = self.ctl(*args, rc=2)
            self.assertIn('is missing or empty', r.stderr, (what, args))
            self.assertIn('fsck --rebuild', r.stderr, (what, args))
        with self.assertRaises(ckfs.MountError) as e:
            m.start()
        self.assertIn('fsck --rebuild', str(e.exception))
        self.assertEqual(ckfs.chunk_files(m.store), before, what)
        return before

    def test_lost_index_refused_then_restored(self):
        """Issue 42.1: with index.db removed or emptied, verify made a new empty index and fsck
        deleted every chunk. Now each refuses; fsck --rebuild restores the backup of the last
        clean unmount and keeps the chunks written after it in lost+found."""
        m = self.m
        m.unmount()                       # the backup of this state: index.db.bak
        self.assertTrue(os.path.exists(os.path.join(m.store, 'index.db.bak')))
        m.start()
        later = content('later', 3 * MiB)   # written after the backup: not in it
        with open(m.path('later.bin'), 'wb') as f:
            f.write(later)
        m.settle()
        m.kill_daemon()                   # no clean unmount: the backup stays the old one
        os.unlink(os.path.join(m.store, 'index.db'))
        before = self.lost_index_refused('removed')
        with open(os.path.join(m.store, 'index.db'), 'wb'):
            pass                          # an empty file is refused the same way
        self.lost_index_refused('emptied')
        r = self.ctl('fsck', '--rebuild', rc=1)   # 1: something was lost, and said
        self.assertIn("restored '%s/index.db.bak'" % m.store, r.stdout)
        self.assertIn('lost+found', r.stdout)
        # nothing deleted: every chunk file is in the store or in lost+found
        aside = os.listdir(os.path.join(m.store, 'lost+found'))
        self.assertGreater(len(aside), 0)
        now = ckfs.chunk_files(m.store)
        self.assertEqual({os.path.basename(k) for k in before},
                         {os.path.basename(k) for k in now} | set(aside))
        # the restored index serves the files of the backup, bit-exact
        m.start()
        with open(m.path('iter_0000100', 'model.pt'), 'rb') as f:
            self.assertEqual(f.read(), self.model)
        self.assertFalse(os.path.exists(m.path('later.bin')))
        # the later file's bytes are in lost+found's chunk files, not lost
        self.ctl('verify')

    def test_lost_index_without_backup(self):
        """No backup (the store never unmounted cleanly): fsck --rebuild starts a new index and
        moves every chunk file to lost+found, deleting none."""
        m = self.m
        m.kill_daemon()
        os.unlink(os.path.join(m.store, 'index.db'))
        before = self.lost_index_refused('removed, no backup')
        r = self.ctl('fsck', '--rebuild', rc=1)
        self.assertIn('no backup', r.stdout)
        aside = set(os.listdir(os.path.join(m.store, 'lost+found')))
        self.assertEqual({os.path.basename(k) for k in before}, aside)
        self.assertEqual(ckfs.chunk_files(m.store), {})
        m.start()                         # an empty filesystem, now said and chosen
        self.assertEqual(os.listdir(m.mnt), [])

    def test_usage_and_errors(self):
        m = self.m
        self.assertEqual(ckfs.run([ckfs.ckptctl_bin(), '--version']).returncode, 0)
        self.assertEqual(ckfs.run([ckfs.ckptctl_bin()]).returncode, 2)
        self.ctl('frobnicate', rc=2)
        self.ctl('ls', 'a', 'b', rc=2)
        r = ckfs.run([ckfs.ckptctl_bin(), os.path.join(m.tmp, 'absent'), 'status'])
        self.assertEqual(r.returncode, 2)
        self.assertTrue(r.stderr.startswith('ckptctl: '), r.stderr)
        # a store never mounted with -o remote has no remote to show: say how to get one
        r = self.ctl('remote', rc=2)
        self.assertIn('-o remote=URL', r.stderr)
        self.ctl('remote', 'frobnicate', rc=2)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
