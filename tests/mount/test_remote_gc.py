#!/usr/bin/python3
"""The remote's gc run by the mounted daemons themselves (issue 41; fs/node/rgc.h), on three
nodes over a plain shared directory (-o remote=DIR,node=a|b|c,nodes=3,keep_checkpoint_max=2):

- saves of more steps than keep: every node's daemon tries a gc once a step becomes globally
  complete; one at a time, elected by the remote's gc/lease. The manifests and the chunks of the
  pruned steps leave the remote, nothing else is left behind (every chunk on the remote is named
  by a kept manifest), the kept steps still read bit-exact through every node, and the logs show
  no two gcs running at once and say what each removed ("remote gc: removed K manifests, C
  chunks");
- a gc lease and an upload marker left by holders that died (stale: not renewed within their
  expiry, lease.h) are taken over and removed by the daemons' gc, and said in the log;
- a full remote (a tmpfs filled to the last page, so the lease cannot be written): a node's gc
  removes the pruned steps' manifests without the lease to make room for it, then collects;
- -o remote_gc=off: the daemons leave the remote alone (`ckptctl STORE remote gc` still works).

The save is Megatron-LM's file sequence, one rank per node, as in test_nodes3.py.

Run: /usr/bin/python3 tests/mount/test_remote_gc.py
"""

import sys

sys.dont_write_bytecode = True

import datetime  # noqa: E402
import faulthandler  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import wait_for  # noqa: E402

TRACKER = 'latest_checkpointed_iteration.txt'
NAMES = ('a', 'b', 'c')
SIZE = 192 << 10
KEEP = 2
STEPS = (10, 20, 30, 40, 50)


HOUR_NS = 3600 * 10**9
GC_EXPIRY_S = 900          # lease.h LEASE_GC_EXPIRY_S
UPLOAD_EXPIRY_S = 86400    # lease.h LEASE_UPLOAD_EXPIRY_S
GC_GRACE_S = 10            # node_gc.c NODE_GC_GRACE_NS


put_lease = ckfs.put_remote_lease


rank_file = ckfs.megatron_rank_file


class RemoteGc(unittest.TestCase):
    def setUp(self):
        ckfs.check_fuse_usable()
        self.remote = tempfile.mkdtemp(prefix='ckptfs-test-remote-', dir=ckfs.test_tmp_root())
        self.addCleanup(shutil.rmtree, self.remote, True)

    def start(self, *opts, stores=None):
        self.m = {}
        for n in NAMES:
            m = ckfs.Mount(store=stores and stores[n], opts=['remote=' + self.remote, 'node=' + n, 'nodes=3',
                                 'keep_checkpoint_max=%d' % KEEP] + list(opts))
            m.start()
            self.addCleanup(m.close)
            self.m[n] = m

    def save(self, step):
        """Megatron's save of step, rank r through node NAMES[r], the tracker on node a; waits
        until every node's tracker names it. Returns {relative path: bytes}."""
        want = ckfs.megatron_save_per_node([self.m[n] for n in NAMES], step, 'gc', SIZE)
        wait_for('trackers at %d' % step,
                 lambda: all(self.m[n].read_text(TRACKER) == str(step) for n in NAMES), 30,
                 self.status)
        return want

    def status(self):
        return '\n'.join('--- node %s ---\n%s%s' % (n, self.m[n].status_text(),
                                                   self.m[n].log_tail(10)) for n in NAMES)

    def manifests(self, step=None):
        """{path: set of chunk digests named} of the remote's manifests (of step, or all)."""
        out = {}
        pat = os.path.join(self.remote, 'manifests', '*', ckfs.manifest_step(step) if step else '*',
                           '**',
                           '*.json')
        for p in glob.glob(pat, recursive=True):
            try:
                with open(p) as f:
                    m = json.load(f)
            except (OSError, ValueError):
                continue   # removed while read
            out[p] = {x[2] for fl in m['files'] for x in fl['extents']}
        return out

    def manifest_keys(self):
        base = os.path.join(self.remote, 'manifests')
        return [os.path.relpath(p, base) for p in glob.glob(os.path.join(base, '**', '*.json'),
                                                              recursive=True)]

    def remote_steps(self):
        """The steps that have a manifest on the remote."""
        return sorted({int(k.split(os.sep)[1]) for k in self.manifest_keys()})

    def remote_chunks(self):
        return set(os.listdir(os.path.join(self.remote, 'chunks')))

    def gc_runs(self):
        """[(node, start, end, summary)] of every daemon gc in the nodes' logs: from its
        'remote gc: started' line to its 'remote gc: removed' or 'remote gc: stopped' line."""
        runs = []
        stamp = re.compile(r'^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z (?:ckptfs: )?'
                           r'(remote gc: .*)$')
        for n in NAMES:
            start = None
            with open(os.path.join(self.m[n].store, 'ckptfs.log'), errors='replace') as f:
                for line in f:
                    g = stamp.match(line.rstrip('\n'))
                    if not g:
                        continue
                    t = datetime.datetime.fromisoformat(g.group(1))
                    if g.group(2).startswith('remote gc: started'):
                        start = t
                    elif start and re.match(r'remote gc: (removed|stopped)', g.group(2)):
                        runs.append((n, start, t, g.group(2)))
                        start = None
        return runs

    def logs(self):
        out = ''
        for n in NAMES:
            with open(os.path.join(self.m[n].store, 'ckptfs.log'), errors='replace') as f:
                out += f.read()
        return out

    def test_the_nodes_collect_the_remote_one_at_a_time(self):
        # a gc and a node that died in their work: the nodes publish past the stale lease
        put_lease(self.remote, 'gc/lease', 'ckptctl remote gc', 'gone-host', 2 * HOUR_NS,
                  GC_EXPIRY_S)
        put_lease(self.remote, 'uploads/deadnode/0-7', "ckptfs node 'deadnode'", 'dead-host',
                  2 * 24 * HOUR_NS, UPLOAD_EXPIRY_S)
        self.start()
        want, named = {}, {}
        for step in STEPS:
            want[step] = self.save(step)
            # read before a later step's gc may drop them
            named[step] = set().union(*self.manifests(step).values())
            self.assertTrue(named[step], 'no manifest of step %d\n%s' % (step, self.status()))
        kept = STEPS[-KEEP:]
        wait_for('the remote holds steps %s only' % (kept,),
                 lambda: self.remote_steps() == list(kept), 30,
                 lambda: '%s\n%s' % (self.remote_steps(), self.status()))
        pruned = set().union(*(named[s] for s in STEPS[:-KEEP])) - \
            set().union(*(named[s] for s in kept))
        wait_for('the chunks of the pruned steps gone',
                 lambda: not (pruned & self.remote_chunks()), 30,
                 lambda: '%d left\n%s' % (len(pruned & self.remote_chunks()), self.status()))
        # nothing left behind: every chunk on the remote is named by a kept manifest
        wait_for('no chunk named by no manifest',
                 lambda: self.remote_chunks() == set().union(*self.manifests().values()), 30,
                 self.status)
        r = self.m['b'].ckptctl('remote', 'verify')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # the kept steps resume bit-exact on every node
        for n in NAMES:
            for step in kept:
                for f, data in want[step].items():
                    self.assertTrue(ckfs.read_bytes(self.m[n].path(f)) == data,
                                    'node %s serves other bytes for %s\n%s' %
                                    (n, f, self.status()))
        runs = self.gc_runs()
        self.assertTrue(any(re.match(r'remote gc: removed [1-9]\d* manifests, [1-9]\d* chunks',
                                     s) for _n, _a, _b, s in runs), '%s\n%s' %
                        (runs, self.status()))
        runs.sort(key=lambda x: x[1])
        for x, y in zip(runs, runs[1:]):
            self.assertLessEqual(x[2], y[1], 'two gcs at once: %s and %s' % (x, y))
        # the dead holders' lease and marker taken over, removed, and said
        self.assertFalse(os.path.exists(os.path.join(self.remote, 'uploads', 'deadnode', '0-7')))
        logs = self.logs()
        self.assertIn("remote gc: lease:     took over the stale 'gc/lease' held by 'ckptctl "
                      "remote gc' pid 4242 on 'gone-host'", logs)
        self.assertIn("remote gc: upload:    marker 'uploads/deadnode/0-7' of 'ckptfs node "
                      "'deadnode'' pid 4242 on 'dead-host'", logs)
        self.assertIn('taken as left by a node that died: removed', logs)
        ran = {n for n, _a, _b, _s in runs}
        for n in ran:
            self.assertIn('remote gc:', self.m[n].status_text())

    def test_the_nodes_collect_a_full_remote(self):
        top = ckfs.mount_tmpfs(self, 32)
        self.remote = os.path.join(top, 'remote')
        os.mkdir(self.remote)
        self.start('remote_gc=off')
        want, named = {}, {}
        for step in STEPS[:KEEP + 1]:
            want[step] = self.save(step)
            named[step] = set().union(*self.manifests(step).values())
        stores = {n: self.m[n].store for n in NAMES}
        for m in self.m.values():
            m.unmount()
        ckfs.fill_filesystem(top)
        with self.assertRaises(OSError):
            with open(os.path.join(self.remote, 'probe'), 'wb') as f:
                f.write(b'x' * 4096)
                f.flush()
                os.fsync(f.fileno())
        self.start(stores=stores)   # remote_gc on: a node's gc finds two steps past keep
        kept = STEPS[1:KEEP + 1]
        wait_for('the remote holds steps %s only' % (kept,),
                 lambda: self.remote_steps() == list(kept), 30,
                 lambda: '%s\n%s' % (self.remote_steps(), self.status()))
        wait_for('the chunks of step %d gone' % STEPS[0],
                 lambda: not ((named[STEPS[0]] - set().union(*(named[s] for s in kept))) &
                              self.remote_chunks()), 30, self.status)
        self.assertRegex(self.logs(), r'remote gc: full: +the remote is full \(No space left '
                                      r'on device\): removed 3 manifests')
        self.assertRegex(self.logs(), r'remote gc: removed 3 manifests, [1-9]\d* chunks')
        self.assertFalse(os.path.exists(os.path.join(self.remote, 'gc', 'lease')))
        for n in NAMES:
            for step in kept:
                for f, data in want[step].items():
                    self.assertTrue(ckfs.read_bytes(self.m[n].path(f)) == data,
                                    'node %s serves other bytes for %s' % (n, f))

    def test_remote_gc_off(self):
        self.start('remote_gc=off')
        for step in STEPS[:KEEP + 1]:
            self.save(step)
        # a daemon's gc would have run GC_GRACE_S after the last step became global
        time.sleep(GC_GRACE_S + 2)
        self.assertEqual(self.remote_steps(), list(STEPS[:KEEP + 1]))
        self.assertEqual(self.gc_runs(), [])
        for n in NAMES:
            self.assertIn('remote gc:        off (-o remote_gc=off)', self.m[n].status_text())
        r = self.m['a'].ckptctl('remote', 'gc')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(self.remote_steps(), list(STEPS[1:KEEP + 1]))


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
