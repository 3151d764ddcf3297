#!/usr/bin/python3
"""Two nodes, one checkpoint: a real 4-rank PyTorch job (gloo) whose ranks 0-1 write through
node A's mount and ranks 2-3 through node B's, each node a ckptfs daemon with its own STORE, over
one remote (issue 21; DESIGN.md "Growing past one machine"; policy rule 5).

The remotes, each started for real by scripts/ceph.sh (a one-machine Ceph on 127.0.0.1):
  s3      the Ceph RADOS Gateway's S3 API, one bucket (SigV4 over libcurl)
  cephfs  a CephFS directory, node A through one ceph-fuse mount, node B through another
and `dir`, a plain directory of this machine (the shared-filesystem backend without Ceph).

Layouts, each a real save sequence of tests/e2e/trainer.py (its comments cite the sources):
  megatron   every rank makes iter_N/mp_rank_R/ and writes its model_optim_rng.pt; rank 0 writes
             latest_checkpointed_iteration.txt after a barrier (tests/traces/megatron.md)
  mf2        rank 0 alone makes iteration_N/, then a barrier, then every rank writes its
             safetensors into it: node B's ranks find the directory only through the remote
             (fs/node/node_dir.c); rank 0 writes common.json, metadata.json and the tracker
  deepspeed  every rank writes its ZeRO optimizer shard into global_stepN/, rank 0 the model
             states and `latest`; every rank of the resume reads rank 0's model file

Scenarios, per remote and layout:
  save_resume   both nodes' trackers name the newest step, which is globally complete, and
                `ckptctl verify` on each calls the other node's unfetched chunks a note,
                `ckptctl remote verify` finds every step global and every chunk sound; a
                resumed job loads it bit-exact (trainer.py VERIFY: every file's SHA-256 and the
                model's state digest against what was written)
  kill_ranks_b  node B's ranks killed in the middle of a save: neither tracker moves past the
                previous global step; the job resumes there
  kill_daemon_b node B's daemon SIGKILLed in the middle of a save: the same; B remounts its
                STORE and the step it had finished locally is published then
  wipe_a        node A's STORE deleted and A mounted again on an empty one: the job resumes on
                the newest global step from the remote alone, bit-exact
  retention     keep_checkpoint_max=2 on both nodes: each keeps the two newest global steps,
                every rank's files of both
  gc            keep_checkpoint_max=2: `ckptctl remote gc` removes the steps retention dropped
                and their chunks; `remote verify` clean; a node on an empty STORE resumes
  rgw_down      (S3; Megatron, DeepSpeed) the RADOS Gateway stopped during a save and started
                after the job ended: the saves go on locally, the trackers stay on the last
                global step, and the steps become global once the gateway is back

Fails loudly when FUSE or Ceph cannot be used. Run: tests/e2e/test_multinode.py [-k s3]
(tests are named test_<remote>_<layout>_<scenario>; CKPTFS_MULTINODE_QUICK=1 runs the subset
that scripts/test.sh runs, listed at the end of this file).
"""
import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from ceph import Ceph  # noqa: E402
from ckfs import wait_for  # noqa: E402
from trainers import PYTHON, TRAINER, RUN_TIMEOUT  # noqa: E402

RANKS = 4


class Layout:
    """What the tests need to know of a layout's save directory: its tracker's name, the
    tracker's content naming step s, the step directory of s, and every file of step s."""

    def __init__(self, name, tracker, claim, stepdir, files):
        self.name, self.tracker = name, tracker
        self.claim, self.stepdir, self.files = claim, stepdir, files


LAYOUTS = {
    'megatron': Layout('megatron', 'latest_checkpointed_iteration.txt', str,
                       lambda s: 'iter_%07d' % s,
                       lambda s: ['iter_%07d/mp_rank_%02d/model_optim_rng.pt' % (s, r)
                                  for r in range(RANKS)]),
    'mf2': Layout('mf2', 'latest_checkpointed_iteration.txt', str,
                  lambda s: 'iteration_%08d' % s,
                  lambda s: ['iteration_%08d/%s-%07d-%07d.safetensors' % (s, k, r, RANKS)
                             for r in range(RANKS) for k in ('model', 'opt')] +
                  ['iteration_%08d/%s' % (s, n) for n in ('common.json', 'metadata.json')]),
    'deepspeed': Layout('deepspeed', 'latest', lambda s: 'global_step%d' % s,
                        lambda s: 'global_step%d' % s,
                        lambda s: ['global_step%d/bf16_zero_pp_rank_%d_mp_rank_00_optim_states.pt'
                                   % (s, r) for r in range(RANKS)] +
                        ['global_step%d/mp_rank_00_model_states.pt' % s]),
}


class TestMultiNode(unittest.TestCase):
    ceph = None

    @classmethod
    def setUpClass(cls):
        ckfs.check_fuse_usable()
        cls.ceph = Ceph()
        os.environ.update({k: v for k, v in cls.ceph.vars.items() if k.startswith('AWS_')})

    @classmethod
    def tearDownClass(cls):
        if cls.ceph:
            cls.ceph.stop()

    # ---- a two-node job ----------------------------------------------------------------
    def nodes(self, kind, opts=()):
        """Mount node A and node B on one new remote of kind (its prefix unique to the test),
        with the extra -o options opts. Returns (a, b), ckfs.Mount objects."""
        v = self.ceph.vars
        job = 'job-%s-%d' % (self.id().split('.')[-1], int(time.time() * 1000))
        if kind == 's3':
            urls = ['s3://%s/%s' % (v['CKPTFS_TEST_BUCKET'], job)] * 2
        elif kind == 'cephfs':
            os.makedirs(os.path.join(v['CKPTFS_CEPHFS_1'], job))
            urls = [os.path.join(v['CKPTFS_CEPHFS_%d' % k], job) for k in (1, 2)]
        else:
            plain = tempfile.mkdtemp(prefix='ckptfs-test-remote-')
            self.addCleanup(shutil.rmtree, plain, True)
            urls = [plain] * 2
        ms = {}
        for node, url in zip(('a', 'b'), urls):
            m = ckfs.Mount(opts=['remote=' + url, 'node=' + node, 'nodes=2'] + list(opts))
            m.start()
            self.addCleanup(m.close)
            ms[node] = m
        self.log = os.path.join(ms['a'].tmp, 'trainer.log')
        self.mounts = (ms['a'], ms['b'])
        return ms['a'], ms['b']

    def job(self, a, b, steps, resume=False, slow=0.0):
        argv = [PYTHON, TRAINER, '--layout', self.lay.name, '--save', '%s,%s' % (a.mnt, b.mnt),
                '--steps', str(steps), '--save-every', '2', '--ranks', str(RANKS),
                '--log', self.log, '--slow-save', str(slow)] + (['--resume'] if resume else [])
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, text=True)

    def run_job(self, a, b, steps, resume=False):
        p = self.job(a, b, steps, resume)
        out, _ = p.communicate(timeout=RUN_TIMEOUT)
        self.assertEqual(p.returncode, 0, 'job failed:\n%s\n%s\n--- node A ---\n%s\n'
                         '--- node B ---\n%s' % (out[-3000:], self.log_lines()[-20:],
                                                 a.log_tail(), b.log_tail()))

    def log_lines(self):
        with open(self.log) as f:
            return f.read().splitlines()

    def both_trackers(self, a, b, step, timeout=30):
        """Wait until both nodes' trackers name step."""
        want, lay = self.lay.claim(step), self.lay
        wait_for('both trackers at %r' % want,
                 lambda: a.read_text(lay.tracker) == want == b.read_text(lay.tracker), timeout,
                 lambda: 'trackers: node A %r, node B %r\n--- A status ---\n%s\n--- B status '
                 '---\n%s' % (a.read_text(lay.tracker), b.read_text(lay.tracker),
                               a.status_text(), b.status_text()))

    def resumed(self, step):
        """The last launch's RESUMED line names step, and every rank's VERIFY passed."""
        lines = self.log_lines()
        start = max(i for i, ln in enumerate(lines) if ln.startswith('START'))
        got = [ln for ln in lines[start:] if ln.startswith(('RESUMED', 'FRESH'))]
        self.assertTrue(got and got[0].startswith('RESUMED step=%d ' % step),
                        'resume: %s\n%s' % (got[:1], self.nodes_state()))
        bad = [ln for ln in lines[start:] if ln.startswith('VERIFY FAIL')]
        self.assertEqual(bad, [], 'the resumed files differ from what was written')
        self.assertTrue(any(ln.startswith('VERIFY ok step=%d' % step) for ln in lines[start:]))

    def nodes_state(self):
        """Both nodes' trackers, status and log tails, for a failure message."""
        out = []
        for m in getattr(self, 'mounts', ()):
            try:
                tracker = m.read_text(self.lay.tracker)
            except OSError as e:
                tracker = '(%s)' % e
            out.append('--- %s: tracker %r ---\n%s%s' % (m.mnt, tracker, m.status_text(),
                                                        m.log_tail(40)))
        return '\n'.join(out)

    def in_save(self, p, b, step):
        """Wait until job p's save of step has a file on node B (its ranks are writing)."""
        deadline = time.monotonic() + RUN_TIMEOUT
        target = os.path.join(b.mnt, self.lay.stepdir(step))
        while not os.path.isdir(target) or not os.listdir(target):
            if p.poll() is not None:
                self.fail('the job ended before step %d: %s' % (step, p.stdout.read()))
            self.assertLess(time.monotonic(), deadline, 'no save of step %d' % step)
            time.sleep(0.05)

    def kill_in_save(self, a, b, kill):
        """Run a slow job; in its third save (step 6), once a file of step 6 exists on node B,
        call kill(job). Returns the job's output."""
        p = self.job(a, b, 100, slow=0.4)
        self.in_save(p, b, 6)
        kill(p)
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass
        out, _ = p.communicate(timeout=60)
        return out

    # ---- scenarios ------------------------------------------------------------------------
    def save_resume(self, kind):
        a, b = self.nodes(kind)
        self.run_job(a, b, 6)
        self.both_trackers(a, b, 6)
        for m in (a, b):
            # the other node's chunks, never read here, are on the remote: a note, not damage
            r = m.ckptctl('verify')
            self.assertEqual(r.returncode, 0, 'ckptctl verify on %s: %s%s' % (m.store, r.stdout,
                                                                                r.stderr))
            self.assertIn("another node's, on the remote", r.stdout)
        # the remote as ckptctl reads it: every step global, published by both nodes, every
        # chunk a manifest names there and sound
        r = b.ckptctl('remote', 'verify', json_out=True)
        self.assertEqual(r.returncode, 0, 'ckptctl remote verify: %s%s' % (r.stdout, r.stderr))
        rep = json.loads(r.stdout)
        self.assertEqual(rep['damaged_chunks'], 0)
        self.assertEqual([(s['name'], s['state'], sorted(s['nodes'].replace('*', '').split()))
                          for s in rep['steps']],
                         [(self.lay.stepdir(k), 'global', ['a', 'b']) for k in (2, 4, 6)])
        self.run_job(a, b, 8, resume=True)
        self.resumed(6)
        self.both_trackers(a, b, 8)
        for m in (a, b):   # one namespace: every rank's file on every node
            for f in self.lay.files(8):
                self.assertTrue(os.path.isfile(m.path(f)), '%s missing on %s' % (f, m.mnt))

    def kill_ranks_b(self, kind):
        a, b = self.nodes(kind)

        def kill(p):
            for r in (2, 3):
                subprocess.run(['pkill', '-9', '-f', '%s.*--worker-rank %d' % (TRAINER, r)])
        self.kill_in_save(a, b, kill)
        self.both_trackers(a, b, 4)
        time.sleep(1.5)   # nothing moves later either
        self.both_trackers(a, b, 4, timeout=1)
        self.run_job(a, b, 8, resume=True)
        self.resumed(4)
        self.both_trackers(a, b, 8)

    def kill_daemon_b(self, kind):
        a, b = self.nodes(kind)
        # the job dies with B's daemon, before B's mount point is a plain directory again
        self.kill_in_save(a, b, lambda p: b.kill_daemon(then=lambda: os.killpg(p.pid, 9)))
        b.start()          # the same STORE
        self.both_trackers(a, b, 4)
        self.run_job(a, b, 8, resume=True)
        self.resumed(4)
        self.both_trackers(a, b, 8)

    def rgw_down(self, kind):
        """The RADOS Gateway stopped in the middle of the save of step 6 and started again
        once the job has ended: the saves went on locally, no tracker moved past step 4 while
        the remote was away, and steps 6 and 8 become global once it is back."""
        a, b = self.nodes(kind)
        p = self.job(a, b, 8, slow=0.4)
        self.in_save(p, b, 6)
        self.ceph.rgw('rgw-stop')
        try:
            out, _ = p.communicate(timeout=RUN_TIMEOUT)
            self.assertEqual(p.returncode, 0, 'the job failed while the remote was away:\n%s'
                             % out[-3000:])
            for m in (a, b):
                self.assertIn(m.read_text(self.lay.tracker), (self.lay.claim(2), self.lay.claim(4)),
                              'a tracker moved past step 4 with the remote away\n%s'
                              % m.status_text())
        finally:
            self.ceph.rgw('rgw-start')
        self.both_trackers(a, b, 8, timeout=120)
        self.run_job(a, b, 10, resume=True)
        self.resumed(8)

    def retention(self, kind):
        """keep_checkpoint_max=2 on both nodes counts globally complete steps: after a job
        that saved steps 2 to 8, each node holds steps 6 and 8, all four ranks' files."""
        a, b = self.nodes(kind, ['keep_checkpoint_max=2'])
        self.run_job(a, b, 8)
        self.both_trackers(a, b, 8)
        want = [self.lay.stepdir(6), self.lay.stepdir(8)]
        for m in (a, b):
            wait_for('%s to hold %s' % (m.mnt, want),
                     lambda: sorted(n for n in os.listdir(m.mnt)
                                    if n.startswith(self.lay.stepdir(0)[:4])) == want, 30,
                     lambda: '%s\n%s' % (os.listdir(m.mnt), m.status_text()))
        for m in (a, b):
            for f in self.lay.files(6) + self.lay.files(8):
                self.assertTrue(os.path.isfile(m.path(f)), '%s missing on %s' % (f, m.mnt))
        self.run_job(a, b, 10, resume=True)
        self.resumed(8)

    def gc(self, kind):
        """keep_checkpoint_max=2: `ckptctl remote gc` removes steps 2 and 4 from the remote and
        the chunks only they named; `remote verify` stays clean; node A on an empty STORE
        resumes on step 8 from the remote alone, bit-exact. The daemons' own gc is off
        (-o remote_gc=off; tests/mount/test_remote_gc.py tests it): the command does it here."""
        a, b = self.nodes(kind, ['keep_checkpoint_max=2', 'remote_gc=off'])
        self.run_job(a, b, 8)
        self.both_trackers(a, b, 8)
        before = json.loads(b.ckptctl('remote', json_out=True).stdout)
        tries = []

        def gc_done():   # a node may still be removing its last upload marker
            r = b.ckptctl('remote', 'gc')
            tries.append(r)
            return r.returncode == 0
        wait_for('ckptctl remote gc', gc_done, 30,
                 lambda: '%s%s' % (tries[-1].stdout, tries[-1].stderr))
        r = b.ckptctl('remote', 'verify', json_out=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        after = json.loads(r.stdout)
        self.assertEqual([(s['name'], s['state']) for s in after['steps']],
                         [(self.lay.stepdir(k), 'global') for k in (6, 8)])
        self.assertEqual(after['damaged_chunks'], 0)
        self.assertEqual(after['unnamed_chunks'], 0)
        self.assertLess(after['chunk_bytes'], before['chunk_bytes'])
        a.unmount()
        shutil.rmtree(a.store)
        os.makedirs(a.store)
        a.start()
        self.both_trackers(a, b, 8)
        self.run_job(a, b, 10, resume=True)
        self.resumed(8)

    def wipe_a(self, kind):
        a, b = self.nodes(kind)
        self.run_job(a, b, 6)
        self.both_trackers(a, b, 6)
        a.unmount()
        shutil.rmtree(a.store)
        os.makedirs(a.store)
        a.start()          # an empty STORE: everything from the remote
        self.both_trackers(a, b, 6)
        self.run_job(a, b, 8, resume=True)
        self.resumed(6)


def _add(kind, layout, scenario):
    def t(self):
        self.lay = LAYOUTS[layout]
        getattr(self, scenario)(kind)
    t.__name__ = 'test_%s_%s_%s' % (kind, layout, scenario)
    setattr(TestMultiNode, t.__name__, t)


# CKPTFS_MULTINODE_QUICK=1 (scripts/test.sh): every scenario of Megatron on S3; for the other
# layouts the save and the daemon kill on S3 (their shared directories and the names rule), and
# DeepSpeed with the gateway away; Megatron on CephFS. The rank kill and the wipe, retention and
# gc go through the same node code for every layout; the whole matrix runs without QUICK.
QUICK = os.environ.get('CKPTFS_MULTINODE_QUICK') == '1'
LAYOUT_SCENARIOS = ('save_resume', 'kill_ranks_b', 'kill_daemon_b', 'wipe_a')
QUICK_LAYOUT_SCENARIOS = ('save_resume', 'kill_daemon_b')
for _k in ('s3', 'cephfs', 'dir'):
    for _l in LAYOUTS:
        for _s in LAYOUT_SCENARIOS + ('rgw_down', 'retention', 'gc'):
            # MindFormers 2.0's ranks on node B find rank 0's step directory through the remote
            # only (node_dir.c): with the remote away its save fails there, and is not tested
            if _s == 'rgw_down' and (_k != 's3' or _l == 'mf2'):
                continue
            if QUICK and not (_k == 's3' and (_l == 'megatron' or _s in QUICK_LAYOUT_SCENARIOS or
                                              _s == 'rgw_down') or
                              _k == 'cephfs' and _l == 'megatron' and
                              _s in ('save_resume', 'kill_daemon_b', 'wipe_a')):
                continue
            _add(_k, _l, _s)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(1700, exit=True)
    unittest.main(verbosity=2)
