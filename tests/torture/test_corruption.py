#!/usr/bin/python3
"""Corruption of the store at rest: chunk files with flipped bytes, truncated or deleted, and
pages of the SQLite index overwritten with random bytes. Each fault is injected into its own copy
of one pristine store (Megatron-LM layout, steps 2 4 6 8, 2 ranks, real torch.save files).

Chunk faults (flip / truncate / delete, CKPTFS_CORRUPT_ROUNDS rounds each, default 3, 1-3 chunks
per round, random files; the seed is printed):
  - `ckptctl verify` exits 1 and names exactly the files that use a damaged chunk (every injected
    fault detected: the count is printed as `faults: I injected, D detected`);
  - mounted, reading a damaged file fails with EIO (never wrong bytes), every other file is
    bit-exact, and the tracker names the newest step none of whose files is damaged;
  - `ckptctl fsck` (unmounted) exits 1 and names the same files; the store still mounts after it.
Index faults (a page of the table of extents, inodes, dentries, steps, a random page, and each
page in turn):
  - a page that is the whole of an empty b-tree (the partial index chunks_bad, while no chunk
    is marked bad) keeps its header, "no cells", and SQLite never reads the rest: the store
    mounts with every file bit-exact and verify finds it whole. Any other page:
  - the daemon refuses to mount, naming `ckptctl ... fsck`; `ckptctl verify` exits 1 naming the
    index; `ckptctl fsck` rebuilds it (exit 1, losses printed), keeps the damaged file aside;
  - mounted again: every file that is listed reads back bit-exact or fails with EIO (never wrong
    bytes), the tracker names a complete step whose files are all bit-exact, and verify after
    fsck agrees with what reads back.

Environment: CKPTFS_BIN, CKPTCTL_BIN (see ../lib/ckfs.py), CKPTFS_CORRUPT_ROUNDS (3),
CKPTFS_CRASH_SEED (random; printed), CKPTFS_KEEP=1.
Run: /usr/bin/python3 tests/torture/test_corruption.py [-v]
"""

import sys

sys.dont_write_bytecode = True

import errno  # noqa: E402
import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import sqlite3  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import TRACKER  # noqa: E402
import torch  # noqa: E402

STEPS = (2, 4, 6, 8)
RANKS = 2
ROUNDS = int(os.environ.get('CKPTFS_CORRUPT_ROUNDS', '3'))
SEED = int(os.environ.get('CKPTFS_CRASH_SEED') or random.SystemRandom().randrange(1 << 30))
TOTALS = {'injected': 0, 'detected': 0, 'eio_reads': 0, 'wrong_reads': 0}
SUMMARY = []


def rank_path(step, rank):
    return 'iter_%07d/mp_rank_%02d/model_optim_rng.pt' % (step, rank)


def read_outcome(path, want):
    """'ok', 'eio', or 'WRONG' (bytes that differ: never acceptable)."""
    try:
        h = ckfs.sha256_file(path)
    except OSError as e:
        if e.errno == errno.EIO:
            return 'eio'
        raise
    return 'ok' if h == want else 'WRONG'


def ctl(store, *args, json_out=False):
    return ckfs.ckptctl(store, *args, json_out=json_out)


class TestCorruption(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        print('corruption seed: CKPTFS_CRASH_SEED=%d, rounds %d' % (SEED, ROUNDS), flush=True)
        cls.top = tempfile.mkdtemp(prefix='ckptfs-test-corrupt-', dir=ckfs.test_tmp_root())
        cls.written = {}
        with ckfs.Mount() as m:
            for step in STEPS:
                for r in range(RANKS):
                    p = m.path(rank_path(step, r))
                    os.makedirs(os.path.dirname(p), exist_ok=True)
                    g = torch.Generator().manual_seed(step * 10 + r)
                    torch.save({'w': torch.randn(300, 1000, generator=g), 'it': step}, p)
                    cls.written[rank_path(step, r)] = ckfs.sha256_file(p)
                    # an extended attribute, so the xattrs table (schema v3) has live pages:
                    # an empty table's page overwritten past its header is still a valid page
                    os.setxattr(p, 'user.ckptfs.test', b'step %d rank %d' % (step, r))
                with open(m.path(TRACKER), 'w') as f:
                    f.write(str(step))
                deadline = time.monotonic() + 30
                while ckfs.read_bytes(m.path(TRACKER)) != str(step).encode():
                    assert time.monotonic() < deadline, 'step %d never completed' % step
                    time.sleep(0.05)
            m.unmount()
            cls.pristine = os.path.join(cls.top, 'pristine')
            shutil.copytree(m.store, cls.pristine, symlinks=True)
        # which chunks each file uses
        cls.chunks_of = {}
        for rel in cls.written:
            p = ctl(cls.pristine, 'ls', '/' + rel, json_out=True)
            assert p.returncode == 0, p.stdout + p.stderr
            cls.chunks_of[rel] = [e['chunk'] for e in json.loads(p.stdout)['extents']]

    @classmethod
    def tearDownClass(cls):
        if not ckfs.keep_tmp():
            shutil.rmtree(cls.top, ignore_errors=True)
        print('\n' + '\n'.join(SUMMARY), flush=True)
        print('faults: %d injected, %d detected by verify; reads of damaged data: %d EIO, %d '
              'wrong bytes' % (TOTALS['injected'], TOTALS['detected'], TOTALS['eio_reads'],
                               TOTALS['wrong_reads']), flush=True)

    def copy_store(self, name):
        dst = os.path.join(self.top, name)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(self.pristine, dst, symlinks=True)
        os.chmod(dst, 0o700)
        return dst

    @staticmethod
    def steps_of(store):
        p = ctl(store, 'steps', json_out=True)
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(p.stdout)['steps']

    @staticmethod
    def chunk_path(store, h):
        return os.path.join(store, 'chunks', h[:2], h)

    # -- checks on a mounted store ----------------------------------------------------------

    def check_mounted(self, store, damaged_files, extra_ok_missing=False):
        """Mount store; reads: damaged -> EIO, others bit-exact; tracker -> newest step with no
        damaged file. Returns (eio count, tracker step)."""
        m = ckfs.Mount(store=store)
        m.start()
        try:
            eio = 0
            states = {st['step']: st['state'] for st in self.steps_of(m.store)}
            bad_steps = {int(rel[5:12]) for rel in damaged_files}
            for rel, want in sorted(self.written.items()):
                p = m.path(rel)
                if not os.path.exists(p):
                    # a step found damaged leaves the listing whole (quarantined)
                    self.assertTrue(extra_ok_missing or int(rel[5:12]) in bad_steps,
                                    '%s vanished' % rel)
                    self.assertNotEqual(states.get(int(rel[5:12])), 'complete',
                                        '%s is not listed but its step is complete' % rel)
                    continue
                out = read_outcome(p, want)
                if out == 'WRONG':
                    TOTALS['wrong_reads'] += 1
                self.assertNotEqual(out, 'WRONG', '%s read back WRONG bytes' % rel)
                if rel in damaged_files:
                    self.assertEqual(out, 'eio', '%s uses a damaged chunk but read %s' %
                                     (rel, out))
                    eio += 1
                    TOTALS['eio_reads'] += 1
                elif not extra_ok_missing:
                    self.assertEqual(out, 'ok', '%s is intact but read %s' % (rel, out))
            with open(m.path(TRACKER)) as f:
                tracker = int(f.read())
            self.assertNotIn(tracker, bad_steps, 'tracker names step %d, which has damaged '
                             'files' % tracker)
            for r in range(RANKS):
                rel = rank_path(tracker, r)
                self.assertEqual(read_outcome(m.path(rel), self.written[rel]), 'ok',
                                 'the tracker names step %d but %s does not read back' %
                                 (tracker, rel))
            if not extra_ok_missing:
                good = [s for s in STEPS if s not in bad_steps]
                self.assertEqual(tracker, max(good), 'tracker %d, newest intact step %d' %
                                 (tracker, max(good)))
            m.unmount()
        finally:
            m.close()
        return eio, tracker

    # -- chunk faults ----------------------------------------------------------------------

    def chunk_fault(self, kind):
        rng = random.Random('%d-%s' % (SEED, kind))
        for rnd in range(ROUNDS):
            store = self.copy_store('%s-%d' % (kind, rnd))
            files = rng.sample(sorted(self.written), rng.randint(1, 3))
            hit = set()
            for rel in files:
                h = rng.choice(self.chunks_of[rel])
                if h in hit:
                    continue
                hit.add(h)
                p = self.chunk_path(store, h)
                size = os.path.getsize(p)
                if kind == 'flip':
                    off = rng.randrange(size // 2, size)
                    with open(p, 'r+b') as f:
                        f.seek(off)
                        b = f.read(1)
                        f.seek(off)
                        f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
                elif kind == 'truncate':
                    os.truncate(p, rng.randrange(0, size))
                else:
                    os.unlink(p)
            damaged = {rel for rel, hs in self.chunks_of.items() if hit & set(hs)}
            TOTALS['injected'] += len(hit)
            v = ctl(store, 'verify', json_out=True)
            self.assertEqual(v.returncode, 1, 'verify missed %s: %s%s' % (kind, v.stdout,
                                                                           v.stderr))
            vj = json.loads(v.stdout)
            found = {d['path'].lstrip('/') for d in vj['damaged_files']}
            bad_chunks = {d['chunk'] if isinstance(d, dict) else d
                          for d in vj['damaged_chunks']}
            self.assertEqual(found, damaged, 'verify named %s, damaged: %s' % (found, damaged))
            detected = len(hit & {c if isinstance(c, str) else c.get('chunk')
                                  for c in bad_chunks}) if bad_chunks else 0
            TOTALS['detected'] += detected
            self.assertEqual(detected, len(hit), 'verify found %d of %d damaged chunks: %s' %
                             (detected, len(hit), vj['damaged_chunks']))
            eio, tracker = self.check_mounted(store, damaged)
            f = ctl(store, 'fsck')
            self.assertEqual(f.returncode, 1, 'fsck after %s: %s%s' % (kind, f.stdout,
                                                                      f.stderr))
            named = [ln for ln in f.stdout.splitlines() if ln.startswith('damaged:')]
            for rel in damaged:
                d, sub = rel.split('/', 1)   # the step may now be under .ckptfs/quarantine
                self.assertTrue([ln for ln in named if d in ln and sub in ln],
                                'fsck did not name %s: %s' % (rel, f.stdout))
            self.check_mounted(store, damaged)
            SUMMARY.append('corrupt %-8s round %d: %d chunks in %d files; verify found all, '
                           '%d EIO reads, tracker on %d (newest intact)' %
                           (kind, rnd + 1, len(hit), len(damaged), eio, tracker))
            if not ckfs.keep_tmp():
                shutil.rmtree(store, ignore_errors=True)

    def test_chunk_flip(self):
        self.chunk_fault('flip')

    def test_chunk_truncate(self):
        self.chunk_fault('truncate')

    def test_chunk_delete(self):
        self.chunk_fault('delete')

    # -- index faults ----------------------------------------------------------------------

    def index_fault(self, table, page=None):
        """Overwrite one page of a copy of the pristine index (a page of table, or the given
        page number) with random bytes, and check refusal, verify, fsck and the remount."""
        rng = random.Random('%d-%s' % (SEED, table))
        store = self.copy_store('index-%s' % table)
        db = os.path.join(store, 'index.db')
        # fold any WAL (a reader leaves one) into the file, so the page overwritten is live
        c = sqlite3.connect(db)
        c.execute('PRAGMA wal_checkpoint(TRUNCATE)')
        c.close()
        for sfx in ('-wal', '-shm'):
            if os.path.exists(db + sfx):
                os.unlink(db + sfx)
        c = sqlite3.connect(db)
        psize = c.execute('PRAGMA page_size').fetchone()[0]
        npages = c.execute('PRAGMA page_count').fetchone()[0]
        if page is not None:
            table = 'page %d of %d' % (page, npages)
        elif table == 'random':
            page = rng.randrange(2, npages + 1)
        else:
            # a leaf page of the table when there is one, else its root
            pages = [r[0] for r in c.execute(
                "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (table,))] \
                if self.has_dbstat(c) else []
            page = rng.choice(pages) if pages else c.execute(
                'SELECT rootpage FROM sqlite_master WHERE name = ?', (table,)).fetchone()[0]
        empty = self.empty_tree_of(c, page)
        c.close()
        with open(db, 'r+b') as f:
            f.seek((page - 1) * psize + 8)
            f.write(os.urandom(psize - 8))
        if empty:  # not counted as a fault: there is nothing to detect or lose
            return self.harmless_page(store, page, table, empty, npages)
        TOTALS['injected'] += 1
        # the daemon refuses it, naming fsck
        m = ckfs.Mount(store=store)
        try:
            with self.assertRaises(ckfs.MountError) as cm:
                m.start()
            self.assertIn('fsck', str(cm.exception))
        finally:
            m.close()
        v = ctl(store, 'verify')
        self.assertEqual(v.returncode, 1, 'verify did not report the damaged index page %d '
                         '(%s): %s%s' % (page, table, v.stdout, v.stderr))
        self.assertIn('index', v.stdout + v.stderr)
        TOTALS['detected'] += 1
        f = ctl(store, 'fsck')
        self.assertEqual(f.returncode, 1, 'fsck: %s%s' % (f.stdout, f.stderr))
        self.assertTrue([n for n in os.listdir(store) if n.startswith('index.db.damaged-')],
                        'the damaged index was not kept aside')
        lost = [ln for ln in f.stdout.splitlines() if ln.startswith('lost:')]
        # after fsck: mounts, never wrong bytes, tracker on an intact complete step
        m = ckfs.Mount(store=store)
        m.start()
        try:
            eio = ok = 0
            for rel, want in sorted(self.written.items()):
                p = m.path(rel)
                if not os.path.exists(p):
                    continue
                out = read_outcome(p, want)
                self.assertNotEqual(out, 'WRONG', '%s read back WRONG bytes after fsck' % rel)
                eio += out == 'eio'
                ok += out == 'ok'
            try:
                with open(m.path(TRACKER)) as fh:
                    tracker = fh.read()
            except FileNotFoundError:
                tracker = None      # every step lost with the page: nothing to resolve
            if tracker:
                for r in range(RANKS):
                    rel = rank_path(int(tracker), r)
                    self.assertEqual(read_outcome(m.path(rel), self.written[rel]), 'ok',
                                     'tracker names %s but %s is not whole' % (tracker, rel))
            m.unmount()
        finally:
            m.close()
        v2 = ctl(store, 'verify')
        self.assertEqual(v2.returncode, 1 if eio else 0, 'verify after fsck: %s%s' %
                         (v2.stdout, v2.stderr))
        SUMMARY.append('corrupt index page %d (%s): daemon refused, verify found it, fsck '
                       'rebuilt: %d lost lines, %d files whole, %d EIO, tracker %s' %
                       (page, table, len(lost), ok, eio, tracker))
        if not ckfs.keep_tmp():
            shutil.rmtree(store, ignore_errors=True)
        return npages

    @classmethod
    def empty_tree_of(cls, c, page):
        """The name of the b-tree page is the whole of, when that b-tree is empty, else None.
        Such a page keeps its 8-byte header when overwritten ("a leaf with no cells"), so
        SQLite never reads the bytes after it: nothing is lost, and nothing can be detected.
        The partial index chunks_bad (index/index.c) is empty until a chunk is marked bad."""
        if cls.has_dbstat(c):
            r = c.execute("SELECT name FROM dbstat WHERE pageno = ? AND pagetype = 'leaf' "
                          "AND ncell = 0", (page,)).fetchone()
            if r and c.execute('SELECT count(*) FROM dbstat WHERE name = ?',
                               (r[0],)).fetchone()[0] == 1:
                return r[0]
            return None
        r = c.execute("SELECT rootpage FROM sqlite_master WHERE name = 'chunks_bad'").fetchone()
        if r and r[0] == page and \
                c.execute('SELECT count(*) FROM chunks WHERE bad <> 0').fetchone()[0] == 0:
            return 'chunks_bad'
        return None

    def harmless_page(self, store, page, table, tree, npages):
        """page, the whole of the empty b-tree tree, was overwritten past its header: the
        store must mount with every file bit-exact and the tracker on the newest step, and
        verify must find it whole."""
        m = ckfs.Mount(store=store)
        m.start()
        try:
            for rel, want in sorted(self.written.items()):
                self.assertEqual(read_outcome(m.path(rel), want), 'ok',
                                 '%s after page %d of the empty %s was overwritten' %
                                 (rel, page, tree))
            self.assertEqual(ckfs.read_bytes(m.path(TRACKER)), str(STEPS[-1]).encode())
            m.unmount()
        finally:
            m.close()
        v = ctl(store, 'verify')
        self.assertEqual(v.returncode, 0, 'verify after page %d of the empty %s was '
                         'overwritten: %s%s' % (page, tree, v.stdout, v.stderr))
        SUMMARY.append('corrupt index page %d (%s): the whole of the empty %s, its header '
                       'kept: harmless, every file whole, verify clean' % (page, table, tree))
        if not ckfs.keep_tmp():
            shutil.rmtree(store, ignore_errors=True)
        return npages

    @staticmethod
    def has_dbstat(c):
        try:
            c.execute('SELECT 1 FROM dbstat LIMIT 1').fetchall()
            return True
        except sqlite3.Error:
            return False

    def test_index_extents(self):
        self.index_fault('extents')

    def test_index_inodes(self):
        self.index_fault('inodes')

    def test_index_dentries(self):
        self.index_fault('dentries')

    def test_index_steps(self):
        self.index_fault('steps')

    def test_index_random(self):
        self.index_fault('random')

    def test_index_each_page(self):
        # every page but the first (SQLite's header: no salvage starts without it), so a page
        # no table test happens to pick (the meta table's, an index's) is covered every run
        store = self.copy_store('index-count')
        c = sqlite3.connect(os.path.join(store, 'index.db'))
        c.execute('PRAGMA wal_checkpoint(TRUNCATE)')
        npages = c.execute('PRAGMA page_count').fetchone()[0]
        c.close()
        shutil.rmtree(store, ignore_errors=True)
        self.assertGreater(npages, 10, 'the pristine index is smaller than expected')
        for page in range(2, npages + 1):
            with self.subTest(page=page):
                self.assertEqual(self.index_fault('each', page=page), npages)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(1200, exit=True)
    unittest.main(verbosity=2)
