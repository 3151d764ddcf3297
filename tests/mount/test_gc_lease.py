#!/usr/bin/python3
"""The gc protocol's leases (fs/node/lease.h; issue 41 item 9) on two nodes over a plain shared
directory (-o remote=DIR,node=a|b,nodes=2), with `ckptctl STORE remote gc`:

- a stale gc/lease (a gc that died: not renewed within its expiry) no longer stops publishing:
  the nodes publish, the step becomes global, and .ckptfs/status says the lease was ignored;
  a live one holds publishing back, as before, and the status says whose lease it waits for;
- an upload marker a dead node left (uploads/<node>/<kind>-<step>, stale) no longer blocks gc:
  gc reports it, removes it and goes on; a live marker still blocks; gc takes over a stale
  gc/lease;
- chunks sent ahead of a step's completion are relied on by its publish without a HEAD each,
  unless gc/epoch changed since they went (a gc ran): then each is looked at again and what a
  gc removed is sent again (rgc.h protocol 6);
- `remote gc --dry-run` lists what a gc would remove and removes nothing, takes no lease;
- a full remote (a tmpfs filled up, so the lease write fails with ENOSPC): gc removes the
  dropped steps' manifests without a lease to make room for it, then collects; with nothing
  to remove first, it says to stop the nodes and run with --force-no-lease, which works.

The tests of `ckptctl remote gc` that keep fewer steps than they save mount with
-o remote_gc=off: the daemons would otherwise collect the remote themselves (test_remote_gc.py)
before the command runs.

Leases and markers of dead holders are written into the remote directory by this process, as
the JSON a lease is (lease.h), with times in the past. The saves are Megatron-LM's file
sequence, ranks 0-1 through node A and 2-3 through node B (ckfs.megatron_save_two_nodes).

Run: /usr/bin/python3 tests/mount/test_gc_lease.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import TRACKER, wait_for  # noqa: E402

HOUR_NS = 3600 * 10**9
GC_EXPIRY_S = 900          # lease.h LEASE_GC_EXPIRY_S
UPLOAD_EXPIRY_S = 86400    # lease.h LEASE_UPLOAD_EXPIRY_S


def put_object(remote, key, data):
    """Object key of the directory remote at remote: the file remote/key, written whole."""
    p = os.path.join(remote, *key.split('/'))
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p + '.part', 'wb') as f:
        f.write(data)
    os.rename(p + '.part', p)


put_lease = ckfs.put_remote_lease


def remote_files(remote):
    """{key: (size, mtime_ns)} of every object of the directory remote."""
    out = {}
    for dp, _dn, fn in os.walk(remote):
        for n in fn:
            p = os.path.join(dp, n)
            st = os.stat(p)
            out[os.path.relpath(p, remote)] = (st.st_size, st.st_mtime_ns)
    return out



def part_of(key):
    """'manifests/KIND/STEP/NODE/VERSION.json' as 'STEP/NODE.json', the step unpadded
    (fs/node/manifest.c)."""
    key = re.sub(r'/[0-9a-f]{32}\.json$', '.json', re.sub(r'^manifests/\d+/', '', key))
    step, rest = key.split('/', 1)
    return '%d/%s' % (int(step), rest)

class GcLease(unittest.TestCase):
    def setUp(self):
        ckfs.check_fuse_usable()
        self.remote = tempfile.mkdtemp(prefix='ckptfs-test-remote-', dir=ckfs.test_tmp_root())
        self.addCleanup(shutil.rmtree, self.remote, True)

    def start(self, *opts):
        self.a, self.b = (ckfs.Mount(opts=['remote=' + self.remote, 'node=' + n, 'nodes=2'] +
                                     list(opts)) for n in 'ab')
        for m in (self.a, self.b):
            m.start()
            self.addCleanup(m.close)

    def both(self):
        return '\n--- node a:\n%s\n--- node b:\n%s\n--- remote: %s' % (
            self.a.status_text(), self.b.status_text(), sorted(remote_files(self.remote)))

    def wait_global(self, step, timeout=60):
        """Until both nodes' trackers name step: it is global, every node's files shown."""
        for m in (self.a, self.b):
            wait_for('tracker at %d on node %s' % (step, m.mnt),
                     lambda: m.read_text(TRACKER) == str(step), timeout, self.both)

    def gc(self, *args):
        return self.a.ckptctl('remote', 'gc', *args)

    # -- the node side -------------------------------------------------------------------------

    def test_a_stale_gc_lease_does_not_stop_publishing(self):
        put_lease(self.remote, 'gc/lease', 'ckptctl remote gc', 'gone-host', 2 * HOUR_NS,
                  GC_EXPIRY_S)
        self.start()
        ckfs.megatron_save_two_nodes(self.a, self.b, 1)
        self.wait_global(1)
        for m in (self.a, self.b):
            st = m.status_text()
            self.assertIn("stale gc lease 'gc/lease' ignored: held by 'ckptctl remote gc' "
                          "pid 4242 on 'gone-host'", st)
            self.assertIn('gc lease:', st)
            with open(os.path.join(m.store, 'ckptfs.log')) as f:
                self.assertIn("stale gc lease 'gc/lease' ignored", f.read())
        # the nodes leave it to the next gc, which takes it over
        self.assertTrue(os.path.isfile(os.path.join(self.remote, 'gc', 'lease')))

    def test_a_live_gc_lease_holds_publishing_and_says_whose(self):
        put_lease(self.remote, 'gc/lease', 'ckptctl remote gc', 'busy-host', 0, GC_EXPIRY_S)
        self.start()
        ckfs.megatron_save_two_nodes(self.a, self.b, 1)
        # node A, whose ranks saw the tracker's claim, has its part complete and waits; node
        # B's part waits for A's seal, which A publishes with its part
        want = "waiting for gc lease held by 'ckptctl remote gc' pid 4242 on 'busy-host'"
        wait_for('node A waiting for the lease', lambda: want in self.a.status_text(), 30,
                 self.both)
        self.assertEqual([k for k in remote_files(self.remote) if k.startswith('manifests/')],
                         [], 'published under a live gc lease')
        self.assertNotEqual(self.a.read_text(TRACKER), '1')
        os.unlink(os.path.join(self.remote, 'gc', 'lease'))   # that gc ended
        self.wait_global(1)
        for m in (self.a, self.b):
            self.assertNotIn('gc lease:', m.status_text())

    def test_a_chunks_sent_ahead_are_looked_at_again_only_after_a_gc(self):
        """rgc.h protocol 6: a publish relies on the chunks its node sent ahead of the step's
        completion without a HEAD each, unless the gc epoch changed since they went (a gc
        may have removed some): then it looks at every one again and sends what is missing."""
        self.start()

        def sent(m):
            return int(re.search(r'published: +\d+ steps, (\d+) chunks sent',
                                 m.status_text()).group(1))

        def relied(m):
            got = re.search(r'(\d+) sent ahead and not looked at again', m.status_text())
            self.assertIsNotNone(got, m.status_text())
            return int(got.group(1))

        def sent_ahead():
            for m in (self.a, self.b):
                wait_for('chunks sent ahead by node %s' % m.mnt, lambda: sent(m) >= 2, 30,
                         self.both)

        ckfs.megatron_save_two_nodes(self.a, self.b, 1, before_tracker=sent_ahead)
        self.wait_global(1)
        relied_1 = {m: relied(m) for m in (self.a, self.b)}
        self.assertGreaterEqual(relied_1[self.a], 2, self.both())
        self.assertGreaterEqual(relied_1[self.b], 2, self.both())

        chunks_before = {k for k in remote_files(self.remote) if k.startswith('chunks/')}
        removed = []

        def a_gc_runs():
            # what a gc racing the save would do: a new epoch, then the step's new chunks gone
            sent_ahead()
            wait_for('step 2 chunks on the remote', lambda: len(
                {k for k in remote_files(self.remote) if k.startswith('chunks/')} -
                chunks_before) >= 4, 30, self.both)
            put_object(self.remote, 'gc/epoch', b"ckptctl remote gc 1 0000000000000001\n")
            for k in sorted(remote_files(self.remote)):
                if k.startswith('chunks/') and k not in chunks_before:
                    os.unlink(os.path.join(self.remote, k))
                    removed.append(k)

        want = ckfs.megatron_save_two_nodes(self.a, self.b, 2, before_tracker=a_gc_runs)
        self.wait_global(2)
        self.assertGreaterEqual(len(removed), 4)
        now = remote_files(self.remote)
        self.assertEqual([k for k in removed if k not in now], [],
                         'chunks a gc removed after they were sent ahead were not sent again')
        for m in (self.a, self.b):
            self.assertEqual(relied(m), relied_1[m], 'relied on chunks sent before a gc')
        # a cold node reads step 2 whole from the remote
        self.a.unmount()
        shutil.rmtree(self.a.store)
        os.makedirs(self.a.store)
        self.a.start()
        wait_for('tracker at 2 on the cold node', lambda: self.a.read_text(TRACKER) == '2', 60,
                 self.both)
        for path, data in want.items():
            with open(self.a.path(path), 'rb') as f:
                self.assertEqual(f.read(), data, path)

    # -- ckptctl remote gc ---------------------------------------------------------------------

    def test_b_gc_goes_past_a_dead_nodes_upload_marker(self):
        self.start()
        ckfs.megatron_save_two_nodes(self.a, self.b, 1)
        self.wait_global(1)
        put_lease(self.remote, 'uploads/deadnode/0-7', "ckptfs node 'deadnode'", 'dead-host',
                  2 * 24 * HOUR_NS, UPLOAD_EXPIRY_S)
        r = self.gc()
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out)
        self.assertIn("marker 'uploads/deadnode/0-7' of 'ckptfs node 'deadnode'' pid 4242 on "
                      "'dead-host'", r.stdout)
        self.assertIn('taken as left by a node that died: removed', r.stdout)
        self.assertRegex(r.stdout, r'gc: +removed .* 1 upload markers of dead nodes')
        left = remote_files(self.remote)
        self.assertNotIn('uploads/deadnode/0-7', left)
        self.assertNotIn('gc/lease', left)
        # a live marker (a node uploading now) still blocks, and the gc gives its lease back
        put_lease(self.remote, 'uploads/slownode/0-9', "ckptfs node 'slownode'", 'slow-host',
                  0, UPLOAD_EXPIRY_S)
        before = remote_files(self.remote)
        r = self.gc()
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("a node is publishing ('uploads/slownode/0-9', 'ckptfs node 'slownode'' "
                      "pid 4242 on 'slow-host'", r.stderr)
        self.assertEqual(remote_files(self.remote), before)

    def test_b_gc_takes_over_a_stale_gc_lease(self):
        self.start()
        ckfs.megatron_save_two_nodes(self.a, self.b, 1)
        self.wait_global(1)
        put_lease(self.remote, 'gc/lease', 'ckptctl remote gc', 'gone-host', 2 * HOUR_NS,
                  GC_EXPIRY_S)
        r = self.gc()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("took over the stale 'gc/lease' held by 'ckptctl remote gc' pid 4242 on "
                      "'gone-host'", r.stdout)
        self.assertNotIn('gc/lease', remote_files(self.remote))
        # a live one: another gc runs, this one waits
        put_lease(self.remote, 'gc/lease', 'ckptctl remote gc', 'busy-host', 0, GC_EXPIRY_S)
        r = self.gc()
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("another gc holds the remote's 'gc/lease': 'ckptctl remote gc' pid 4242 on "
                      "'busy-host'", r.stderr)

    def test_c_dry_run_lists_what_gc_removes_and_removes_nothing(self):
        self.start('keep_checkpoint_max=1', 'remote_gc=off')
        for step in (1, 2):
            ckfs.megatron_save_two_nodes(self.a, self.b, step)
            self.wait_global(step)
        # the step directories' objects go once every node shows the step (node_dir.c)
        wait_for('dirs/ empty', lambda: not [k for k in remote_files(self.remote)
                                             if k.startswith('dirs/')], 30, self.both)
        put_lease(self.remote, 'uploads/deadnode/0-7', "ckptfs node 'deadnode'", 'dead-host',
                  2 * 24 * HOUR_NS, UPLOAD_EXPIRY_S)
        before = remote_files(self.remote)
        r = self.gc('--dry-run')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(remote_files(self.remote), before, 'gc --dry-run changed the remote')
        self.assertIn('nothing removed, no lease taken', r.stdout)
        listed = set(re.findall(r'^would remove: (\S+)', r.stdout, re.M))
        manifests = {k for k in listed if k.startswith('manifests/')}
        self.assertEqual({part_of(k) for k in manifests},
                         {'1/a.json', '1/b.json'}, r.stdout)
        self.assertTrue([k for k in listed if k.startswith('chunks/')], r.stdout)
        self.assertIn("marker 'uploads/deadnode/0-7'", r.stdout)
        self.assertIn('would remove', r.stdout)
        # the gc then removes exactly that (and the dead node's marker)
        r = self.gc()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        gone = set(before) - set(remote_files(self.remote))
        self.assertEqual(gone, listed | {'uploads/deadnode/0-7'}, r.stdout)
        r = self.a.ckptctl('remote', 'verify')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = self.gc('--dry-run')
        self.assertEqual(re.findall(r'^would remove: (\S+)', r.stdout, re.M), [], r.stdout)

    # -- a full remote -------------------------------------------------------------------------

    def full_copy(self, size_mb=32):
        """Copy the remote onto a tmpfs of size_mb MiB (mounted here, unmounted at cleanup),
        filled to the last page; point node A's STORE/remote.json at the copy. Returns the
        copy's path. The nodes are unmounted: nothing uploads."""
        for m in (self.a, self.b):
            m.unmount()
        top = ckfs.mount_tmpfs(self, size_mb)
        copy = os.path.join(top, 'remote')
        shutil.copytree(self.remote, copy)
        ckfs.fill_filesystem(top)
        rec = os.path.join(self.a.store, 'remote.json')
        with open(rec) as f:
            cfg = json.load(f)
        cfg['url'] = copy
        with open(rec, 'w') as f:
            json.dump(cfg, f)
        return copy

    def test_d_full_remote_gc_makes_room_for_its_lease(self):
        self.start('keep_checkpoint_max=1', 'remote_gc=off')
        for step in (1, 2):
            ckfs.megatron_save_two_nodes(self.a, self.b, step)
            self.wait_global(step)
        remote = self.full_copy()
        with self.assertRaises(OSError):
            put_object(remote, 'probe', b'x')   # full indeed
        r = self.gc()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r'full: +the remote is full \(No space left on device\): '
                                   r'removed 2 manifests')
        left = remote_files(remote)
        self.assertEqual(sorted(part_of(k) for k in left
                                if k.startswith('manifests/')), ['2/a.json', '2/b.json'])
        self.assertNotIn('gc/lease', left)
        r = self.a.ckptctl('remote', 'verify')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(' 0 (0 bytes) named by no manifest', r.stdout)

    def test_d_full_remote_with_nothing_to_free_first_needs_force_no_lease(self):
        self.start()
        ckfs.megatron_save_two_nodes(self.a, self.b, 1)
        self.wait_global(1)
        # a chunk no manifest names (an upload that died before its manifest): garbage, but
        # only a gc under the lease may remove a chunk
        put_object(self.remote, 'chunks/' + '0' * 32, b'\0' * 65536)
        remote = self.full_copy()
        before = remote_files(remote)
        r = self.gc()
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn('the remote is full (No space left on device)', r.stderr)
        self.assertIn("run 'ckptctl %s remote gc --force-no-lease'" % self.a.store, r.stderr)
        self.assertEqual(remote_files(remote), before)
        r = self.gc('--force-no-lease')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn('none taken (--force-no-lease)', r.stdout)
        self.assertNotIn('chunks/' + '0' * 32, remote_files(remote))
        r = self.a.ckptctl('remote', 'verify')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
