#!/usr/bin/python3
"""Lineage (issue 40, policy rule 6): trackers follow the trainer's claims in the order they were
made, and retention counts only the current lineage. Real trainers (tests/e2e/trainer.py, 2 ranks
over gloo), real mounts.

  new_run   An earlier run left steps 5 and 10 (Megatron, DeepSpeed, MindFormers 2.0 and 1.0) under
            -o keep_checkpoint_max=2. A new run in the same directory (a fresh fine-tune, a
            counter that restarted) saves 2 and 4. On cb3ae28 the tracker still read 10 after
            each save, so a restarted trainer resumed the old run, and retention pruned 2 and 4
            ("complete -> pruned: retention") to keep 5 and 10. Now the tracker names 4, a
            resume (after a remount) lands on 4 bit-exact, 2 and 4 are kept, and the earlier
            run's steps are kept too, named by no tracker. Hugging Face and DCP (resolved by
            scanning): the new run saves 2, 4, 6; retention keeps its 4 and 6 and the earlier
            run's 5 and 10 (on ac5022b it pruned 2, 4 and 5 to keep 6 and 10).
  rollback  A run saved 2, 4, 6, 8; `echo 4 > latest_checkpointed_iteration.txt` (the usual
            answer to a loss spike) returned 0 and read back 8 on cb3ae28. Now it reads 4 back,
            after a remount too, and a resume lands on step 4 bit-exact.
  copied    Steps copied in with `cp -r` stay listed as `copied` until a claim completes them
            or `ckptctl drop` removes them (policy rule 3).

Environment: CKPTFS_BIN, CKPTCTL_BIN (../lib/ckfs.py).
Run: /usr/bin/python3 tests/e2e/test_lineage.py [-v]
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from trainers import Trainer  # noqa: E402

# the tracker, what it reads for step n, and step n's directory, per layout (tests/traces/)
LAYOUTS = {
    'megatron': ('latest_checkpointed_iteration.txt', str, lambda n: 'iter_%07d' % n),
    'deepspeed': ('latest', lambda n: 'global_step%d' % n, lambda n: 'global_step%d' % n),
    'mf2': ('latest_checkpointed_iteration.txt', str, lambda n: 'iteration_%08d' % n),
    # MindFormers 1.0: each rank's meta.json (last_step read here), steps named epoch_step
    'mf1': ('rank_0/meta.json', str, lambda n: '1_%d' % n),
}
# layouts whose trainer resumes from the highest step it finds by scanning: no tracker
SCANNED = {
    'hf': lambda n: 'checkpoint-%d' % n,
    'dcp': lambda n: 'step-%d' % n,
}


def run(layout, mnt, log, steps, every, resume=False):
    """Run a trainer to its end; returns its stdout lines after asserting exit 0."""
    t = Trainer(layout, mnt, log, steps=steps, every=every, resume=resume)
    try:
        rc = t.wait()
        if rc != 0:
            raise AssertionError('trainer %s exited %d%s' % (' '.join(t.argv), rc, t.tail()))
        return list(t.lines)
    finally:
        t.close()


class TestLineage(unittest.TestCase):
    def states(self, m):
        """{step directory name: state} from ckptctl steps --json"""
        r = m.ckptctl('steps', json_out=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return {s['name']: s['state'] for s in json.loads(r.stdout)['steps']}

    def read_tracker(self, m, layout):
        with open(m.path(LAYOUTS[layout][0])) as f:
            text = f.read().strip()
        return str(json.loads(text)['last_step']) if layout == 'mf1' else text

    def resume_lands_on(self, m, layout, log, step):
        """A fresh trainer resumes (the trainer checks every file it loads against the hashes
        the saving run logged, and the state's digest) and stops at once."""
        out = run(layout, m.mnt, log, steps=step, every=1000, resume=True)
        resumed = [ln for ln in out if ln.startswith('RESUMED ')]
        self.assertTrue(resumed and resumed[0].startswith('RESUMED step=%d ' % step),
                        '%s resumed %s, wanted step %d' % (layout, resumed or out[-5:], step))

    def new_run(self, layout):
        tracker, reads, dname = LAYOUTS[layout]
        with ckfs.Mount(opts=('keep_checkpoint_max=2',)) as m:
            run(layout, m.mnt, os.path.join(m.tmp, 'old.log'), steps=10, every=5)
            self.assertEqual(self.read_tracker(m, layout), reads(10))
            new_log = os.path.join(m.tmp, 'new.log')
            run(layout, m.mnt, new_log, steps=4, every=2)   # a fresh run: FRESH, saves 2 and 4
            m.settle()
            self.assertEqual(self.read_tracker(m, layout), reads(4),
                             'the tracker names the new run\'s last save')
            st = self.states(m)
            for n in (2, 4, 5, 10):
                self.assertEqual(st.get(dname(n)), 'complete', '%s: %s' % (dname(n), st))
            other = {s['name'] for s in json.loads(m.ckptctl('steps', json_out=True).stdout)['steps']
                     if s['other_lineage']}
            self.assertEqual(other, {dname(5), dname(10)}, 'ckptctl steps names the old run')
            listed = os.listdir(m.mnt if layout != 'mf1' else m.path('rank_0'))
            for n in (2, 4, 5, 10):
                self.assertTrue([x for x in listed if x == dname(n) or
                                 x.endswith('-%s.ckpt' % dname(n))], '%s: %s' % (n, listed))
            m.unmount()
            m.start()
            self.assertEqual(self.read_tracker(m, layout), reads(4), 'after a remount')
            self.resume_lands_on(m, layout, new_log, 4)

    def test_new_run_megatron(self):
        self.new_run('megatron')

    def test_new_run_deepspeed(self):
        self.new_run('deepspeed')

    def test_new_run_mf2(self):
        self.new_run('mf2')

    def test_new_run_mf1(self):
        """MindFormers 1.0: on 8c04640 each rank's meta.json still named 10 after the new
        run's saves, retention pruned its 1_2 and 1_4, and the resume found no step."""
        self.new_run('mf1')

    def new_run_scanned(self, layout):
        """A layout resolved by scanning: the trainer's choice of the highest number stands (a
        resume lands on the earlier run's 10), but retention follows the lineage: the new run
        saves 2, 4, 6 under keep_checkpoint_max=2 and keeps its own two newest, 4 and 6; its 2
        is pruned to keep them, never to keep the earlier run's 5 and 10, which stay, counted
        and pruned by no one, listed as another lineage."""
        dname = SCANNED[layout]
        with ckfs.Mount(opts=('keep_checkpoint_max=2',)) as m:
            old_log = os.path.join(m.tmp, 'old.log')
            run(layout, m.mnt, old_log, steps=10, every=5)                  # 5 10
            run(layout, m.mnt, os.path.join(m.tmp, 'new.log'), steps=6, every=2)  # 2 4 6
            m.settle()

            def judged():
                st = self.states(m)
                return st if all(st.get(dname(n)) not in (None, 'writing', 'sealed')
                                 for n in (2, 4, 6, 5, 10)) else None
            st = ckfs.wait_for('every step judged', judged, extra=m.log_tail)
            self.assertEqual([st.get(dname(n)) for n in (2, 4, 6, 5, 10)],
                             ['pruned', 'complete', 'complete', 'complete', 'complete'],
                             '%s%s' % (st, m.log_tail()))
            other = {s['name'] for s in json.loads(m.ckptctl('steps', json_out=True).stdout)['steps']
                     if s['other_lineage']}
            self.assertEqual(other, {dname(5), dname(10)}, 'ckptctl steps names the old run')
            listed = os.listdir(m.mnt)
            for n in (4, 6, 5, 10):
                self.assertIn(dname(n), listed)
            self.assertNotIn(dname(2), listed)
            m.unmount()
            m.start()
            self.assertEqual(self.states(m), st, 'after a remount')
            self.resume_lands_on(m, layout, old_log, 10)

    def test_new_run_hf_retention(self):
        self.new_run_scanned('hf')

    def test_new_run_dcp_retention(self):
        self.new_run_scanned('dcp')

    def test_rollback_by_tracker_write(self):
        layout = 'megatron'
        tracker, reads, dname = LAYOUTS[layout]
        with ckfs.Mount(opts=('keep_checkpoint_max=3',)) as m:
            log = os.path.join(m.tmp, 'run.log')
            run(layout, m.mnt, log, steps=8, every=2)      # saves 2 4 6 8; retention drops 2
            self.assertEqual(self.read_tracker(m, layout), '8')
            with open(m.path(tracker), 'w') as f:
                f.write('4')
            self.assertEqual(self.read_tracker(m, layout), '4', 'the rollback reads back')
            st = self.states(m)
            for n in (4, 6, 8):
                self.assertEqual(st.get(dname(n)), 'complete', st)
            m.unmount()
            m.start()
            self.assertEqual(self.read_tracker(m, layout), '4', 'after a remount')
            self.resume_lands_on(m, layout, log, 4)
            # rolling forward again is a claim like any other
            with open(m.path(tracker), 'w') as f:
                f.write('8')
            self.assertEqual(self.read_tracker(m, layout), '8')

    def test_complete_step_changed_in_place(self):
        """Issue 40.3: `truncate -s 100000` of a file in a complete step succeeded on cb3ae28, the
        tracker still named it, ckptctl said complete, and the resume's torch.load failed. Now a
        change starts a new version: while it is open no tracker names the step; left unsealed,
        it is set aside and the complete version comes back, so a resume lands on the step as it
        was saved, bit-exact; the trainer saving the step again completes a new version."""
        layout = 'megatron'
        with ckfs.Mount() as m:
            log = os.path.join(m.tmp, 'run.log')
            run(layout, m.mnt, log, steps=4, every=2)
            self.assertEqual(self.read_tracker(m, layout), '4')
            f = m.path('iter_0000004', 'mp_rank_00', 'model_optim_rng.pt')
            size = os.path.getsize(f)
            # a writer holds the file open, truncated: the step is not what a tracker names
            w = subprocess.Popen(['/usr/bin/python3', '-c',
                                  'import os,sys; f=open(sys.argv[1], "r+b"); f.truncate(100000);'
                                  ' f.flush(); sys.stdin.read()', f],
                                 stdin=subprocess.PIPE)
            try:
                ckfs.wait_for('the truncate', lambda: os.path.getsize(f) == 100000)
                self.assertEqual(self.read_tracker(m, layout), '2',
                                 'a step being changed is not named')
            finally:
                w.stdin.close()
                w.wait(timeout=30)
            # the change, left unsealed, is set aside; the complete version is back
            ckfs.wait_for('step 4 back', lambda: self.read_tracker(m, layout) == '4',
                          extra=m.log_tail)
            self.assertEqual(os.path.getsize(f), size)
            states = sorted(s['state'] for s in json.loads(
                m.ckptctl('steps', json_out=True).stdout)['steps'] if s['name'] == 'iter_0000004')
            self.assertEqual(states, ['complete', 'incomplete'])
            self.resume_lands_on(m, layout, log, 4)
            # ckptctl's STEP names the version at the step's name, not the one set aside
            r = ckfs.run([ckfs.ckptctl_bin(), m.mnt, 'rollback', '4'], timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(self.read_tracker(m, layout), '4')
            # the trainer saving step 4 again (a resume from 2): a new version, complete
            with open(m.path(LAYOUTS[layout][0]), 'w') as t:
                t.write('2')                       # a rollback to 2 first
            self.assertEqual(self.read_tracker(m, layout), '2')
            run(layout, m.mnt, log, steps=4, every=2, resume=True)
            self.assertEqual(self.read_tracker(m, layout), '4')
            self.resume_lands_on(m, layout, log, 4)
            states = sorted(s['state'] for s in json.loads(
                m.ckptctl('steps', json_out=True).stdout)['steps'] if s['name'] == 'iter_0000004')
            self.assertEqual(states, ['complete', 'incomplete', 'pruned'],
                             'the earlier version is pruned once the new one is complete')

    def test_rollback_to_a_step_whose_rewrite_was_set_aside(self):
        """A rollback names the version of the step at its name, never a rewrite set aside. Found
        by the crash loop of rollbacks (tests/torture/test_crash_lineage.py, a3bbc51, round 5): a
        trainer killed while saving step 4 again left a rewrite whose files were each whole (a
        sound file from the new save, the rest as they were), set aside with the complete version
        back at the name; `ckptctl rollback 4` then wrote a claim of step 4 whose seal went to the
        newest row of that name, the rewrite: "incomplete -> sealed: tracker claim", the complete
        version sent back to retained, and the resume read the mix. Here a rewrite is step 2's
        files copied over step 4's by a process that exits without a claim: first rank 0's only
        (a save cut short), then a rollback by a tracker write, which seals step 4 but brings no
        mix back; then both ranks' (whole, but never claimed), then `ckptctl rollback 4`, which
        names the version `ckptctl steps` shows at the name."""
        layout = 'megatron'
        tracker = LAYOUTS[layout][0]
        with ckfs.Mount() as m:
            log = os.path.join(m.tmp, 'run.log')
            run(layout, m.mnt, log, steps=6, every=2)                      # 2 4 6
            ranks = ['mp_rank_00', 'mp_rank_01']
            saved = {r: ckfs.read_bytes(m.path('iter_0000004', r, 'model_optim_rng.pt'))
                     for r in ranks}

            def rewrite(rs, aside):
                for r in rs:
                    p = ckfs.run(['cp', m.path('iter_0000002', r, 'model_optim_rng.pt'),
                                  m.path('iter_0000004', r, 'model_optim_rng.pt')], timeout=60)
                    self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                ckfs.wait_for('the rewrite set aside', lambda: sorted(
                    s['state'] for s in json.loads(m.ckptctl('steps', json_out=True).stdout)[
                        'steps'] if s['name'] == 'iter_0000004') ==
                    ['complete'] + ['incomplete'] * aside, extra=m.log_tail)

            def check(how):
                self.assertEqual(self.read_tracker(m, layout), '4', how)
                self.assertNotIn('incomplete -> sealed', m.log_tail(50),
                                 '%s sealed the rewrite set aside' % how)
                for r in ranks:
                    self.assertTrue(ckfs.read_bytes(m.path('iter_0000004', r,
                                                           'model_optim_rng.pt')) == saved[r],
                                    '%s: step 4 %s is not the version saved' % (how, r))

            rewrite(ranks[:1], 1)
            with open(m.path(tracker), 'w') as t:
                t.write('4')
            check('a tracker write')
            rewrite(ranks, 2)
            r = ckfs.run([ckfs.ckptctl_bin(), m.mnt, 'rollback', '4'], timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            check('ckptctl rollback')
            self.resume_lands_on(m, layout, log, 4)

    def test_complete_step_appended_or_unlinked(self):
        """Issue 40.3, the other two changes: `echo >>` into a file of a complete step only set a
        `malformed` flag on cb3ae28, and an unlink took the file from the step the tracker names.
        An append is a new version that, left unsealed, is set aside (the complete version comes
        back at its name); an unlinked file of the step the tracker names is back when a tracker
        read resolves to it. Each time the resume lands on step 4 bit-exact."""
        layout = 'megatron'
        with ckfs.Mount() as m:
            log = os.path.join(m.tmp, 'run.log')
            run(layout, m.mnt, log, steps=4, every=2)
            f = m.path('iter_0000004', 'mp_rank_00', 'model_optim_rng.pt')
            size = os.path.getsize(f)
            r = subprocess.run(['sh', '-c', 'echo appended >> "$1"', 'sh', f])
            self.assertEqual(r.returncode, 0)
            ckfs.wait_for('the appended version set aside, step 4 back',
                          lambda: self.read_tracker(m, layout) == '4' and
                          os.path.getsize(f) == size, extra=m.log_tail)
            self.resume_lands_on(m, layout, log, 4)
            os.unlink(f)
            self.assertEqual(self.read_tracker(m, layout), '4', 'the tracker after the unlink')
            self.assertEqual(os.path.getsize(f), size, 'the file is back for a resuming reader')
            self.resume_lands_on(m, layout, log, 4)

    def test_drop_and_pin_while_a_job_saves(self):
        """Issue 40.4 and 40.5 while training runs: a torn save set aside is dropped, and a
        complete step pinned and another dropped, while a 2-rank job saves every 2 steps; the job
        goes on unharmed, retention keeps the pinned step until it is unpinned, and a resume
        lands on the job's last save bit-exact."""
        layout = 'megatron'
        with ckfs.Mount(opts=('keep_checkpoint_max=4',)) as m:
            log = os.path.join(m.tmp, 'run.log')
            run(layout, m.mnt, log, steps=4, every=2)                      # 2 4
            # a torn save of step 100 by two processes that exit without a claim: set aside
            d = m.path('iter_0000100', 'mp_rank_00')
            self.assertEqual(ckfs.run(['mkdir', '-p', d], timeout=60).returncode, 0)
            r = ckfs.run(['/usr/bin/python3', '-c', 'import os,sys; open(os.path.join('
                          'sys.argv[1], "model_optim_rng.pt"), "wb").write(b"x" * 4096)', d],
                         timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            ckfs.wait_for('iter_0000100 set aside', lambda: self.states(m).get(
                'iter_0000100') == 'incomplete', extra=m.log_tail)
            t = Trainer(layout, m.mnt, log, steps=12, every=2, resume=True, slow=0.3)
            try:
                ckfs.wait_for('the job saving', lambda: self.states(m).get('iter_0000006')
                              == 'complete', timeout=60, extra=m.log_tail)
                # before 10 completes (then retention would prune 2 itself)
                for args, want in ((('drop', 'iter_0000100'), 'dropped'),
                                   (('pin', '4'), 'pinned'),
                                   (('drop', '2'), 'dropped')):
                    r = m.ckptctl(*args)
                    self.assertEqual(r.returncode, 0, '%s: %s%s' % (args, r.stderr,
                                                                     m.log_tail()))
                    self.assertIn(want, r.stdout)
                rc = t.wait()
                self.assertEqual(rc, 0, 'the job while steps were managed%s' % t.tail())
            finally:
                t.close()
            st = self.states(m)
            self.assertEqual([st['iter_0000100']] + [st['iter_%07d' % n] for n in range(2, 13, 2)],
                             ['pruned', 'pruned'] + ['complete'] * 5, st)
            self.assertEqual(self.read_tracker(m, layout), '12')
            self.resume_lands_on(m, layout, log, 12)
            r = m.ckptctl('unpin', '4')
            self.assertEqual(r.returncode, 0, r.stderr)
            ckfs.wait_for('4 pruned once unpinned',
                          lambda: self.states(m)['iter_0000004'] == 'pruned', extra=m.log_tail)

    def test_steps_managed_while_mounted(self):
        """Issue 40.5: pin, unpin, gc and friends needed the store unmounted (training stopped).
        Now ckptctl asks the daemon: a live pin keeps a step through retention, rollback makes
        the tracker name an older step and a resume lands on it bit-exact, drop removes a step
        set aside, and the step a tracker names cannot be dropped."""
        layout = 'megatron'
        with ckfs.Mount(opts=('keep_checkpoint_max=2',)) as m:
            log = os.path.join(m.tmp, 'run.log')
            run(layout, m.mnt, log, steps=4, every=2)              # 2 4
            r = m.ckptctl('pin', '2')                               # through the mount point too
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn('pinned', r.stdout)
            run(layout, m.mnt, log, steps=8, every=2, resume=True)  # 6 8: 4 pruned, 2 pinned
            st = self.states(m)
            self.assertEqual((st['iter_0000002'], st['iter_0000004'], st['iter_0000006'],
                              st['iter_0000008']), ('complete', 'pruned', 'complete', 'complete'))
            r = ckfs.run([ckfs.ckptctl_bin(), m.mnt, 'rollback', '6'], timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(self.read_tracker(m, layout), '6')
            self.resume_lands_on(m, layout, log, 6)
            r = m.ckptctl('drop', '6')
            self.assertEqual(r.returncode, 2)
            self.assertIn('tracker names', r.stderr)
            r = m.ckptctl('drop', '8')                              # the other lineage's step
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn('iter_0000008', os.listdir(m.mnt))
            self.assertEqual(self.states(m)['iter_0000008'], 'pruned')
            # a save set aside (abandoned: files by two processes, as a job's ranks, no
            # claim), dropped from the quarantine
            d = m.path('iter_0000010', 'mp_rank_00')
            ckfs.run(['mkdir', '-p', d], timeout=60)
            ckfs.run(['/usr/bin/python3', '-c', 'import os,sys; '
                      'open(os.path.join(sys.argv[1], "x.pt"), "wb").write(b"x" * 4096)', d],
                     timeout=60)
            ckfs.wait_for('step 10 set aside', lambda: (
                os.listdir(m.mnt), self.states(m).get('iter_0000010') == 'incomplete')[1])
            r = m.ckptctl('drop', 'iter_0000010')
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(os.listdir(m.path('.ckptfs', 'quarantine')), [])
            r = m.ckptctl('unpin', '2')
            self.assertEqual(r.returncode, 0, r.stderr)
            # unpinned, 2 counts again: with 6 the newest, keep_checkpoint_max=2 keeps both
            self.assertEqual(self.states(m)['iter_0000002'], 'complete')
            m.unmount()     # on a store not mounted, drop says the store must be mounted
            r = m.ckptctl('drop', '2')
            self.assertEqual(r.returncode, 2)
            self.assertIn('not mounted', r.stderr)

    def test_step_made_ahead_by_a_launcher(self):
        """Issue 40.6: `mkdir -p iter_0000002/mp_rank_00` from a shell, an `ls`, then a save into
        it got ENOENT on cb3ae28 (the empty directory was already set aside). A step directory
        of a layout with a tracker, empty and its maker gone, stays for STEP_EMPTY_GRACE_NS."""
        layout = 'megatron'
        with ckfs.Mount() as m:
            for n in (2, 4):
                r = ckfs.run(['mkdir', '-p', m.path('iter_%07d' % n, 'mp_rank_00')], timeout=30)
                self.assertEqual(r.returncode, 0, r.stderr)
            os.listdir(m.mnt)
            time.sleep(3)          # past STEP_SETTLE_NS (1.5 s), several reaper passes
            self.assertEqual(sorted(n for n in os.listdir(m.mnt) if n.startswith('iter_')),
                             ['iter_0000002', 'iter_0000004'])
            log = os.path.join(m.tmp, 'run.log')
            run(layout, m.mnt, log, steps=4, every=2)
            self.assertEqual(self.read_tracker(m, layout), '4')
            st = self.states(m)
            self.assertEqual((st.get('iter_0000002'), st.get('iter_0000004')),
                             ('complete', 'complete'), st)
            self.resume_lands_on(m, layout, log, 4)

    def test_step_copied_in(self):
        """Issue 40.6: a complete Megatron step copied in with `cp -r` (from a plain directory,
        into a mount whose tracker names an older step) vanished at the next `ls` on ac5022b:
        never claimed, its writer gone, it was set aside until a tracker named it. Now it stays
        at its name as `copied` (every file whole, its writer exited, no claim), named by no
        tracker, across a remount too; writing the tracker to name it (a claim) completes it and
        a resume lands on it bit-exact; `ckptctl drop` removes one."""
        layout = 'megatron'
        tracker, reads, dname = LAYOUTS[layout]
        with ckfs.Mount() as m:
            run(layout, m.mnt, os.path.join(m.tmp, 'run.log'), steps=2, every=2)   # 2
            self.assertEqual(self.read_tracker(m, layout), '2')
            plain = os.path.join(m.tmp, 'plain')
            plain_log = os.path.join(m.tmp, 'plain.log')
            run(layout, plain, plain_log, steps=6, every=3)                        # 3 6
            for n in (3, 6):
                r = ckfs.run(['cp', '-r', os.path.join(plain, dname(n)), m.mnt + '/'],
                             timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
            os.listdir(m.mnt)      # a reader's lookup of the root settles abandoned steps
            time.sleep(3)          # past STEP_SETTLE_NS (1.5 s), several reaper passes
            for when in ('after the copy', 'after a remount'):
                listed = os.listdir(m.mnt)
                for n in (3, 6):
                    self.assertIn(dname(n), listed, '%s: %s' % (when, m.log_tail()))
                st = self.states(m)
                self.assertEqual((st.get(dname(3)), st.get(dname(6))), ('copied', 'copied'),
                                 '%s: %s' % (when, st))
                self.assertEqual(self.read_tracker(m, layout), '2',
                                 '%s: no tracker names an unclaimed step' % when)
                self.assertEqual(os.listdir(m.path('.ckptfs', 'quarantine')), [], when)
                if when == 'after the copy':
                    m.unmount()
                    m.start()
            r = ckfs.run([ckfs.ckptctl_bin(), m.store, 'steps'], timeout=60)
            self.assertRegex(r.stdout, r'%s\s.*copied' % dname(6), r.stdout)
            # a claim of the copied step completes it
            with open(m.path(tracker), 'w') as f:
                f.write('6')
            self.assertEqual(self.read_tracker(m, layout), '6')
            self.assertEqual(self.states(m)[dname(6)], 'complete')
            self.resume_lands_on(m, layout, plain_log, 6)
            # the other copy is dropped
            r = m.ckptctl('drop', dname(3))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn(dname(3), os.listdir(m.mnt))
            self.assertEqual(self.states(m)[dname(3)], 'pruned')


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '880')),
                                      exit=True)
    unittest.main(verbosity=2)
