#!/usr/bin/python3
"""InternEvo snapshot slots and settling abandonment when asked (issue 18), on a real mount,
without a trainer (tests/e2e and the crash loop drive the real sequences):

- a slot `snapshot/K/` whose version is complete and that a writer starts rewriting in place,
  then dies, shows its last complete version to the next reader at once, files and markers
  together, bit-exact; the same after the daemon is killed in the middle of the rewrite;
- a rewrite that completes (its `M.step` written last) replaces the old version, whose copy
  in .ckptfs/retained goes;
- a step directory whose writer exits unsealed leaves the root listing at the very next
  listing or lookup by someone else, with no timer in between (Hugging Face's
  get_last_checkpoint right after a crash);
- a complete step saved again by writers that exit before the claim (Megatron's async save):
  the claim takes the second save back over the first, put back meanwhile;
- a complete step directory renamed by hand (`mv checkpoint-20 checkpoint-20.spike`, a loss
  spike kept to look at) leaves the lineage: retention no longer counts or removes it, the
  tracker no longer names it, and renamed back it is a complete step again.

The slot sequence follows InternLM/InternEvo 05bbd8f internlm/checkpoint/checkpoint_manager.py
CheckpointManager.save_checkpoint (tests/traces/internevo.md): files torch.saved in place into
the folder, a barrier, then the log rank's `<step>.step` in the same folder.

Run: /usr/bin/python3 tests/mount/test_slots.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402

PYTHON = '/usr/bin/python3'
FILES = ('model_tp0_pp0.pt', 'optimizer_tp0_pp0_zo0.pt', 'context.pt')

# A writer that rewrites the slot's files in place, the first one whole and the second half-way,
# then dies (os._exit from inside the write: the kernel flushes from an exiting process).
REWRITE = '''
import os, sys
d, step = sys.argv[1], int(sys.argv[2])
def body(name):
    return (b"%s at step %d;" % (name.encode(), step)) * 20000
with open(os.path.join(d, "model_tp0_pp0.pt"), "wb") as f:
    f.write(body("model_tp0_pp0.pt"))
fd = os.open(os.path.join(d, "optimizer_tp0_pp0_zo0.pt"), os.O_WRONLY | os.O_TRUNC)
os.write(fd, body("optimizer_tp0_pp0_zo0.pt")[:100000])
print("torn", flush=True)
if len(sys.argv) > 3:
    sys.stdin.readline()        # the test kills the daemon meanwhile
os._exit(9)
'''


def body(name, step):
    return (b'%s at step %d;' % (name.encode(), step)) * 20000


def save_slot(d, step):
    """One InternEvo save into slot directory d: files in place, then `<step>.step`."""
    os.makedirs(d, exist_ok=True)
    for n in FILES:
        with open(os.path.join(d, n), 'wb') as f:
            f.write(body(n, step))
    with open(os.path.join(d, '%d.step' % step), 'wb') as f:
        f.write(b'step %d' % step)


def summary(data):
    """(length, SHA-256, first 40 bytes) of data: bit-exact to compare, and short to print
    (assertEqual of dicts of 500 KB values ran difflib for minutes on a mismatch)"""
    return (len(data), hashlib.sha256(data).hexdigest(), data[:40])


def slot_view(d):
    """{name: summary} of every file in slot d, as a resuming reader sees it."""
    return {n: summary(ckfs.read_bytes(os.path.join(d, n))) for n in sorted(os.listdir(d))}


def expected(steps_markers, step):
    v = {n: summary(body(n, step)) for n in FILES}
    for s in steps_markers:
        v['%d.step' % s] = summary(b'step %d' % s)
    return v


class SlotTest(unittest.TestCase):
    maxDiff = 2000

    def rewrite_cut_short(self, m):
        """Slot 0 of mount m saved at step 2, then rewritten in place by a writer that dies
        half-way; the next reader, at once, must see step 2, files and markers together.
        Returns the slot's path."""
        d = m.path('snapshot', '0')
        save_slot(d, 2)
        ckfs.wait_for('slot 0 to complete', lambda: 'sealed -> complete' in m.log_tail(), 20,
                      m.log_tail)
        self.assertEqual(slot_view(d), expected([2], 2))
        # a later launch's first snapshot overwrites slot 0 and dies half-way
        p = subprocess.run([PYTHON, '-c', REWRITE, d, '4'], stdout=subprocess.PIPE, timeout=60)
        self.assertEqual(p.returncode, 9)
        self.assertEqual(sorted(os.listdir(m.path('snapshot'))), ['0'])
        self.assertEqual(slot_view(d), expected([2], 2), m.log_tail())
        self.assertIn('restored', m.log_tail())
        return d

    def test_1_rewrite_cut_short_shows_last_complete_version(self):
        with ckfs.Mount() as m:
            d = self.rewrite_cut_short(m)
            self.assertIn("slot 'snapshot/0' is being rewritten", m.log_tail())
            self.assertEqual(len(os.listdir(m.path('.ckptfs', 'quarantine'))), 1)
            self.assertEqual(os.listdir(m.path('.ckptfs', 'retained')), [])
            # a rewrite that completes replaces it; the kept copy goes
            save_slot(d, 6)
            self.assertEqual(slot_view(d), expected([2, 6], 6))
            ckfs.wait_for('the kept version to go once the new one is complete',
                          lambda: os.listdir(m.path('.ckptfs', 'retained')) == [], 20, m.log_tail)
            r = ckfs.ckptctl(m.store, 'verify')
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_1b_rewrite_cut_short_read_before_its_closes_are_committed(self):
        """test_1 with the committer held 300 ms before each commit (CKPTFS_FAULT
        commit-before-index@300), so that the dying writer's closes are not committed yet when
        the reader comes, as happened now and then under ASan (1 run in 16-40 of test_1). The
        reader's settle must know the writer from its open for writing, not only from the
        committer's report of its closes, and so wait for those commits and give the slot's
        kept version back before the listing (fs_settle_for_reader). Without that, the reader
        read the torn version ('model_tp0_pp0.pt at step 4', the optimizer cut at 100,000
        bytes)."""
        m = ckfs.Mount()
        try:
            m.env['CKPTFS_FAULT'] = 'commit-before-index@300'
            m.start()
            self.rewrite_cut_short(m)
        finally:
            m.close()

    def test_2_daemon_killed_during_rewrite(self):
        with ckfs.Mount() as m:
            d = m.path('snapshot', '1')
            save_slot(d, 2)
            save_slot(d, 4)
            self.assertEqual(slot_view(d), expected([2, 4], 4))
            with subprocess.Popen([PYTHON, '-c', REWRITE, d, '6', 'wait'], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE) as p:
                self.assertEqual(p.stdout.readline(), b'torn\n')
                m.kill_daemon()
                p.stdin.close()
                p.wait(timeout=60)
            m.start()
            self.assertEqual(slot_view(m.path('snapshot', '1')), expected([2, 4], 4),
                             m.log_tail())

    def test_3_abandoned_step_leaves_listing_at_once(self):
        with ckfs.Mount() as m:
            for step in (10, 20):
                d = m.path('checkpoint-%d' % step)
                os.mkdir(d)
                with open(os.path.join(d, 'config.json'), 'w') as f:
                    f.write('{"step": %d}' % step)
                if step == 10:
                    with open(os.path.join(d, 'trainer_state.json'), 'w') as f:
                        f.write('{"global_step": 10}')
            # checkpoint-20's writer: a process that exits after config.json, unsealed
            code = ('import os, sys\nd = sys.argv[1]\nos.mkdir(d)\n'
                    'open(os.path.join(d, "config.json"), "w").write("{}")\nos._exit(0)\n')
            subprocess.run([PYTHON, '-c', code, m.path('checkpoint-30')], check=True,
                           timeout=60)
            t0 = time.monotonic()
            names = sorted(os.listdir(m.mnt))
            # checkpoint-20 was written by this test process, which lives: it stays
            self.assertEqual(names, ['checkpoint-10', 'checkpoint-20'],
                             'listed %.3fs after the writer exited%s' % (
                                 time.monotonic() - t0, m.log_tail()))
            self.assertFalse(os.path.exists(m.path('checkpoint-30')))
            self.assertEqual([n.split('.')[0] for n in
                              os.listdir(m.path('.ckptfs', 'quarantine'))], ['checkpoint-30'])
            self.assertIn("step 'checkpoint-30' (hf): writing -> incomplete", m.log_tail())

    def test_3b_listing_across_a_restore_lists_the_slot_once(self):
        """A listing open while the slot is restored shows its name once. The kept version
        comes back under the slot's name with its own dentry, newer than the torn one's, so a
        listing that went on from the torn one's readdir offset showed `0` again (CI on
        eb0fb09: os.listdir(snapshot) == ['0', '0']). A listing is served from what the
        directory held when it was opened (or rewound)."""
        with ckfs.Mount() as m:
            d = m.path('snapshot', '0')
            save_slot(d, 2)
            ckfs.wait_for('slot 0 to complete', lambda: 'sealed -> complete' in m.log_tail(), 20,
                          m.log_tail)
            with subprocess.Popen([PYTHON, '-c', REWRITE, d, '4', 'wait'], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE) as p:
                self.assertEqual(p.stdout.readline(), b'torn\n')
                with os.scandir(m.path('snapshot')) as it:
                    # the first READDIR: '.', '..' and the torn version's '0'
                    self.assertEqual(next(it).name, '0')
                    p.stdin.close()
                    p.wait(timeout=60)
                    ckfs.wait_for('the slot to be restored', lambda: 'restored' in m.log_tail(),
                                  20, m.log_tail)
                    # the next READDIR goes on after the torn version's offset
                    self.assertEqual([e.name for e in it], [], m.log_tail())
            self.assertEqual(os.listdir(m.path('snapshot')), ['0'])
            self.assertEqual(slot_view(d), expected([2], 2), m.log_tail())

    def test_4_retention_prunes_steps_not_slots(self):
        """-o keep_checkpoint_max prunes InternEvo steps; slots are not counted and never
        pruned; a `<step>_hf/` conversion folder is part of nothing and stays."""
        with ckfs.Mount(opts=('keep_checkpoint_max=2',)) as m:
            save_slot(m.path('snapshot', '0'), 1)
            for step in (2, 4, 6, 8):
                save_slot(m.path(str(step)), step)
                if step == 6:
                    os.mkdir(m.path('6_hf'))
                    with open(m.path('6_hf', 'model.safetensors'), 'wb') as f:
                        f.write(b'converted')
            ckfs.wait_for('steps 2 and 4 to be pruned',
                          lambda: sorted(os.listdir(m.mnt)) == ['6', '6_hf', '8', 'snapshot'], 20,
                          lambda: '%s%s' % (os.listdir(m.mnt), m.log_tail()))
            self.assertEqual(slot_view(m.path('snapshot', '0')), expected([1], 1))
            self.assertEqual(slot_view(m.path('8')), expected([8], 8))
            self.assertEqual(ckfs.read_bytes(m.path('6_hf', 'model.safetensors')),
                             b'converted')


    def test_5_digit_directories_without_internevo_evidence_stay_ordinary(self):
        """A directory named by digits is InternEvo's only where InternEvo's evidence is (its
        `N.step` marker, `snapshot/`). xfstests names its work directories `$$` and `$seq`, a
        user keeps `2024/` of logs: files closed by an exiting shell must not make them torn
        steps, read-only, then gone from the listing (issue 42 item 6). A digit directory with
        its marker is still a step."""
        with ckfs.Mount() as m:
            subprocess.run(['/bin/sh', '-c',
                            'mkdir 2024; mkdir 2024/sub; echo x > 2024/sub/log; '
                            'mkdir 12345; echo y > 12345/f; /bin/sh -c "echo z > 12345/g"'],
                           cwd=m.mnt, check=True, timeout=60)
            save_slot(m.path('300'), 300)
            time.sleep(2.5)
            self.assertEqual(sorted(os.listdir(m.mnt)), ['12345', '2024', '300'], m.log_tail())
            os.mkdir(m.path('2024', 'sub2'))
            os.mkdir(m.path('12345', 'sub'))
            with open(m.path('2024', 'sub2', 'more'), 'w') as f:
                f.write('more')
            self.assertEqual(ckfs.read_bytes(m.path('2024', 'sub', 'log')), b'x\n')
            self.assertEqual(ckfs.read_bytes(m.path('12345', 'f')), b'y\n')
            self.assertEqual(ckfs.read_bytes(m.path('12345', 'g')), b'z\n')
            self.assertEqual(ckfs.read_bytes(m.path('2024', 'sub2', 'more')), b'more')
            self.assertEqual(os.listdir(m.path('.ckptfs', 'quarantine')), [], m.log_tail())
            self.assertNotIn('torn', m.log_tail())
            self.assertIn("step '300' (internevo): sealed -> complete", m.log_tail())
            self.assertEqual(slot_view(m.path('300')), expected([300], 300))


class LateClaimTest(unittest.TestCase):
    """A complete Megatron step saved again in place by writers that exit before the trainer's
    claim. Megatron's async save (--async-save) writes each file in a forked process that
    fsyncs it and exits (megatron/core/dist_checkpointing/strategies/filesystem_async.py @
    00caa53, FileSystemWriterAsync.write_preloaded_data_multiproc: mp.get_context("fork"),
    one ctx.Process per bucket running write_preloaded_data), and the trainer writes
    latest_checkpointed_iteration.txt afterwards (iter_finalize_fn; tests/traces/megatron.md).
    The second save is set aside once its writers are gone and the first put back; the claim
    that arrives then must bring the second save back over it, not leave the first one named."""

    def test_a_claim_after_the_writers_exited_takes_the_second_save(self):
        ckfs.check_fuse_usable()
        m = ckfs.Mount()
        m.start()
        self.addCleanup(m.close)
        want = ckfs.megatron_save_per_node([m, m], 20, 'first', 64 << 10)
        ckfs.wait_for('step 20 complete', lambda: m.read_text(ckfs.TRACKER) == '20', 20,
                      m.log_tail)
        for r in (0, 1):
            rel = ckfs.megatron_rank_file(20, r)
            want[rel] = ckfs.content('second step 20 rank %d' % r, 64 << 10)
            ckfs.write_exiting(m.path(rel), want[rel])
        ckfs.wait_for('the second save set aside', lambda: 'restored' in m.log_tail(50), 20,
                      m.log_tail)
        with open(m.path(ckfs.TRACKER), 'w') as f:
            f.write('20')
        ckfs.wait_for('the second save at iter_0000020',
                      lambda: all(ckfs.read_bytes(m.path(f)) == d for f, d in want.items()),
                      20, lambda: m.log_tail(20) + m.status_text())
        self.assertEqual(m.read_text(ckfs.TRACKER), '20')

def hf_save_files(n):
    """{name: bytes} of step n as transformers' Trainer writes it, in that order: the weights
    (safetensors: u64 LE header length, JSON header, the bytes), then trainer_state.json, its
    marker."""
    w = ckfs.content('weights-%d' % n, 4096 + 8 * n)
    h = json.dumps({'w': {'dtype': 'U8', 'shape': [len(w)],
                          'data_offsets': [0, len(w)]}}).encode()
    h += b' ' * (-len(h) % 8)
    return {'model.safetensors': struct.pack('<Q', len(h)) + h + w,
            'trainer_state.json': json.dumps({'global_step': n}).encode()}


def hf_save(m, n):
    """Step n saved into checkpoint-N/ (hf_save_files). Returns {relative path: bytes}."""
    d = 'checkpoint-%d' % n
    os.mkdir(m.path(d))
    want = {}
    for name, data in hf_save_files(n).items():
        with open(m.path(d, name), 'wb') as f:
            f.write(data)
        want[os.path.join(d, name)] = data
    return want


def renamed(want, old, new):
    """want with the directory old of its paths renamed to new."""
    return {new + rel[len(old):] if rel.startswith(old + '/') else rel: d
            for rel, d in want.items()}


class RenamedAwayTest(unittest.TestCase):
    """A complete (or copied) step directory renamed by hand within the mount: what a user does to
    keep a step out of the way (a loss spike to look at, a rollback without stopping the job). Its
    version leaves the lineage and its files stay as they are; renamed back to its name, it is
    a step of the lineage again."""

    def mount(self, opts=()):
        ckfs.check_fuse_usable()
        m = ckfs.Mount(opts=list(opts))
        m.start()
        self.addCleanup(m.close)
        return m

    def files_equal(self, m, want):
        for rel, data in want.items():
            self.assertEqual(summary(ckfs.read_bytes(m.path(rel))), summary(data), rel)

    def state(self, m, name):
        """The state ckptctl steps lists for the newest row of step name, or None."""
        r = m.ckptctl('steps', json_out=True)
        rows = [s for s in json.loads(r.stdout)['steps'] if s['name'] == name]
        return rows[-1]['state'] if rows else None

    def complete(self, m, name, state='complete'):
        """Wait until ckptctl steps lists step name (its newest row) in state."""
        ckfs.wait_for('step %s %s' % (name, state), lambda: self.state(m, name) == state, 20,
                      m.log_tail)

    def test_retention_keeps_a_step_renamed_out_of_the_lineage(self):
        m = self.mount(['layout=hf', 'keep_checkpoint_max=2'])
        kept = hf_save(m, 10)
        spike = hf_save(m, 20)
        self.complete(m, 'checkpoint-20')
        os.rename(m.path('checkpoint-20'), m.path('checkpoint-20.spike'))
        spike = renamed(spike, 'checkpoint-20', 'checkpoint-20.spike')
        os.mkdir(m.path('keep'))
        os.rename(m.path('checkpoint-10'), m.path('keep', 'checkpoint-10'))
        kept = renamed(kept, 'checkpoint-10', 'keep/checkpoint-10')
        for n in (20, 30, 40):
            hf_save(m, n)
            self.complete(m, 'checkpoint-%d' % n)
        # retention kept two steps of the lineage; the directories moved away are not of it
        top = ['checkpoint-20.spike', 'checkpoint-30', 'checkpoint-40', 'keep']
        self.assertEqual(sorted(os.listdir(m.mnt)), top, m.log_tail(30))
        self.files_equal(m, spike)
        self.files_equal(m, kept)
        m.remount()
        self.assertEqual(sorted(os.listdir(m.mnt)), top, m.log_tail(30))
        self.files_equal(m, spike)
        self.files_equal(m, kept)
        log = m.log_tail(60)
        self.assertIn("its directory was renamed to 'checkpoint-20.spike'", log)
        self.assertIn("its directory was renamed to 'keep/checkpoint-10'", log)

    def test_a_step_moved_into_another_step_goes_with_it_and_says_so(self):
        """`mv checkpoint-10 checkpoint-20` when checkpoint-20 exists moves step 10 inside
        step 20, as mv does. Step 10 leaves the lineage, but its files are step 20's tree now:
        retention's pruning of step 20 removes them, as a trainer's own rotation (an rmtree of
        the step) would. On 715ed37 the log said "its files stay there" all the same, and worse:
        every later save was compared with step 20's names, the moved step's among them, so
        checkpoint-30 stayed sealed, "waiting for its writers" for files no save writes (rule
        2's check against the previous complete step), and would be quarantined once its
        writer is gone."""
        m = self.mount(['layout=hf', 'keep_checkpoint_max=2'])
        hf_save(m, 10)
        self.complete(m, 'checkpoint-10')
        hf_save(m, 20)
        self.complete(m, 'checkpoint-20')
        os.rename(m.path('checkpoint-10'), m.path('checkpoint-20', 'checkpoint-10'))
        self.assertEqual(self.state(m, 'checkpoint-10'), 'pruned', m.log_tail(20))
        self.assertIn("its directory was renamed to 'checkpoint-20/checkpoint-10', inside step "
                      "'checkpoint-20': it leaves the lineage, and its files go with that step "
                      "when retention removes it", m.log_tail(20))
        for n in (30, 40):
            hf_save(m, n)
            self.complete(m, 'checkpoint-%d' % n)
        ckfs.wait_for('step 20 pruned', lambda: self.state(m, 'checkpoint-20') == 'pruned', 20,
                      m.log_tail)
        self.assertEqual(sorted(os.listdir(m.mnt)), ['checkpoint-30', 'checkpoint-40'],
                         m.log_tail(20))

    def test_a_whole_step_staged_under_another_name_and_renamed_into_place_is_complete(self):
        """A step copied in under a staging name, then renamed to its step's name (`cp -r
        /backup/checkpoint-20 staging && mv staging checkpoint-20`): its files, the marker
        among them, were committed before the rename, so no close seals it afterwards; its
        marker inside seals it at the rename, as the marker's close seals a step copied in
        under its own name. On 237ae20 the step was 'writing -> incomplete: never sealed, no
        writer left' and set aside in .ckptfs/quarantine, out of the trainer's sight."""
        m = self.mount(['layout=hf'])
        hf_save(m, 10)
        self.complete(m, 'checkpoint-10')
        want = {}
        os.mkdir(m.path('staging'))
        for rel, data in hf_save_files(20).items():
            with open(m.path('staging', rel), 'wb') as f:
                f.write(data)
            want[os.path.join('checkpoint-20', rel)] = data
        m.settle()   # every file committed under the staging name
        os.rename(m.path('staging'), m.path('checkpoint-20'))
        self.complete(m, 'checkpoint-20')
        m.remount()
        self.assertEqual(sorted(os.listdir(m.mnt)), ['checkpoint-10', 'checkpoint-20'],
                         m.log_tail(20))
        self.assertEqual(os.listdir(m.path('.ckptfs', 'quarantine')), [], m.log_tail(20))
        self.files_equal(m, want)

    def test_the_tracker_skips_a_step_renamed_away_and_names_it_once_back(self):
        m = self.mount()
        ckfs.megatron_save_per_node([m, m], 10, 'a', 64 << 10)
        want = ckfs.megatron_save_per_node([m, m], 20, 'a', 64 << 10)
        ckfs.wait_for('step 20 complete', lambda: m.read_text(ckfs.TRACKER) == '20', 20,
                      m.log_tail)
        os.rename(m.path('iter_0000020'), m.path('iter_0000020.bad'))
        # Megatron's resume reads the tracker and opens iter_<N>/: it must name a directory
        # that is there
        self.assertEqual(m.read_text(ckfs.TRACKER), '10', m.log_tail(20))
        self.files_equal(m, renamed(want, 'iter_0000020', 'iter_0000020.bad'))
        # a rollback to it says where it went and how it comes back (it said "no step '20'")
        r = m.ckptctl('rollback', '20')
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("step 'iter_0000020' left the lineage: its directory was renamed to "
                      "'iter_0000020.bad'; rename it back to 'iter_0000020'", r.stderr)
        self.assertEqual(m.read_text(ckfs.TRACKER), '10', m.log_tail(20))
        os.rename(m.path('iter_0000020.bad'), m.path('iter_0000020'))
        ckfs.wait_for('the tracker naming 20 again', lambda: m.read_text(ckfs.TRACKER) == '20',
                      20, lambda: m.log_tail(20))
        self.complete(m, 'iter_0000020')
        m.remount()
        self.assertEqual(m.read_text(ckfs.TRACKER), '20', m.log_tail(20))
        self.assertEqual(sorted(os.listdir(m.mnt)),
                         ['iter_0000010', 'iter_0000020', ckfs.TRACKER])
        self.files_equal(m, want)

    def test_a_copied_step_renamed_away_is_neither_claimed_nor_removed(self):
        """A step copied in (`cp -r`, no claim yet: `copied`) and then renamed away by hand
        (`mv iter_0000020 iter_0000020.keep`). On e100190 its row kept its name: `echo 20 >` the
        tracker then completed it, so the tracker read 20 with no iter_0000020 to load, and
        retention then removed the user's iter_0000020.keep ('complete -> pruned: retention').
        Now it leaves the lineage as a complete step does: the claim is not taken, retention
        keeps the directory, across a crash of the daemon too; renamed back it is a copy again,
        which a claim completes."""
        m = self.mount(['keep_checkpoint_max=1'])
        ckfs.megatron_save_per_node([m, m], 10, 'a', 64 << 10)
        ckfs.wait_for('step 10 claimed', lambda: m.read_text(ckfs.TRACKER) == '10', 20,
                      m.log_tail)
        plain = os.path.join(m.tmp, 'plain')
        want = {}
        for r in range(2):   # a backup made outside the mount, copied in by another process
            rel = ckfs.megatron_rank_file(20, r)
            want[rel] = ckfs.content('backup step 20 rank %d' % r, 64 << 10)
            os.makedirs(os.path.dirname(os.path.join(plain, rel)))
            with open(os.path.join(plain, rel), 'wb') as f:
                f.write(want[rel])
        r = ckfs.run(['cp', '-r', os.path.join(plain, 'iter_0000020'), m.mnt + '/'], timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.complete(m, 'iter_0000020', 'copied')
        os.rename(m.path('iter_0000020'), m.path('iter_0000020.keep'))
        kept = renamed(want, 'iter_0000020', 'iter_0000020.keep')
        self.assertEqual(self.state(m, 'iter_0000020'), 'pruned', m.log_tail(20))
        m.kill_daemon()
        m.start()
        # a claim of the step names no directory: the tracker keeps naming a step that is there
        with open(m.path(ckfs.TRACKER), 'w') as f:
            f.write('20')
        self.assertEqual(m.read_text(ckfs.TRACKER), '10', m.log_tail(20))
        for n in (30, 40):   # retention (keep 1) prunes 10 and 30, not the directory kept
            ckfs.megatron_save_per_node([m, m], n, 'a', 64 << 10)
            self.complete(m, 'iter_%07d' % n)
        ckfs.wait_for('step 30 pruned', lambda: self.state(m, 'iter_0000030') == 'pruned', 20,
                      m.log_tail)
        self.assertEqual(sorted(os.listdir(m.mnt)),
                         ['iter_0000020.keep', 'iter_0000040', ckfs.TRACKER], m.log_tail(20))
        self.files_equal(m, kept)
        self.assertIn("its directory was renamed to 'iter_0000020.keep'", m.log_tail(60))
        # back at its name it is the copy it was: named by no tracker until a claim. `mv`, a
        # process that exits: a directory renamed in is judged once its renamer is gone
        r = ckfs.run(['mv', m.path('iter_0000020.keep'), m.path('iter_0000020')], timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.complete(m, 'iter_0000020', 'copied')
        self.assertEqual(m.read_text(ckfs.TRACKER), '40', m.log_tail(20))
        with open(m.path(ckfs.TRACKER), 'w') as f:
            f.write('20')
        self.assertEqual(m.read_text(ckfs.TRACKER), '20', m.log_tail(20))
        self.complete(m, 'iter_0000020')
        self.files_equal(m, want)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(500, exit=True)
    unittest.main(verbosity=2)
