#!/usr/bin/python3
"""Three nodes over a plain shared directory (-o remote=DIR,node=,nodes=3; fs/node/), without
Ceph or a trainer: the ways a resume on many nodes landed wrong or never landed (issue 41).

The save is Megatron-LM's file sequence (tests/traces/megatron.md; megatron/training/
checkpointing.py save_checkpoint: every rank writes iter_N/mp_rank_RR/model_optim_rng.pt, then
after a barrier rank 0 writes latest_checkpointed_iteration.txt), one rank per node: rank 0
through node a, rank 1 through b, rank 2 through c, written by this process. `writers` names the
nodes whose rank writes: Megatron's legacy format writes only on data-parallel rank 0, so with
data parallelism across nodes the other nodes write nothing.

Scenarios:
- resave_after_a_crash_between_publishes: step 20 claimed, nodes a and b publish their parts,
  node c's daemon dies before its file is durable; the job resumes at 10 and saves 20 again.
  Every node's tracker must name 20 and every node must serve the second save's bytes of every
  rank. Before versions, a and b never published the second save (their part was known).
- resave_after_unclaimed: the same with a first save that was never claimed (no part of it is
  published; a guard for the withdrawal path, which must not hold the second save back).
- rewrite_of_global: step 20 is global, then saved again (Megatron saves the last iteration
  again at the end of training, a restarted job re-saves it): every node serves the new bytes.
- the_last_rewrite_of_a_job: the same for a global step saved again: the version put back must
  not be published again, and the claim must bring the second save to every node.
- the_last_save_of_a_job: the ranks of nodes b and c exit before node a's seal reaches them
  (their part looks like a copy, policy rule 3); the seal must still make it global.
- empty_node: node c writes nothing; the step becomes global on all three, c shows every rank's
  file.
- remote_away_at_restart: node c is remounted while the remote is unreachable: it mounts, its
  tracker names the last global step at once, status says the remote is away; once the remote is
  back, a new step becomes global on c too.
- nodes_disagree: a node mounted with nodes=2 beside two with nodes=3: it says so in its status
  and no step becomes global on it.
- name_taken_twice: two stores mounted as node a: the second says the name is taken and no step
  becomes global on it.
- mf1_*: MindFormers 1.0 (no step directory: rank_R/{prefix}-{epoch}_{step}.ckpt and a virtual
  rank_R/meta.json), ranks 0-1 through node a, 2-3 through b, 4-5 through c: every node names a
  step in every rank's meta.json only once every node's ranks saved it, and serves every rank's
  file; two epochs' steps of one number stay apart.
- a_slot_sealed_after_its_ranks_exited: the ranks of nodes b and c rewrite InternEvo's snapshot
  slot 0 and exit before node a's seal reaches them; their part is set aside and the slot's
  last complete version put back; the late seal must still bring the new version back.
- an_orbax_rename_after_the_ranks_exited: Orbax's primary host renames the tmp directory after
  the ranks of b and c exited; their set-aside part must come back under the final name.
- a_rewrite_sealed_after_its_ranks_exited: the same for a global DCP step saved again in place:
  the set-aside new version must replace the complete one put back at its name.
- a_cold_node_shows_a_slot: a node whose store was lost shows an InternEvo snapshot slot (a step
  named "snapshot/K") it has no row of, from the parts on the remote.

Run: /usr/bin/python3 tests/mount/test_nodes3.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
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
MF1_RANKS = {'a': (0, 1), 'b': (2, 3), 'c': (4, 5)}
MF1_WORLD = 6


def safetensors(raw):
    """raw as a safetensors file of one uint8 tensor (the format ckptfs's structure check
    reads: an 8-byte little-endian header length, the JSON header, the data)."""
    import json
    import struct
    hdr = json.dumps({'w': {'dtype': 'U8', 'shape': [len(raw)],
                            'data_offsets': [0, len(raw)]}}).encode()
    hdr += b' ' * (-len(hdr) % 8)
    return struct.pack('<Q', len(hdr)) + hdr + raw


rank_file = ckfs.megatron_rank_file


class ThreeNodes(unittest.TestCase):
    def setUp(self):
        ckfs.check_fuse_usable()
        self.remote = tempfile.mkdtemp(prefix='ckptfs-test-remote-', dir=ckfs.test_tmp_root())
        self.addCleanup(shutil.rmtree, self.remote, True)
        self.m = {}
        for n in NAMES:
            self.m[n] = self.mount(n)

    def mount(self, name, nodes=3, store=None):
        m = ckfs.Mount(store=store, opts=['remote=' + self.remote, 'node=' + name,
                                          'nodes=%d' % nodes])
        m.start()
        self.addCleanup(m.close)
        return m

    def save(self, step, tag, writers=NAMES, claim=True):
        """Megatron's save of step, rank r through node NAMES[r] when that node is in writers;
        the tracker on node a when claim. Returns {relative path: bytes}."""
        return ckfs.megatron_save_per_node([self.m[n] for n in NAMES], step, tag, SIZE,
                                           [r for r, n in enumerate(NAMES) if n in writers],
                                           claim)

    def status(self):
        return '\n'.join('--- node %s ---\n%s' % (n, self.m[n].status_text()) for n in NAMES)

    def trackers(self, step, nodes=NAMES, timeout=30):
        wait_for('trackers of %s at %d' % (','.join(nodes), step),
                 lambda: all(self.m[n].read_text(TRACKER) == str(step) for n in nodes),
                 timeout,
                 lambda: 'trackers %s\n%s' % ({n: self.m[n].read_text(TRACKER) for n in NAMES},
                                              self.status()))

    def serves(self, want, nodes=NAMES):
        for n in nodes:
            for f, data in want.items():
                got = ckfs.read_bytes(self.m[n].path(f))
                self.assertTrue(got == data, 'node %s serves other bytes for %s\n%s' %
                                (n, f, self.status()))

    def set_aside_on(self, *nodes):
        """Wait until each of nodes has set its unsealed part aside, its writers gone (a job's
        last save, its ranks exited before the seal reached the node)."""
        for n in nodes:
            wait_for('node %s setting its unsealed part aside' % n,
                     lambda: 'never sealed, no writer left' in self.m[n].log_tail(50), 30,
                     lambda: self.m[n].log_tail(30) + self.status())

    # ---- versions (issue 41 item 1) --------------------------------------------------------
    def test_resave_after_an_unclaimed_save(self):
        want = self.save(10, 'first')
        self.trackers(10)
        self.serves(want)
        self.save(20, 'lost', claim=False)   # the job dies before rank 0's claim
        time.sleep(1.5)                      # every node publishes its part of the lost save
        self.trackers(10, timeout=1)
        want = self.save(20, 'again')        # resumed at 10, step 20 saved again, claimed
        self.trackers(20)
        self.serves(want)

    def test_resave_after_a_crash_between_publishes(self):
        """Step 20 is claimed, nodes a and b publish their parts, and node c's daemon dies
        before its file of step 20 is durable: step 20 is never global, the job resumes at 10
        and saves 20 again. Before versions, a and b never published the second save (their
        part of step 20 was known), so every node served a's and b's bytes of the first save
        beside c's of the second."""
        c = self.m['c']
        c.unmount()
        c.env = {'CKPTFS_FAULT': 'commit-before-index:2'}   # dies at its 2nd file's commit
        c.start()
        want = self.save(10, 'first')
        self.trackers(10)
        self.save(20, 'lost', writers=('a', 'b'), claim=False)
        p = c.path(rank_file(20, 2))
        try:                                 # the daemon dies under this fsync
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, 'wb') as f:
                f.write(ckfs.content('lost step 20 rank 2', SIZE))
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            pass
        self.assertTrue(c.wait_daemon_death(30), 'node c did not die at its commit')
        with open(self.m['a'].path(TRACKER), 'w') as f:
            f.write('20')
        time.sleep(1.5)                      # a and b publish their parts of the first save
        c.env = {}
        c.start()
        self.trackers(10)                    # c lost its part: 20 is not global
        want = self.save(20, 'again')        # the job resumed at 10 and saves 20 again
        self.trackers(20)
        self.serves(want)

    def test_rewrite_of_a_global_step(self):
        self.save(10, 'first')
        self.save(20, 'first')
        self.trackers(20)
        want = self.save(20, 'final')        # the last iteration saved again
        wait_for('every node serving the new bytes of step 20',
                 lambda: all(ckfs.read_bytes(self.m[n].path(f)) == d
                             for n in NAMES for f, d in want.items()), 30, self.status)
        self.trackers(20)

    def test_the_last_rewrite_of_a_job(self):
        """Megatron saves the last iteration again at the end of training (training.py: the
        final save_checkpoint after the loop, when it was saved at its interval too) and the
        job exits: here the ranks of nodes b and c exit before node a's claim of the second
        save reaches them. Their new version, unclaimed and without a writer (not a copy: a
        rewrite), is set aside and the complete version put back; that one must not be
        published again, and the claim must bring the second save to every node. Before the
        fix b and c published the first save again, so they never applied the late claim (their
        part was known) and the step waited for nodes for good."""
        self.save(10, 'first')
        self.save(20, 'first')
        self.trackers(20)
        want = self.save(20, 'final', writers=('a',), claim=False)
        for r, n in list(enumerate(NAMES))[1:]:
            rel = rank_file(20, r)
            want[rel] = ckfs.content('final step 20 rank %d' % r, SIZE)
            ckfs.write_exiting(self.m[n].path(rel), want[rel])
        self.set_aside_on('b', 'c')
        time.sleep(1)   # a kept version published again would be on the remote by now
        with open(self.m['a'].path(TRACKER), 'w') as f:
            f.write('20')
        wait_for('every node serving the new bytes of step 20',
                 lambda: all(ckfs.read_bytes(self.m[n].path(f)) == d
                             for n in NAMES for f, d in want.items()), 30,
                 lambda: self.status() + ''.join(self.m[n].log_tail(10) for n in NAMES))
        self.trackers(20)

    # ---- uploads beside the save (item 11) ------------------------------------------------
    def test_chunks_go_up_before_the_claim(self):
        """A node sends the chunks of its files as they become durable, before the step
        completes: once the claim comes, only the manifests are left to put."""
        self.save(10, 'first')
        self.trackers(10)
        chunks = os.path.join(self.remote, 'chunks')
        before = len(os.listdir(chunks))
        want = self.save(20, 'second', claim=False)   # three new files of other bytes
        ckfs.wait_for('the chunks of step 20 on the remote before its claim',
                      lambda: len(os.listdir(chunks)) >= before + len(NAMES), 30, self.status)
        self.assertFalse(self.remote_chunks_of('a', 20), 'a manifest of step 20 before its claim')
        with open(self.m['a'].path(TRACKER), 'w') as f:
            f.write('20')
        self.trackers(20)
        self.serves(want)

    # ---- a node that writes nothing (item 2) -----------------------------------------------
    def test_a_node_that_writes_nothing(self):
        want = self.save(10, 'dp0', writers=('a', 'b'))
        self.trackers(10)
        self.serves(want)

    def test_the_last_save_of_a_job_on_a_node_without_the_claim(self):
        """The last save of a job: every rank's process exits right after its files (the job
        ends, or crashes, after the barrier), so on nodes b and c the writer is gone before node
        a's seal reaches them through the remote. Their part, every file whole and written by
        one process that is gone, is what policy rule 3 calls a copy; the seal from another
        node is the claim that seals it (rule 5). Before the fix the copy stayed a copy, was
        never published, and the step never became global (CI at d005e34: three_nodes'
        DeepSpeed job hung at step 4)."""
        def ranks(step):
            for r, n in enumerate(NAMES):
                if n != 'a':
                    p = self.m[n].path(rank_file(step, r))
                    os.makedirs(os.path.dirname(p), exist_ok=True)
                    with open(p, 'wb') as f:
                        f.write(ckfs.content('last step %d rank %d' % (step, r), SIZE))
            return 0
        self.assertEqual(ckfs.in_child(ranks, 30), ('ok', 0))
        for n in ('b', 'c'):
            wait_for('step 30 a copy on node %s' % n, lambda: ' copied 1' in
                     self.m[n].status_text(), 30, self.status)
        want = self.save(30, 'last', writers=('a',))
        want.update({rank_file(30, r): ckfs.content('last step %d rank %d' % (30, r), SIZE)
                     for r in (1, 2)})
        self.trackers(30)
        self.serves(want)

    def test_a_part_set_aside_before_the_seal_arrives(self):
        """The last save of a job whose node b has two ranks: both processes exit right after
        their files, so b's part (never sealed, every writer gone, two of them: no copy) is set
        aside before node a's seal arrives. The seal brings it back (rule 5); b must listen for
        it every tick, not at an idle node's pace (a listing every 5 s or slower): CI at
        bfc54c6, test_multinode cephfs kill_daemon_b, waited 30 s for b's tracker."""
        d = self.m['b'].path(os.path.dirname(rank_file(30, 1)))

        def one(name):
            def w(step):
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, name), 'wb') as f:
                    f.write(ckfs.content('last step %d %s' % (step, name), SIZE))
                return 0
            return w
        self.assertEqual(ckfs.in_child(one(os.path.basename(rank_file(30, 1))), 30), ('ok', 0))
        self.assertEqual(ckfs.in_child(one('distrib_optim.pt'), 30), ('ok', 0))
        b = self.m['b']
        wait_for('step 30 set aside on node b', lambda: ' incomplete 1' in b.status_text(), 30,
                 self.status)

        def listings():
            m = re.search(r'(\d+) listings after the newest global step.*?(\d+) whole',
                          b.status_text())
            return int(m.group(1)) + int(m.group(2)) if m else -1
        seen = listings()
        wait_for('a listing by node b', lambda: listings() > seen, 30, self.status)
        self.save(30, 'last', writers=('a', 'c'))
        self.trackers(30, nodes=('b',), timeout=3)
        self.trackers(30)

    # ---- MindFormers 2.0's metadata.json over every node (item 4) -------------------------
    def mf2_save(self, step, writers):
        """MindFormers 2.0's save (mindformers checkpoint/checkpoint.py @ 8d9e5d7: rank 0 makes
        iteration_N/, every rank writes its safetensors into it, rank 0 writes metadata.json
        listing every rank's file, then the tracker), rank r through node NAMES[r] when that
        node is in writers. Returns {relative path: bytes} of what was written."""
        d = 'iteration_%08d' % step
        os.mkdir(self.m['a'].path(d))
        names = ['model-%07d-%07d.safetensors' % (r, len(NAMES)) for r in range(len(NAMES))]
        want = {}
        for r, n in enumerate(NAMES):
            if n not in writers:
                continue
            p = self.m[n].path(d, names[r])
            wait_for('%s on node %s' % (d, n), lambda: os.path.isdir(os.path.dirname(p)), 30)
            data = safetensors(ckfs.content('mf2 step %d rank %d' % (step, r), SIZE))
            with open(p, 'wb') as f:
                f.write(data)
                os.fsync(f.fileno())
            want[os.path.join(d, names[r])] = data
        import json
        meta = json.dumps({'storage_data': {'w%d' % r: [{'file_name': names[r]}]
                                            for r in range(len(NAMES))}})
        for name, text in (('common.json', '{"step_num": %d}' % step), ('metadata.json', meta)):
            with open(self.m['a'].path(d, name), 'w') as f:
                f.write(text)
                os.fsync(f.fileno())
        with open(self.m['a'].path(TRACKER), 'w') as f:
            f.write(str(step))
        return want

    def test_mf2_metadata_checked_over_every_node(self):
        """Node c's rank wrote nothing of step 10 although metadata.json lists its file: c's
        part is empty, the step has every node's part, and still no tracker may name it (the
        resume would not find rank 2's file). Step 20, saved whole, is named everywhere."""
        self.mf2_save(10, writers=('a', 'b'))
        wait_for('the step judged over every node',
                 lambda: 'metadata.json names' in self.m['a'].status_text(), 30, self.status)
        for n in NAMES:
            self.assertIsNone(self.m[n].read_text(TRACKER), self.status())
        want = self.mf2_save(20, writers=NAMES)
        self.trackers(20)
        self.serves(want)

    # ---- MindFormers 1.0: per-rank files, no step directory (issue 41 item 4) ---------------
    @staticmethod
    def mf1_name(rank, epoch, step):
        return 'llama_rank_%d-%d_%d.ckpt' % (rank, epoch, step)

    def mf1_save(self, epoch, step, writers=NAMES, skip=()):
        """MindFormers 1.0's save (tests/traces/mf1.md: mindformers core/callback/callback.py
        CheckpointMonitor, MindSpore serialization.py _exec_save): each rank, with no barrier,
        writes rank_R/{prefix}-{epoch}_{step}.ckpt as NAME.tmp, renames it and makes it 0400,
        then writes rank_R/meta.json through a temporary file and os.replace. Ranks 0-1 through
        node a, 2-3 through b, 4-5 through c, those of the nodes in writers, but not the ranks
        in skip. Returns {relative path: bytes}."""
        import json
        want = {}
        for n in writers:
            for r in MF1_RANKS[n]:
                if r in skip:
                    continue
                d = self.m[n].path('rank_%d' % r)
                os.makedirs(d, exist_ok=True)
                name = self.mf1_name(r, epoch, step)
                data = ckfs.content('mf1 epoch %d step %d rank %d' % (epoch, step, r), SIZE)
                tmp = os.path.join(d, name[:-len('.ckpt')] + '.tmp')
                with open(tmp, 'ab') as f:
                    f.write(data)
                os.rename(tmp, os.path.join(d, name))
                os.chmod(os.path.join(d, name), 0o400)
                fd, t = tempfile.mkstemp(dir=d)
                os.write(fd, json.dumps({'last_epoch': epoch, 'last_step': step,
                                         'last_ckpt_file': name}).encode())
                os.close(fd)
                os.replace(t, os.path.join(d, 'meta.json'))
                want['rank_%d/%s' % (r, name)] = data
        return want

    def mf1_metas(self):
        """{(node, rank): meta.json as (epoch, step, file), or None}, every rank on every node."""
        import json
        out = {}
        for n in NAMES:
            for r in range(MF1_WORLD):
                t = self.m[n].read_text('rank_%d' % r, 'meta.json')
                out[(n, r)] = t and tuple(json.loads(t)[k] for k in
                                          ('last_epoch', 'last_step', 'last_ckpt_file'))
        return out

    def mf1_named(self, epoch, step, timeout=30):
        """Wait until every rank's meta.json on every node names (epoch, step) and that rank's
        own file of it."""
        want = {(n, r): (epoch, step, self.mf1_name(r, epoch, step))
                for n in NAMES for r in range(MF1_WORLD)}
        wait_for('every meta.json on every node naming %d_%d' % (epoch, step),
                 lambda: self.mf1_metas() == want, timeout,
                 lambda: 'meta.json %s\n%s' % (self.mf1_metas(), self.status()))

    def mf1_serves(self, want):
        """Every node lists and reads every rank's file, bit-exact."""
        for n in NAMES:
            for f, data in want.items():
                d, name = f.split('/')
                self.assertIn(name, os.listdir(self.m[n].path(d)),
                              'node %s does not list %s\n%s' % (n, f, self.status()))
            self.serves(want, nodes=(n,))

    def test_mf1_every_rank_through_every_node(self):
        want = self.mf1_save(1, 2)
        self.mf1_named(1, 2)
        self.mf1_serves(want)
        # node c's ranks have not saved step 4 yet: no meta.json on any node names it
        self.mf1_save(1, 4, writers=('a', 'b'))
        time.sleep(3)
        self.assertEqual(set(self.mf1_metas().values()),
                         {(1, 2, self.mf1_name(r, 1, 2)) for r in range(MF1_WORLD)},
                         self.status())
        want.update(self.mf1_save(1, 4, writers=('c',)))
        self.mf1_named(1, 4)
        # epoch 2 restarts the step count: its step 2 is not epoch 1's
        want.update(self.mf1_save(2, 2))
        self.mf1_named(2, 2)
        self.mf1_serves(want)

    def test_mf1_a_rank_missing_on_one_node(self):
        """MindFormers' resume loads every rank's file of the step meta.json names
        (resume_ckpt_utils.py), so no meta.json may name a step a rank lacks. Rank 3 (node b)
        has only made its directory when the other ranks have saved step 2: every node has a
        part of it, and still no meta.json names it until rank 3's file is in. Then rank 3
        saves step 2 but not step 4 (rank 2 of b writes its file of 4 and no meta.json)."""
        os.makedirs(self.m['b'].path('rank_3'))
        want = self.mf1_save(1, 2, skip=(3,))
        wait_for('a node finding rank 3 missing', lambda: 'rank 3 has no file' in
                 self.status(), 30, self.status)
        self.assertEqual(set(self.mf1_metas().values()), {None}, self.status())
        want.update(self.mf1_save(1, 2, writers=('b',), skip=(2,)))
        self.mf1_named(1, 2)
        self.mf1_serves(want)
        self.mf1_save(1, 4, writers=('a', 'c'))
        d = self.m['b'].path('rank_2')
        with open(os.path.join(d, self.mf1_name(2, 1, 4)), 'wb') as f:
            f.write(ckfs.content('rank 2 alone', SIZE))
        time.sleep(3)
        self.assertEqual(set(self.mf1_metas().values()),
                         {(1, 2, self.mf1_name(r, 1, 2)) for r in range(MF1_WORLD)},
                         self.status())

    # ---- the remote away at a restart (item 3) ---------------------------------------------
    def test_remote_away_at_restart(self):
        want = self.save(10, 'first')
        self.trackers(10)
        c = self.m['c']
        c.unmount()
        away = self.remote + '.away'
        os.rename(self.remote, away)
        try:
            c.start()
            self.assertEqual(c.read_text(TRACKER), '10', c.status_text())
            # its own rank's file; the other ranks' chunks come from the remote, once it is back
            own = rank_file(10, 2)
            self.assertTrue(ckfs.read_bytes(c.path(own)) == want[own])
            self.assertIn('remote error:', c.status_text())
            with open(c.path(rank_file(10, 0)), 'rb') as f:
                with self.assertRaises(OSError):
                    f.read()
        finally:
            os.rename(away, self.remote)
        self.serves(want)   # nothing was set aside while the remote was away
        want = self.save(20, 'second')
        self.trackers(20)
        self.serves(want)

    # ---- InternEvo's snapshot slots (item 4) -----------------------------------------------
    def slot_write(self, node, rank, tag):
        """rank's optimizer shard of InternEvo's snapshot slot 0, written through node."""
        p = self.m[node].path('snapshot', '0', 'optimizer_tp0_pp0_zo%d.pt' % rank)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        data = ckfs.content('%s rank %d' % (tag, rank), SIZE)
        with open(p, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return data

    def test_a_slot_rewritten_before_its_seal_arrives(self):
        """A slot is rewritten in place at every snapshot, and the marker that numbers a version
        ({step}.step) is written on node a only. Node b learns of a's seal of step 2 only after
        its rank began the next snapshot in the same slot (here: b was restarted while the
        remote was away, and rewrote its shard 2 s after a's marker): b's part holds the next
        save's shard, so it is not sealed as step 2, and step 2 never becomes global on b."""
        self.save(10, 'first')      # a global step first: b may then mount with the remote away
        self.trackers(10)
        for r, n in enumerate(NAMES):
            self.slot_write(n, r, 'step 2')
        b = self.m['b']
        b.unmount()
        with open(self.m['a'].path('snapshot', '0', '2.step'), 'wb') as f:
            f.write(b'step 2')
        wait_for('a publishes step 2', lambda: 'snapshot/0 (2)' in self.m['a'].status_text(),
                 30, self.status)
        away = self.remote + '.away'
        os.rename(self.remote, away)
        try:
            b.start()
            time.sleep(2)
            self.slot_write('b', 1, 'step 4')   # the next snapshot, before b hears of step 2
        finally:
            os.rename(away, self.remote)
        wait_for('b declines step 2', lambda: 'a later snapshot; not sealed as 2' in
                 b.log_tail(50), 30, lambda: b.log_tail(30) + self.status())
        time.sleep(1)
        self.assertNotIn('snapshot/0 (2): globally complete', b.status_text())
        self.assertNotIn(' b', [ln for ln in b.status_text().splitlines()
                                if 'snapshot/0 (2)' in ln][0].split('published by')[1])

    def test_a_slot_sealed_after_its_ranks_exited(self):
        """The last snapshot of a job: nodes b and c rewrite slot 0 for step 4 and their ranks
        exit before node a's marker of step 4 reaches them (the job's end, as in
        tests/e2e/test_three_nodes.py internevo-snap). Their part, never sealed and without a
        writer, is set aside and the slot's last complete version (step 2) put back at its name;
        a's seal, arriving after that, must still bring step 4 back on b and c and make it
        global, with every node serving step 4's bytes. Before the fix the seal found the name
        taken by step 2 and was dropped without a word: step 4 never became global."""
        for r, n in enumerate(NAMES):
            self.slot_write(n, r, 'step 2')
        with open(self.m['a'].path('snapshot', '0', '2.step'), 'wb') as f:
            f.write(b'step 2')
        wait_for('slot 0 at step 2 global on every node',
                 lambda: all('snapshot/0 (2): globally complete;' in self.m[n].status_text()
                             for n in NAMES), 30, self.status)
        want = {os.path.join('snapshot', '0', 'optimizer_tp0_pp0_zo0.pt'):
                self.slot_write('a', 0, 'step 4')}   # rank 0 lives on to write the marker
        for r, n in list(enumerate(NAMES))[1:]:
            rel = os.path.join('snapshot', '0', 'optimizer_tp0_pp0_zo%d.pt' % r)
            want[rel] = ckfs.content('step 4 rank %d' % r, SIZE)
            ckfs.write_exiting(self.m[n].path(rel), want[rel])   # the job's end
        self.set_aside_on('b', 'c')
        with open(self.m['a'].path('snapshot', '0', '4.step'), 'wb') as f:
            f.write(b'step 4')
        want[os.path.join('snapshot', '0', '4.step')] = b'step 4'
        wait_for('slot 0 at step 4 global on every node',
                 lambda: all('snapshot/0 (4): globally complete;' in self.m[n].status_text()
                             for n in NAMES), 30,
                 lambda: self.status() + ''.join(self.m[n].log_tail(10) for n in NAMES))
        self.serves(want)

    def test_an_orbax_rename_after_the_ranks_exited(self):
        """Orbax's save (orbax checkpoint_manager.py save, _src/path/atomicity.py
        AtomicRenameTemporaryPath.finalize; tests/traces/orbax.md): every host writes its shards
        into 4.orbax-checkpoint-tmp/, then the primary host renames it to 4/. Here the ranks of
        nodes b and c exit before node a's rename reaches them: their part, never sealed and
        without a writer, is set aside under its tmp name. The late seal must bring it back
        under the final name 4/, where every node serves every shard. Before the fix it came
        back as 4.orbax-checkpoint-tmp/, was published under that name, and a resume reading
        4/shard_1.pt on node a or c found no such file (test_three_nodes orbax, 2 runs in 3)."""
        tmp, final = '4.orbax-checkpoint-tmp', '4'
        want = {}
        os.makedirs(self.m['a'].path(tmp))
        with open(self.m['a'].path(tmp, 'shard_0.pt'), 'wb') as f:
            want['shard_0.pt'] = ckfs.content('orbax 4 rank 0', SIZE)
            f.write(want['shard_0.pt'])
            f.flush()
            os.fsync(f.fileno())
        for r, n in list(enumerate(NAMES))[1:]:
            name = 'shard_%d.pt' % r
            want[name] = ckfs.content('orbax 4 rank %d' % r, SIZE)
            ckfs.write_exiting(self.m[n].path(tmp, name), want[name])
        self.set_aside_on('b', 'c')
        os.rename(self.m['a'].path(tmp), self.m['a'].path(final))
        wait_for('step 4 global on every node',
                 lambda: all('step 4 (4): globally complete;' in self.m[n].status_text()
                             for n in NAMES), 30,
                 lambda: self.status() + ''.join(self.m[n].log_tail(10) for n in NAMES))
        self.serves({os.path.join(final, k): v for k, v in want.items()})
        for n in NAMES:
            self.assertFalse(os.path.exists(self.m[n].path(tmp)),
                             'node %s still shows %s' % (n, tmp))

    def dcp_save(self, step, tag, exiting=()):
        """torchtitan's DCP save of step (tests/traces/dcp.md; trainer_layouts.py save_dcp):
        rank r writes step-N/__r_0.distcp through node NAMES[r] (in a process of its own that
        exits after its write when that node is in exiting). Returns {relative path: bytes}.
        The seal, rank 0's .metadata through node a, is the caller's (dcp_seal), so that it
        can come after what the test waits for."""
        d = 'step-%d' % step
        want = {}
        for r, n in enumerate(NAMES):
            rel = os.path.join(d, '__%d_0.distcp' % r)
            want[rel] = ckfs.content('%s rank %d' % (tag, r), SIZE)
            p = self.m[n].path(rel)
            if n in exiting:
                ckfs.write_exiting(p, want[rel])
                continue
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, 'wb') as f:
                f.write(want[rel])
                f.flush()
                os.fsync(f.fileno())
        return want

    def dcp_seal(self, step, tag):
        """Rank 0 seals dcp_save's step through node a: writes .metadata.tmp, unlinks an old
        .metadata and renames .metadata.tmp over it."""
        d = self.m['a'].path('step-%d' % step)
        with open(os.path.join(d, '.metadata.tmp'), 'wb') as f:
            f.write(ckfs.content('%s metadata' % tag, 4096))
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(os.path.join(d, '.metadata')):
            os.unlink(os.path.join(d, '.metadata'))
        os.rename(os.path.join(d, '.metadata.tmp'), os.path.join(d, '.metadata'))

    def test_a_rewrite_sealed_after_its_ranks_exited(self):
        """A global DCP step saved again in place (a job resumed before it, or a final save of
        the same step), whose ranks on nodes b and c exit before node a's seal of the new save
        reaches them: their new version is set aside and the step's complete version put back
        at its name (steps_versions_done); the late seal must still bring the new version back
        on b and c, and every node must serve the second save's bytes of every rank."""
        self.dcp_save(4, 'first')
        self.dcp_seal(4, 'first')
        wait_for('step-4 global on every node',
                 lambda: all('(4): globally complete;' in self.m[n].status_text()
                             for n in NAMES), 30, self.status)
        want = self.dcp_save(4, 'second', exiting=('b', 'c'))
        for n in ('b', 'c'):
            wait_for('node %s setting its unsealed new version aside' % n,
                     lambda: 'restored' in self.m[n].log_tail(50), 30,
                     lambda: self.m[n].log_tail(30) + self.status())
        self.dcp_seal(4, 'second')

        def served():
            try:
                return all(ckfs.read_bytes(self.m[n].path(f)) == data
                           for n in NAMES for f, data in want.items())
            except OSError:
                return False
        wait_for('every node serving the second save', served, 30,
                 lambda: self.status() + ''.join(self.m[n].log_tail(10) for n in NAMES))
        for n in NAMES:
            self.assertIn('(4): globally complete;', self.m[n].status_text())

    def test_a_cold_node_shows_a_slot(self):
        """Snapshot slot 0 holds step 2 on every node, then node c's store is lost and c is
        mounted again on an empty one: c has no row of the slot, only its part on the remote,
        and must still show the slot, every rank's shard and the marker, as the other nodes do
        (InternEvo's resume, checkpoint_manager.py query_latest_snapshot_step_local, walks the
        folders for the highest N.step and loads that folder)."""
        want = {}
        for r, n in enumerate(NAMES):
            want[os.path.join('snapshot', '0', 'optimizer_tp0_pp0_zo%d.pt' % r)] = \
                self.slot_write(n, r, 'step 2')
        with open(self.m['a'].path('snapshot', '0', '2.step'), 'wb') as f:
            f.write(b'step 2')
        want[os.path.join('snapshot', '0', '2.step')] = b'step 2'
        line = 'snapshot/0 (2): globally complete;'
        wait_for('slot 0 at step 2 global on every node',
                 lambda: all(line in self.m[n].status_text() for n in NAMES), 30, self.status)
        c = self.m['c']
        c.unmount()
        shutil.rmtree(c.store)
        os.makedirs(c.store)
        c.start()
        wait_for('node c showing slot 0', lambda: line in c.status_text(), 30,
                 lambda: c.status_text() + c.log_tail(20))
        self.assertEqual(sorted(os.listdir(c.path('snapshot', '0'))),
                         sorted(os.path.basename(f) for f in want), c.status_text())
        self.serves(want, nodes=('c',))

    # ---- a damaged chunk on the remote (item 5) --------------------------------------------
    def remote_chunks_of(self, node, step):
        """The chunk keys of node's part of step, from its manifest on the remote."""
        import glob
        import json
        out = []
        for p in glob.glob(os.path.join(self.remote, 'manifests', '*', ckfs.manifest_step(step), node,
                                        '*.json')):
            with open(p) as f:
                for fl in json.load(f)['files']:
                    out += [os.path.join(self.remote, 'chunks', x[2]) for x in fl['extents']]
        return out

    def damaged_then_replaced(self, damage):
        """Save step 10, damage(path) the first chunk of node a's part on the remote, and read
        rank 0 on node c: the first read fails (the damaged object never taken), and a read
        succeeds once node a has put its sound copy back; node c never sets the step aside
        alone (every tracker stays on 10). Returns the chunk's path on the remote."""
        want = self.save(10, 'first')
        self.trackers(10)
        chunks = self.remote_chunks_of('a', 10)
        self.assertTrue(chunks, 'no chunk of node a on the remote')
        damage(chunks[0])
        c, f0 = self.m['c'], rank_file(10, 0)

        def read():
            try:
                return ckfs.read_bytes(c.path(f0))
            except OSError:
                return None
        got = read()
        wait_for('node c reading rank 0 of step 10 whole', lambda: read() == want[f0], 30,
                 self.status)
        self.trackers(10, timeout=1)
        self.assertIsNone(got, 'node c read the damaged chunk as sound')
        with open(os.path.join(self.m['a'].store, 'ckptfs.log')) as f:
            self.assertIn("replaced chunk '%s'" % os.path.basename(chunks[0]), f.read())
        return chunks[0]

    def test_a_damaged_chunk_on_the_remote_is_replaced(self):
        def bit_rot(path):
            with open(path, 'r+b') as f:
                f.seek(20)
                b = f.read(1)
                f.seek(20)
                f.write(bytes([b[0] ^ 0xff]))
        self.damaged_then_replaced(bit_rot)
        r = self.m['b'].ckptctl('remote', 'verify', json_out=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn('"damaged_chunks": 0', r.stdout.replace(' ', '').replace(':', ': '))

    def test_an_object_longer_than_any_chunk_is_damaged_not_cut(self):
        """An object grown past any chunk's (its chunk's header and payload, then 5 MiB
        more) is damaged like one with a flipped bit (store_chunk_put_object: the payload
        longer than any codec makes of the chunk's size): replaced by the node that holds the
        chunk, never taken. A fetch receives an object into a buffer of the largest object's
        size (node.c fetch_chunk, remote_get_into): it must refuse a longer one (-EFBIG), not
        cut it to its buffer and take the chunk's own bytes at its start."""
        def grow(path):
            with open(path, 'ab') as f:
                f.write(b'\0' * (5 << 20))
        chunk = self.damaged_then_replaced(grow)
        self.assertLess(os.path.getsize(chunk), 5 << 20, 'the object was not replaced')
        with open(os.path.join(self.m['c'].store, 'ckptfs.log')) as f:
            self.assertIn("chunk '%s' on the remote: is longer than any chunk's object"
                          % os.path.basename(chunk), f.read())

    def test_remote_verify_repair(self):
        """`ckptctl STORE remote verify --repair` puts the store's sound copy over a chunk
        damaged on the remote; on a node that does not hold it, it says so and exits 1."""
        self.save(10, 'first')
        self.trackers(10)
        chunk = self.remote_chunks_of('a', 10)[0]
        with open(chunk, 'r+b') as f:
            f.truncate(100)
        a, b = self.m['a'], self.m['b']
        r = b.ckptctl('remote', 'verify')
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn('damaged: chunk %s' % os.path.basename(chunk), r.stdout)
        r = b.ckptctl('remote', 'verify', '--repair')
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn('not held sound here', r.stdout)
        r = a.ckptctl('remote', 'verify', '--repair')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn('repaired: chunk %s' % os.path.basename(chunk), r.stdout)
        r = b.ckptctl('remote', 'verify')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    # ---- nodes that disagree (item 6) ------------------------------------------------------
    def test_nodes_disagree(self):
        d = self.mount('d', nodes=2)
        self.save(10, 'first')
        self.trackers(10)
        wait_for('node d reporting the disagreement',
                 lambda: 'nodes=3' in d.status_text(), 30, d.status_text)
        self.assertIsNone(d.read_text(TRACKER), d.status_text())

    def test_a_wiped_store_takes_its_name_back_at_once(self):
        """Node c's store is lost and c is mounted again on an empty one (a new store): after a
        clean unmount its name is free, so c is not taken for a second node 'c'."""
        want = self.save(10, 'first')
        self.trackers(10)
        c = self.m['c']
        c.unmount()
        shutil.rmtree(c.store)
        os.makedirs(c.store)
        c.start()
        self.trackers(10, timeout=15)
        self.serves(want, nodes=('c',))
        self.assertNotIn('taken', c.status_text())

    def test_a_name_taken_twice(self):
        twin = self.mount('a')
        self.save(10, 'first')
        self.trackers(10)
        wait_for('the second node a reporting the name taken twice',
                 lambda: 'taken' in twin.status_text(), 30, twin.status_text)
        self.assertIsNone(twin.read_text(TRACKER), twin.status_text())


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
