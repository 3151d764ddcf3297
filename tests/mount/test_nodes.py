#!/usr/bin/python3
"""Two nodes over a plain shared directory (-o remote=DIR,node=,nodes=2; fs/node/), without
Ceph or a trainer, for the orderings of the node thread that the Ceph suite (tests/e2e/
test_multinode.py) hits only by chance:

- a tracker on a node names a globally complete step only once the other node's files of that
  step are in this node's namespace. The node thread learns that a step is global (the other
  node's manifest) before it puts that node's files into the index (show_step): a resume that
  read the tracker in between found no file of the other node's ranks. CI hit it over RGW
  (stop 31: `ckptctl verify` on node A, run once both trackers named global_step6, found node
  B's step-6 files appear while it ran);
- `ckptctl verify` on a mounted node while the daemon shows another node's step reports that
  step's unfetched chunks as notes, never as damage: it lists chunks and files from one snapshot
  of the index;
- while a step is being saved, a publish pass reads under the daemon's lock only the files
  whose content changed since the last pass (the chunks sent ahead, fs/node/node_ahead.c), not
  the whole step every 50-200 ms;
- a mkdir of a step directory and a lookup at the root that misses, which wait for the remote
  inside the rank's system call (fs/node/node_dir.c), return within their deadline when the
  remote is an S3 endpoint that accepts and never answers (a tiny server here that answers
  listings only).

The windows are held open with CKPTFS_FAULT=point@ms (fs/core/fault.c): node-show delays the
node thread between learning a step global and showing it; verify-listed delays ckptctl verify
between listing the chunks and listing the files.

The save is Megatron-LM's file sequence (tests/traces/megatron.md: every rank writes
iter_N/mp_rank_RR/model_optim_rng.pt, then rank 0 writes latest_checkpointed_iteration.txt
after a barrier), ranks 0-1 through node A, ranks 2-3 through node B, written by this process.

Run: /usr/bin/python3 tests/mount/test_nodes.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import glob  # noqa: E402
import http.server  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import wait_for  # noqa: E402

TRACKER = 'latest_checkpointed_iteration.txt'
RANKS = 4
SHOW_DELAY_MS = 2000


class TwoNodes(unittest.TestCase):
    def setUp(self):
        ckfs.check_fuse_usable()
        remote = tempfile.mkdtemp(prefix='ckptfs-test-remote-', dir=ckfs.test_tmp_root())
        self.addCleanup(shutil.rmtree, remote, True)
        self.remote = remote
        self.a, self.b = (ckfs.Mount(opts=['remote=' + remote, 'node=' + n, 'nodes=2'])
                          for n in 'ab')
        # node A's thread waits SHOW_DELAY_MS between learning a step global and showing it
        self.a.env = {'CKPTFS_FAULT': 'node-show@%d' % SHOW_DELAY_MS}
        for m in (self.a, self.b):
            m.start()
            self.addCleanup(m.close)

    def save(self, step):
        """Megatron's save of step, ranks 0-1 on A and 2-3 on B. Returns {relative path:
        bytes}."""
        return ckfs.megatron_save_two_nodes(self.a, self.b, step, RANKS)

    def test_a_tracker_names_a_global_step_only_with_every_nodes_files(self):
        a, b = self.a, self.b
        for step in (1, 2):
            want = self.save(step)
            for m in (a, b):
                # the first answer naming step: every rank's file is there, with its bytes
                deadline = time.monotonic() + 60
                while m.read_text(TRACKER) != str(step):
                    self.assertLess(time.monotonic(), deadline,
                                    'node %s tracker %r\n%s' % (m.mnt, m.read_text(TRACKER),
                                                                m.status_text()))
                    time.sleep(0.005)
                missing = [f for f in want if not os.path.isfile(m.path(f))]
                self.assertEqual(missing, [], 'tracker on %s names %d, files missing:\n%s' %
                                 (m.mnt, step, m.status_text()))
                for f, data in want.items():
                    self.assertTrue(ckfs.read_bytes(m.path(f)) == data, f)
        # the delay was real: node A's log says its thread slept before each show
        with open(os.path.join(a.store, 'ckptfs.log')) as f:
            self.assertIn("at 'node-show'", f.read())

    def test_a_remounted_node_names_the_global_step_from_its_first_answer(self):
        """A node's daemon restarted (the job relaunched after a crash) answers the tracker
        with the global step as soon as the mount is up: a trainer that finds no tracker starts
        from scratch (Megatron-LM load_checkpoint: "could not find the metadata file")."""
        a, b = self.a, self.b
        want = self.save(1)
        for m in (a, b):
            wait_for('tracker at 1 on %s' % m.mnt, lambda: m.read_text(TRACKER) == '1', 30,
                     lambda: m.status_text())
        a.unmount()
        a.start()   # node A's show still waits SHOW_DELAY_MS
        self.assertEqual(a.read_text(TRACKER), '1', a.status_text())
        for f, data in want.items():
            self.assertTrue(ckfs.read_bytes(a.path(f)) == data, f)

    def listings(self, m):
        """{'after': (listings, manifests), 'whole': (...)} so far on m (.ckptfs/status)."""
        t = re.search(r'(\d+) listings after the newest global step \((\d+) manifests\), '
                      r'(\d+) whole \((\d+) manifests\)', m.status_text())
        self.assertIsNotNone(t, m.status_text())
        v = [int(x) for x in t.groups()]
        return {'after': (v[0], v[1]), 'whole': (v[2], v[3])}

    def test_a_tick_lists_the_manifests_from_the_newest_global_step(self):
        """Once steps 1-4 are global, a node's listings between two whole ones (at mount, then
        every 60 s) give the parts of step 4 only (remote_list_after from its first key), not
        the 8 manifests on the remote; a step saved next is still learnt from them."""
        a, b = self.a, self.b
        for step in (1, 2, 3, 4):
            self.save(step)
            for m in (a, b):
                wait_for('tracker at %d on %s' % (step, m.mnt),
                         lambda: m.read_text(TRACKER) == str(step), 60, lambda: m.status_text())
        on_remote = len(glob.glob(os.path.join(self.remote, 'manifests', '*', '*', '*',
                                               '*.json')))
        self.assertEqual(on_remote, 8)
        l0 = self.listings(b)
        wait_for('two listings on b after step 4', lambda: self.listings(b)['after'][0] >=
                 l0['after'][0] + 2, 30, lambda: b.status_text())
        l1 = self.listings(b)
        self.assertEqual((l1['after'][1] - l0['after'][1]) / (l1['after'][0] - l0['after'][0]),
                         2, 'manifests per listing after the newest global step')
        self.save(5)
        for m in (a, b):
            wait_for('tracker at 5 on %s' % m.mnt, lambda: m.read_text(TRACKER) == '5', 60,
                     lambda: m.status_text())

    def test_a_node_with_a_new_store_adopts_its_part_under_an_unpadded_key(self):
        """A remote written before the step was padded in manifest keys
        (manifests/KIND/1/NODE/V.json): a node remounted on an empty store finds its own part
        of step 1 by that key and shows the step; the next save is published padded and
        becomes global."""
        a, b = self.a, self.b
        want = self.save(1)
        for m in (a, b):
            wait_for('tracker at 1 on %s' % m.mnt, lambda: m.read_text(TRACKER) == '1', 60,
                     lambda: m.status_text())
        a.unmount()
        b.unmount()
        for top in glob.glob(os.path.join(self.remote, 'manifests', '*')):
            os.rename(os.path.join(top, ckfs.manifest_step(1)), os.path.join(top, '1'))
        # node a's store lost: the remote holds its part only
        fresh = ckfs.Mount(opts=['remote=' + self.remote, 'node=a', 'nodes=2'])
        self.addCleanup(fresh.close)
        fresh.start()
        b.start()
        wait_for('tracker at 1 on the new store', lambda: fresh.read_text(TRACKER) == '1', 60,
                 lambda: fresh.status_text())
        for f, data in want.items():
            self.assertTrue(ckfs.read_bytes(fresh.path(f)) == data, f)
        self.a = fresh
        self.save(2)
        for m in (fresh, b):
            wait_for('tracker at 2 on %s' % m.mnt, lambda: m.read_text(TRACKER) == '2', 60,
                     lambda: m.status_text())
        self.assertTrue(glob.glob(os.path.join(self.remote, 'manifests', '*',
                                               ckfs.manifest_step(2), 'a', '*.json')))
        for m in (fresh, b):   # keys there before the mount are no older node running
            self.assertNotIn('older node', m.status_text())

    def test_an_older_node_writing_unpadded_keys_is_reported(self):
        """A node whose ckptfs predates the padded keys writes its manifests unpadded
        (manifests/KIND/2/b/V.json) and rebuilds every key it reads unpadded, so it never shows
        the steps the other nodes publish padded and its tracker stops (seen with the build of
        b58a037 as node a: 'cannot show step 1 of the other nodes: No such file or directory').
        Such a key appearing while node a runs is said in a's status and log."""
        a = self.a
        self.save(1)
        wait_for('tracker at 1 on a', lambda: a.read_text(TRACKER) == '1', 60,
                 lambda: a.status_text())
        self.assertNotIn('older node', a.status_text())
        mine = glob.glob(os.path.join(self.remote, 'manifests', '*', ckfs.manifest_step(1), 'b',
                                      '*.json'))
        self.assertEqual(len(mine), 1)
        with open(mine[0]) as f:
            doc = json.load(f)
        doc['step'], doc['name'] = 2, doc['name'].replace('1', '2')
        kind_dir = os.path.dirname(os.path.dirname(os.path.dirname(mine[0])))
        os.makedirs(os.path.join(kind_dir, '2', 'b'))
        with open(os.path.join(kind_dir, '2', 'b', os.path.basename(mine[0])), 'w') as f:
            json.dump(doc, f)
        wait_for("node a saying node b runs an older ckptfs",
                 lambda: "older node:       node 'b' runs an older ckptfs" in a.status_text(),
                 30, lambda: a.status_text())
        with open(os.path.join(a.store, 'ckptfs.log')) as f:
            self.assertIn("node 'b' runs an older ckptfs", f.read())

    def test_verify_while_another_nodes_step_is_shown_finds_no_damage(self):
        a = self.a
        self.save(1)
        # step 1 global on A, B's files not shown yet: the status says so
        wait_for('step 1 global on node A, not shown',
                 lambda: "the other nodes' files not shown here yet" in a.status_text(), 30,
                 lambda: a.status_text())
        # verify lists the chunks now, then waits past the show before listing the files
        env = dict(os.environ, CKPTFS_FAULT='verify-listed@%d' % (SHOW_DELAY_MS + 1500))
        r = ckfs.run([ckfs.ckptctl_bin(), a.store, 'verify'], env=env, timeout=120)
        self.assertIn("at 'verify-listed'", r.stderr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn('damaged:', r.stdout)
        # the show did land while verify waited; a verify now sees B's files as notes
        self.assertEqual(a.read_text(TRACKER), '1', a.status_text())
        r = a.ckptctl('verify')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("another node's, on the remote", r.stdout)

    def ahead(self, m):
        """(passes, files, extents): the passes of m that sent a step being saved ahead, and the
        files and extents they described under the daemon's lock (.ckptfs/status)."""
        t = re.search(r'(\d+) passes over steps being saved described (\d+) files \((\d+) '
                      r'extents\)', m.status_text())
        self.assertIsNotNone(t, m.status_text())
        return tuple(int(x) for x in t.groups())

    def sent(self, m):
        """Chunks m sent or found on the remote so far (.ckptfs/status)."""
        t = re.search(r'(\d+) chunks sent \(\d+ bytes\), (\d+) already there', m.status_text())
        self.assertIsNotNone(t, m.status_text())
        return int(t.group(1)) + int(t.group(2))

    def test_a_pass_ahead_describes_only_the_files_that_changed(self):
        """While a step is being saved, every publish pass (50-200 ms) sends ahead the chunks of
        its files durable already (fs/node/node_ahead.c), reading the index under the daemon's
        lock, which the trainer's writes wait for. A pass describes only the files whose content
        changed since the last one: once every file's chunks went ahead, the passes that follow
        describe nothing, however large the step (issue 41)."""
        a = self.a
        files = 3
        os.mkdir(a.path('iter_0000001'))
        for r in range(files):
            p = a.path(ckfs.megatron_rank_file(1, r))
            os.makedirs(os.path.dirname(p))
            with open(p, 'wb') as f:
                f.write(ckfs.content('ahead rank %d' % r, 8 << 20))
        a.settle()
        chunks = len(ckfs.chunk_files(a.store))
        self.assertGreater(chunks, files)
        wait_for('every chunk sent ahead', lambda: self.sent(a) >= chunks, 30,
                 lambda: a.status_text())
        p0, f0, e0 = self.ahead(a)
        wait_for('10 passes more', lambda: self.ahead(a)[0] >= p0 + 10, 30,
                 lambda: a.status_text())
        p1, f1, e1 = self.ahead(a)
        self.assertEqual((f1 - f0, e1 - e0), (0, 0),
                         '%d passes described files and extents again, nothing having changed'
                         % (p1 - p0))
        # each file described at most when created and when its content became durable
        self.assertLessEqual(f1, 2 * files, a.status_text())
        self.assertLessEqual(e1, chunks, a.status_text())
        # the step completes and is published as ever
        with open(a.path(TRACKER), 'w') as f:
            f.write('1')
        wait_for('step 1 published by a', lambda: re.search(
            r'step iter_0000001 \(1\): [^\n]*published by a', a.status_text()), 30,
                 lambda: a.status_text())


class _Unanswering(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint that answers listings (remote_open's check, the node thread's) with no
    objects and holds every other request without an answer until the test ends."""
    protocol_version = 'HTTP/1.1'

    def do_GET(self):
        if 'list-type=2' not in self.path:
            return self._hold()
        body = b'<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>'
        self.send_response(200)
        self.send_header('Content-Type', 'application/xml')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _hold(self):
        self.server.held.append(self.command + ' ' + self.path)
        self.server.release.wait(120)
        self.close_connection = True

    do_PUT = do_HEAD = do_DELETE = do_POST = _hold

    def log_message(self, *args):
        pass


class UnansweringRemote(unittest.TestCase):
    """Node A over an S3 endpoint that accepts and never answers (issue 41 item 10)."""

    DEADLINE_S = 5   # NODE_DIR_DEADLINE_MS in fs/node/node_dir.c

    def setUp(self):
        ckfs.check_fuse_usable()
        srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _Unanswering)
        srv.daemon_threads = True
        srv.held, srv.release = [], threading.Event()
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        self.addCleanup(srv.release.set)
        self.srv = srv
        self.m = ckfs.Mount(opts=['remote=s3://ckpt-test', 'node=a', 'nodes=2'])
        self.m.env = {'AWS_ENDPOINT_URL': 'http://127.0.0.1:%d' % srv.server_address[1],
                      'AWS_REGION': 'us-east-1', 'AWS_ACCESS_KEY_ID': 'AKIDTEST',
                      'AWS_SECRET_ACCESS_KEY': 'secret', 'AWS_SESSION_TOKEN': ''}
        self.m.start()
        self.addCleanup(self.m.close)

    def test_mkdir_and_lookup_end_by_the_deadline(self):
        m = self.m
        # mkdir: the kernel's lookup of the new name asks the remote (GET dirs/...), then the
        # publish (PUT dirs/...): two calls of at most DEADLINE_S each
        t0 = time.monotonic()
        os.mkdir(m.path('iter_0000001'))
        dt = time.monotonic() - t0
        self.assertLess(dt, 2 * self.DEADLINE_S + 3, 'mkdir took %.1f s' % dt)
        self.assertTrue(os.path.isdir(m.path('iter_0000001')))
        self.assertIn('PUT /ckpt-test/dirs/iter_0000001', self.srv.held)
        status = m.status_text()
        self.assertIn("cannot publish step directory 'iter_0000001'", status)
        self.assertIn('deadline of %d ms' % (self.DEADLINE_S * 1000), status)
        # a rank's walk into a step directory this node lacks: ENOENT within the deadline
        t0 = time.monotonic()
        self.assertFalse(os.path.exists(m.path('iter_0000002')))
        dt = time.monotonic() - t0
        self.assertLess(dt, self.DEADLINE_S + 3, 'lookup took %.1f s' % dt)
        self.assertIn('GET /ckpt-test/dirs/iter_0000002', self.srv.held)
        self.assertIn("another node made 'iter_0000002'", m.status_text())


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
