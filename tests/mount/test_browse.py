#!/usr/bin/python3
"""Every kept step browsable read-only under MOUNTPOINT/.ckptfs/snapshots (issue 44; view.c):
the view lists the complete steps, each file reads back the bytes written (through the verified
read path: a damaged chunk is EIO), a step with a kept version shows both versions, every change
through the view is EROFS, browsing changes no step, and a step retention prunes leaves the view
and its chunks are freed even though it was browsed.

Run: /usr/bin/python3 tests/mount/test_browse.py
"""

import sys

sys.dont_write_bytecode = True

import errno  # noqa: E402
import faulthandler  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import content  # noqa: E402

MiB = 1 << 20
TRACKER = 'latest_checkpointed_iteration.txt'
SHARD = os.path.join('mp_rank_00', 'model_optim_rng.pt')
HEADER = 32         # chunk file header; the payload starts here (test_tamper.py)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def save(m, it, key=None, size=None):
    """A Megatron-like save of iteration it: the shard, an args file and a symlink in the step
    directory, then the tracker. Returns {relative path: bytes} of the step's regular files."""
    d = m.path('iter_%07d' % it)
    os.makedirs(os.path.join(d, 'mp_rank_00'))
    files = {SHARD: content(key or 'browse-%d' % it, size or 3 * MiB + it),
             'args.json': b'{"iteration": %d}' % it}
    for rel, b in files.items():
        with open(os.path.join(d, rel), 'wb') as f:
            f.write(b)
    os.symlink(SHARD, os.path.join(d, 'shard.pt'))
    with open(m.path(TRACKER), 'w') as f:
        f.write(str(it))
    return files


def read_until_error(path):
    """(bytes read before the first error, OSError or None)"""
    got = []
    with open(path, 'rb', buffering=0) as f:
        while True:
            try:
                b = f.read(256 * 1024)
            except OSError as e:
                return b''.join(got), e
            if not b:
                return b''.join(got), None
            got.append(b)


class BrowseTest(unittest.TestCase, ckfs.CkptctlCase):

    def setUp(self):
        self.m = None

    def tearDown(self):
        if self.m:
            self.m.close()

    def mount(self, *opts):
        self.m = ckfs.Mount(opts=opts)
        self.m.start()
        return self.m

    def view(self, *parts):
        return self.m.path('.ckptfs', 'snapshots', *parts)

    def steps(self):
        return {s['id']: s for s in self.ctl('steps', json_out=True)['steps']}

    def assert_step_bytes(self, vname, files):
        for rel, b in files.items():
            p = self.view(vname, rel)
            self.assertEqual(os.stat(p).st_size, len(b), p)
            self.assertEqual(sha(ckfs.read_bytes(p)), sha(b), 'wrong bytes in %s' % p)

    def test_1_lists_and_reads(self):
        """The view lists each complete step and nothing else; each file, its size and a
        symlink read back what was written; the root's listing still leaves .ckptfs out."""
        m = self.mount()
        s2 = save(m, 2)
        s4 = save(m, 4)
        os.makedirs(m.path('iter_0000006', 'mp_rank_00'))   # being written: not in the view
        with open(m.path('iter_0000006', SHARD), 'wb') as f:
            f.write(b'partial')
        m.settle()
        self.assertIn('snapshots', os.listdir(m.path('.ckptfs')))
        self.assertNotIn('.ckptfs', os.listdir(m.path()))
        self.assertEqual(sorted(os.listdir(self.view())), ['iter_0000002', 'iter_0000004'])
        self.assertEqual(sorted(os.listdir(self.view('iter_0000002'))),
                         ['args.json', 'mp_rank_00', 'shard.pt'])
        self.assert_step_bytes('iter_0000002', s2)
        self.assert_step_bytes('iter_0000004', s4)
        self.assertEqual(os.readlink(self.view('iter_0000004', 'shard.pt')), SHARD)
        os.setxattr(m.path('iter_0000004', 'args.json'), 'user.note', b'kept')
        self.assertEqual(os.getxattr(self.view('iter_0000004', 'args.json'), 'user.note'), b'kept')
        self.assertIn('user.note', os.listxattr(self.view('iter_0000004', 'args.json')))
        self.assertEqual(ckfs.read_bytes(self.view('iter_0000004', 'shard.pt')), s4[SHARD])
        st = os.stat(self.view('iter_0000004', SHARD))
        self.assertNotEqual(st.st_ino, os.stat(m.path('iter_0000004', SHARD)).st_ino,
                            'the view shares inode numbers with the namespace')
        with self.assertRaises(FileNotFoundError):
            os.stat(self.view('iter_0000006'))
        # a `du` of the mount is what it was without the view
        r = ckfs.run(['du', '-s', '--apparent-size', '-B1', m.path()], check=True)
        self.assertLess(int(r.stdout.split()[0]), 2 * (6 * MiB + 64 * 1024),
                        'du counts the view: %s' % r.stdout)

    def test_1b_link_counts_and_slots(self):
        """POSIX link counts hold with the view: /.ckptfs counts snapshots among its
        subdirectories and snapshots counts its steps (CI at e63709b: test_scenarios'
        dir_link_errors found '.ckptfs: nlink 4, 3 subdirectories'). An InternEvo slot, whose
        step name holds a '/', is left out of the listing (a READDIR entry with a '/' makes the
        kernel fail the whole listing with EIO), and the other steps stay listed."""
        m = self.mount()
        save(m, 2)
        save(m, 4)
        d = m.path('snapshot', '0')
        os.makedirs(d)
        with open(os.path.join(d, 'model_tp0_pp0.pt'), 'wb') as f:
            f.write(content('slot', 4096))
        with open(os.path.join(d, '6.step'), 'wb') as f:
            f.write(b'step 6')
        m.settle()
        ckfs.wait_for('steps complete', lambda: sorted(os.listdir(self.view())) ==
                      ['iter_0000002', 'iter_0000004'], extra=m.status_text)
        self.assertEqual(ckfs.dir_link_errors(m.mnt), [])
        self.assertEqual(os.lstat(self.view()).st_nlink, 4)

    def test_2_read_only(self):
        """Every change through the view is EROFS, and browsing changes no step."""
        m = self.mount()
        s2 = save(m, 2)
        m.settle()
        before = self.steps()
        d = self.view('iter_0000002')
        f = self.view('iter_0000002', SHARD)
        attempts = [
            ('open for writing', lambda: os.open(f, os.O_WRONLY)),
            ('open read-write', lambda: os.open(f, os.O_RDWR)),
            ('open with O_TRUNC', lambda: os.open(f, os.O_RDONLY | os.O_TRUNC)),
            ('create', lambda: os.open(os.path.join(d, 'new'), os.O_WRONLY | os.O_CREAT, 0o644)),
            ('mkdir', lambda: os.mkdir(os.path.join(d, 'newdir'))),
            ('mkdir in snapshots', lambda: os.mkdir(self.view('iter_0000009'))),
            ('symlink', lambda: os.symlink('x', os.path.join(d, 'link'))),
            ('unlink', lambda: os.unlink(f)),
            ('rmdir', lambda: os.rmdir(os.path.join(d, 'mp_rank_00'))),
            ('rmdir a step', lambda: os.rmdir(d)),
            ('rename', lambda: os.rename(f, os.path.join(d, 'moved'))),
            ('rename out', lambda: os.rename(f, m.path('moved'))),
            ('rename in', lambda: os.rename(m.path(TRACKER), os.path.join(d, 't'))),
            ('link', lambda: os.link(f, m.path('hard'))),
            ('truncate', lambda: os.truncate(f, 0)),
            ('chmod', lambda: os.chmod(f, 0o600)),
            ('utime', lambda: os.utime(f, (0, 0))),
            ('setxattr', lambda: os.setxattr(f, 'user.x', b'1')),
        ]
        for what, op in attempts:
            with self.subTest(what):
                with self.assertRaises(OSError) as cm:
                    op()
                self.assertEqual(cm.exception.errno, errno.EROFS, '%s: %s' % (what, cm.exception))
        self.assert_step_bytes('iter_0000002', s2)
        self.assertEqual(ckfs.read_bytes(m.path('iter_0000002', SHARD)), s2[SHARD])
        after = self.steps()
        self.assertEqual({i: (s['state'], s.get('pinned')) for i, s in before.items()},
                         {i: (s['state'], s.get('pinned')) for i, s in after.items()})

    def test_3_versions(self):
        """A step rewritten in place keeps its complete version: while the rewrite runs the
        view shows the kept version's bytes; once the new version completes, a pinned kept
        version stays, and the view shows both, each with its own bytes."""
        m = self.mount()
        old = save(m, 2)
        save(m, 4)
        m.settle()
        self.ctl('pin', '2')
        new = content('browse-2-again', 2 * MiB + 5)
        with open(m.path('iter_0000002', SHARD), 'r+b') as f:
            f.truncate(0)
            f.write(new)
        m.settle()
        # the rewrite is unsealed: the kept, complete version is what the view shows
        self.assertEqual(sorted(os.listdir(self.view())), ['iter_0000002', 'iter_0000004'])
        self.assert_step_bytes('iter_0000002', old)
        self.assertEqual(ckfs.read_bytes(m.path('iter_0000002', SHARD)), new)
        with open(m.path(TRACKER), 'w') as f:      # the trainer's claim seals the new version
            f.write('2')
        m.settle()
        names = sorted(os.listdir(self.view()))
        kept = [s for s in self.steps().values()
                if s['name'] == 'iter_0000002' and s['state'] == 'complete']
        self.assertEqual(len(kept), 2, 'two complete versions of step 2: %s' % self.steps())
        older = min(s['id'] for s in kept)
        self.assertEqual(names, ['iter_0000002', 'iter_0000002@%d' % older, 'iter_0000004'])
        self.assert_step_bytes('iter_0000002', dict(old, **{SHARD: new}))
        self.assert_step_bytes('iter_0000002@%d' % older, old)

    def test_4_retention(self):
        """A step retention prunes leaves the view; having browsed it keeps no chunk: they are
        freed as if nobody had. A file open in the view goes on reading its bytes until its
        close, as an open file of the step at its name does; then its chunks go too."""
        m = self.mount('keep_checkpoint_max=1')
        s2 = save(m, 2)
        m.settle()
        chunks_2 = set(ckfs.chunk_files(m.store))
        self.assert_step_bytes('iter_0000002', s2)           # browsed: looked up, read, listed
        os.listdir(self.view('iter_0000002', 'mp_rank_00'))
        fd = os.open(self.view('iter_0000002', SHARD), os.O_RDONLY)
        try:
            head = os.pread(fd, MiB, 0)
            save(m, 4)
            m.settle()
            self.assertEqual(os.listdir(self.view()), ['iter_0000004'])
            with self.assertRaises(FileNotFoundError):
                os.stat(self.view('iter_0000002', SHARD))
            # as an open file of the step at its name: it holds its inode and chunks
            rest = os.pread(fd, 4 * MiB, len(head))
            self.assertEqual(head + rest, s2[SHARD], 'an open file read other bytes')
            self.assertEqual(os.fstat(fd).st_size, len(s2[SHARD]))
        finally:
            os.close(fd)
        m.settle()
        steps = [s for s in self.steps().values() if s['name'] == 'iter_0000002']
        self.assertEqual([s['state'] for s in steps], ['pruned'])
        left = chunks_2 & set(ckfs.chunk_files(m.store))
        self.assertFalse(left, 'chunks of the pruned step 2 kept after browsing it: %s' % left)

    def test_5_damaged_chunk(self):
        """A damaged chunk of a step reads as EIO through the view, never as other bytes."""
        m = self.mount()
        s2 = save(m, 2, size=6 * MiB + 123)
        m.unmount()
        mine = ckfs.chunk_files(m.store)
        m.start()
        save(m, 4)                    # the newest step: the one the mount checks
        m.unmount()
        target = max(mine, key=lambda c: mine[c])
        size = mine[target]
        off = HEADER + (size - HEADER) // 2
        with open(os.path.join(m.store, 'chunks', target), 'r+b') as f:
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0x01]))
        m.start()
        got, err = read_until_error(self.view('iter_0000002', SHARD))
        self.assertEqual(got, s2[SHARD][:len(got)], 'the view read other bytes instead of EIO')
        self.assertIsNotNone(err, 'a damaged chunk read through the view without an error')
        self.assertEqual(err.errno, errno.EIO, err)


    def test_6_other_lineage_and_retained(self):
        """A step of another lineage (left above a rollback) and the newest step kept in
        .ckptfs/retained after the trainer deleted it are in the view, with their bytes."""
        m = self.mount()
        s2 = save(m, 2)
        s4 = save(m, 4)
        with open(m.path(TRACKER), 'w') as f:      # a rollback: step 4 is another lineage
            f.write('2')
        m.settle()
        self.assertEqual(m.read_text(TRACKER), '2')
        other = [s for s in self.steps().values() if s['name'] == 'iter_0000004']
        self.assertTrue(other and other[0].get('other_lineage'), other)
        s6 = save(m, 6)
        m.settle()
        # the trainer deletes it (no tracker read after: one would bring it back, as .ckptfs/
        # status does, which names where a resume lands)
        ckfs.run(['rm', '-rf', m.path('iter_0000006')], check=True)
        self.assertFalse(os.path.exists(m.path('iter_0000006')))
        self.assertEqual([n.split('.')[0] for n in os.listdir(m.path('.ckptfs', 'retained'))],
                         ['iter_0000006'])
        self.assertEqual(sorted(os.listdir(self.view())),
                         ['iter_0000002', 'iter_0000004', 'iter_0000006'])
        self.assert_step_bytes('iter_0000002', s2)
        self.assert_step_bytes('iter_0000004', s4)
        self.assert_step_bytes('iter_0000006', s6)

if __name__ == '__main__':
    faulthandler.enable()
    unittest.main()
