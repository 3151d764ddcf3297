#!/usr/bin/python3
"""Checkpoint-semantics scenarios end to end, with the real 2-rank PyTorch trainer (trainer.py)
on a real ckptfs mount. Every scenario asserts that the resumed step is a complete one and that
its files and tensors are bit-exact with what the writers logged (trainers.check_resumed).

  1 daemon_kill  for each layout (CKPTFS_E2E_LAYOUTS, default all), CKPTFS_DAEMON_ROUNDS rounds
                 (default 1): SIGKILL the DAEMON at a random moment inside a save, kill the
                 trainer's process group, fusermount3 -uz, remount the same STORE, restart the
                 trainer with --resume: it must land on the newest step the log says SAVED, or,
                 for layouts whose steps complete only once quiet (mf1, deepspeed, hf: ~1.5-2.5 s
                 after the last write), on the SAVED step before it when the newest SAVED step
                 was still settling at the kill (said so in the output); never a torn step. The
                 resumed job must then complete its next save. Prints
                 `layout L: P/N daemon-kill rounds resumed to a complete step`.
  2 corrupt      Megatron, saves 2 4 6; unmounted, one payload byte of a chunk that only step 6
                 uses is flipped; after the remount the tracker names 4, a resume lands on 4
                 bit-exact, step 6 is corrupt (ckptctl steps, .ckptfs/steps) and out of `ls`,
                 and ckptctl verify exits 1 naming the damaged file.
  3 junk_tracker Megatron, saves 2 4; junk written into latest_checkpointed_iteration.txt (not a
                 number, "../../etc/passwd", 10 MB of random bytes, an empty write): each write
                 succeeds or fails with an errno, the tracker still reads 4, ckptctl claims lists
                 the junk as unparseable (step null), a resume lands on 4.
  4 retention    Megatron with -o keep_checkpoint_max=2: a save killed half-way is not counted
                 (the two newest complete steps stay); after 6 complete saves exactly the 2 newest
                 remain in `ls`, the older are pruned (ckptctl steps) and their chunks reclaimed
                 (the store's chunk bytes are those of the steps left); with keep_every=4 the steps divisible by
                 4 also remain (whether 6 is pruned too is not asserted: see the test).
  5 abandoned    a Megatron step directory written completely by several processes (a mkdir,
                 then one copy per rank directory, as a job's ranks write it) that exit without
                 writing the tracker is quarantined (/.ckptfs/quarantine, not in `ls`); a later
                 tracker write naming it brings it back complete, and a resume lands on it. (A
                 step copied in by one `cp -r` stays listed as copied: test_lineage.py.)
  6 mf1_keep     MindFormers 1.0 file operations (MindSpore's keep_checkpoint_max deletes the
                 oldest .ckpt of each rank BEFORE it saves): a job saved step 2 on both ranks,
                 wrote both step-4 files and died before meta.json; the restarted job, re-saving
                 4, deletes 1_2 and 1_4 on both ranks (0200 first, as MindSpore does) and dies
                 again with rank 1's file half-written. Both meta.json still name step 2, both
                 1_2 files are back in `ls` bit-exact and readable, /.ckptfs/retained is empty
                 again; a later complete step 4 is named next, and deleting 1_2 then keeps
                 nothing. (The files also come back when the job writes meta.json: os.replace
                 looks the name up, which reads the virtual file.)
  7 ds_rank      DeepSpeed's rank 0 writes `latest` before the barrier: a step 4 whose rank 1
                 never created its optimizer shard (rank 0 saved and exited) is set aside and
                 `latest` stays on 2 (the missing name is logged); a live job's step 6 waits,
                 sealed, for its late rank 1 file, then completes; a job resumed on fewer ranks
                 has its step 8 complete once step 10 starts.

Environment: CKPTFS_BIN, CKPTCTL_BIN (see ../lib/ckfs.py), CKPTFS_E2E_LAYOUTS (comma list),
CKPTFS_DAEMON_ROUNDS (1), CKPTFS_CRASH_SEED (random; printed), CKPTFS_SLOW_SAVE (0.15),
CKPTFS_KEEP=1 keeps the temporary directories (STORE/ckptfs.log is the daemon log).
Run: /usr/bin/python3 tests/e2e/test_scenarios.py [-v] [TestScenarios.test_2_corrupt]
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import TRACKER, wait_for  # noqa: E402
from crashround import await_resume, kill_in_save, run_rounds  # noqa: E402
import trainers  # noqa: E402
from trainers import (LogView, Trainer, check_resumed, daemon_log, drain, log_size,  # noqa: E402
                      read_log)

PYTHON = trainers.PYTHON
DAEMON_ROUNDS = int(os.environ.get('CKPTFS_DAEMON_ROUNDS', '1'))
SEED = trainers.SEED
SLOW = trainers.SLOW
RUN_TIMEOUT = trainers.RUN_TIMEOUT
# layouts whose marker does not follow every rank: a step completes once quiet (fs/steps/steps.c
# STEP_SETTLE_NS 1.5 s + the reaper's 1 s tick), so SAVED may precede completion by ~2.5 s
SETTLING = {'mf1', 'deepspeed', 'hf'}
SETTLE_WINDOW = 4.0
SUMMARY = []


# a tracker that cannot be read for another reason than its absence fails the test
read_tracker = functools.partial(ckfs.read_tracker, absent=FileNotFoundError)


def step_dir(step):
    return 'iter_%07d' % step


def ctl_json(store, *args):
    r = ckfs.ckptctl(store, *args, json_out=True)
    if r.returncode != 0:
        raise AssertionError('ckptctl --json %s %s exited %d: %s%s' % (
            store, ' '.join(args), r.returncode, r.stdout, r.stderr))
    return json.loads(r.stdout)


def steps_by_number(store):
    """{step number: [state, ...]} from ckptctl steps (a number may have several rows)."""
    res = {}
    for s in ctl_json(store, 'steps')['steps']:
        res.setdefault(s['step'], []).append(s['state'])
    return res


def listing(m):
    return sorted(os.listdir(m.mnt))


def run_to_end(layout, save, log, steps, every, keep=0, resume=False, slow=0.0):
    """Run a trainer to its end; returns it (closed) after asserting exit 0."""
    t = Trainer(layout, save, log, steps=steps, every=every, keep=keep, resume=resume, slow=slow)
    try:
        rc = t.wait()
        if rc != 0:
            raise AssertionError('trainer %s exited %d%s' % (' '.join(t.argv), rc, t.tail()))
    finally:
        t.close()
    return t


class TestScenarios(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        print('scenarios: CKPTFS_CRASH_SEED=%d, daemon-kill rounds per layout: %d, '
              'slow-save %.2fs' % (SEED, DAEMON_ROUNDS, SLOW), flush=True)

    @classmethod
    def tearDownClass(cls):
        if SUMMARY:
            print('\n' + '\n'.join(SUMMARY), flush=True)

    def setUp(self):
        self.t0 = time.monotonic()

    def tearDown(self):
        print('%s: %.1fs' % (self.id().rsplit('.', 1)[-1], time.monotonic() - self.t0),
              flush=True)

    # -- 1: the daemon SIGKILLed in the middle of a save, remount ----------------------------
    def daemon_round(self, layout, rnd, rng):
        keep = trainers.KEEP_CRASH.get(layout, 0)
        m = ckfs.Mount()
        m.start()
        try:
            save = m.mnt
            log = os.path.join(m.tmp, 'trainer.log')
            kill_save = rng.choice([2, 3])
            frac = rng.uniform(0.02, 0.98)
            a = Trainer(layout, save, log, steps=1000, every=2, keep=keep, slow=SLOW)
            kill_t = []

            def kill():
                kill_t.append(time.monotonic())
                # SIGKILL, wait, the ranks die (with ENOTCONN, or by a.kill), fusermount3 -uz
                m.kill_daemon(then=a.kill)
            try:
                killed_at = kill_in_save(a, kill_save, frac, kill, time.monotonic() + RUN_TIMEOUT)
                saved_t, t_kill = killed_at[3], kill_t[0]
                for t, ln in drain(a):
                    if ln.startswith('SAVED '):
                        saved_t[int(ln.split()[1])] = t
            finally:
                a.close()
            off = log_size(log)
            before = LogView(read_log(log, 0, off))
            note = ('daemon killed %.2fs into the save of step %d (first save took %.2fs); '
                    'SAVED: %s' % (killed_at[1], killed_at[0], killed_at[2], before.saved))
            if not before.saved:
                raise AssertionError('nothing SAVED before the kill: %s' % note)
            m.start()   # the same STORE
            expect = max(before.saved)
            age = t_kill - saved_t.get(expect, t_kill)
            settling = layout in SETTLING and age < SETTLE_WINDOW
            b = Trainer(layout, save, log, steps=1000, every=2, keep=keep, resume=True)
            try:
                # until it saved again after the resume
                _, resumed, _ = await_resume(b, time.monotonic() + RUN_TIMEOUT, 'SAVED ',
                                             lambda: note + daemon_log(m))
                b.kill()
                got = trainers.kv(resumed).get('step') if resumed != 'FRESH' else None
                accepted = ''
                if (settling and got is not None and int(got) != expect and
                        len(before.saved) > 1 and int(got) == before.saved[-2]):
                    # step `expect` was SAVED but could not be complete yet at the kill
                    exp = before.saved[-2]
                    accepted = ('; step %d was SAVED only %.2fs before the kill, still settling:'
                                ' accepted the previous SAVED step %d' % (expect, age, exp))
                else:
                    exp = expect
                try:
                    step = check_resumed(b, before, log, off, expect_step=exp,
                                         killed_step=killed_at[0])
                except AssertionError as e:
                    raise AssertionError('%s; %s%s' % (e, note, daemon_log(m)))
            finally:
                b.close()
            # the step resumed onto is complete in the daemon's own account
            states = [s['state'] for s in ctl_json(m.store, 'steps')['steps'] if s['step'] == step]
            if 'complete' not in states and 'pruned' not in states:
                raise AssertionError('resumed onto step %d, whose state is %s; %s' %
                                     (step, states, note))
            m.unmount()
        except BaseException:
            m.stop()
            raise
        finally:
            m.remove_tmp()
        return 'round %d: %s; resumed to %d%s' % (rnd, note, step, accepted)

    def daemon_kill(self, layout):
        run_rounds(self, layout, DAEMON_ROUNDS, self.daemon_round,
                   random.Random('%d-daemon-%s' % (SEED, layout)), SUMMARY, kind='daemon-kill ',
                   catch=(AssertionError, ckfs.MountError))

    # -- 2: a chunk of the newest step corrupted on disk -------------------------------------
    def test_2_corrupt(self):
        with ckfs.Mount() as m:
            log = os.path.join(m.tmp, 'trainer.log')
            run_to_end('megatron', m.mnt, log, steps=6, every=2)
            self.assertEqual(read_tracker(m), '6')
            m.unmount()
            chunks = {}     # step -> {chunk: file}
            for step in (2, 4, 6):
                files = ctl_json(m.store, 'show', str(step))['versions'][0]['files_list']
                self.assertEqual(len(files), 2, files)
                for f in files:
                    rel = '%s/%s' % (step_dir(step), f['path'])
                    for e in ctl_json(m.store, 'ls', rel)['extents']:
                        chunks.setdefault(step, {})[e['chunk']] = rel
            older = set(chunks[2]) | set(chunks[4])
            only6 = sorted(c for c in chunks[6] if c not in older)
            self.assertTrue(only6, 'no chunk belongs only to step 6: %s' % chunks)
            victim = only6[len(only6) // 2]
            victim_file = chunks[6][victim]
            cpath = os.path.join(m.store, 'chunks', victim[:2], victim)
            data = bytearray(ckfs.read_bytes(cpath))
            self.assertGreater(len(data), 33)
            data[32 + (len(data) - 32) // 2] ^= 0x40
            with open(cpath, 'wb') as f:
                f.write(data)
            m.start()
            info = 'corrupted chunk %s of %s%s' % (victim, victim_file, m.log_tail())
            self.assertEqual(read_tracker(m), '4', info)
            self.assertNotIn(step_dir(6), listing(m), info)
            self.assertIn(step_dir(4), listing(m), info)
            st = steps_by_number(m.store)
            self.assertEqual(st.get(6), ['corrupt'], info)
            self.assertEqual(st.get(4), ['complete'], info)
            with open(m.path('.ckptfs', 'steps')) as f:
                table = f.read()
            row6 = [ln for ln in table.splitlines() if step_dir(6) in ln]
            self.assertTrue(row6 and 'corrupt' in row6[0], 'step 6 in .ckptfs/steps: %s' % table)
            # verify finds the damage now: once the trainer saves step 6 again, identical bytes
            # rewrite the chunk (ckptfs never deduplicates onto a chunk marked bad)
            v = m.ckptctl('verify')
            self.assertEqual(v.returncode, 1, 'ckptctl verify: %s%s' % (v.stdout, v.stderr))
            out = v.stdout + v.stderr
            self.assertIn(victim_file.split('/', 1)[1], out)
            self.assertIn(step_dir(6), out)
            # the trainer resumes onto step 4, bit-exact
            off = log_size(log)
            before = LogView(read_log(log, 0, off))
            b = run_to_end('megatron', m.mnt, log, steps=6, every=2, resume=True)
            self.assertEqual(check_resumed(b, before, log, off, expect_step=4), 4)
            # it saved step 6 again: a fresh directory of that name, complete
            self.assertIn('SAVED 6 ', '\n'.join(b.lines))
            self.assertEqual(read_tracker(m), '6', m.log_tail())

    # -- 3: junk written into the tracker ----------------------------------------------------
    def test_3_junk_tracker(self):
        with ckfs.Mount() as m:
            log = os.path.join(m.tmp, 'trainer.log')
            run_to_end('megatron', m.mnt, log, steps=4, every=2)
            self.assertEqual(read_tracker(m), '4')
            junk = [('not a number', b'not a number'),
                    ('a path', b'../../etc/passwd'),
                    ('10 MB of random bytes', ckfs.content('junk', 10 << 20)),
                    ('an empty write', b'')]
            writer = ('import sys\n'
                      'd = open(sys.argv[2], "rb").read()\n'
                      'try:\n'
                      '    with open(sys.argv[1], "wb") as f:\n'
                      '        f.write(d)\n'
                      'except OSError as e:\n'
                      '    print("ERRNO", e.errno, e.strerror)\n'
                      '    sys.exit(1)\n')
            results = {}
            for what, data in junk:
                src = os.path.join(m.tmp, 'junk')
                with open(src, 'wb') as f:
                    f.write(data)
                r = subprocess.run([PYTHON, '-c', writer, m.path(TRACKER), src],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   timeout=120)
                self.assertIn(r.returncode, (0, 1), '%s: writer died: %s%s' %
                              (what, r.stderr, m.log_tail()))
                if r.returncode == 1:
                    self.assertTrue(r.stdout.startswith('ERRNO '), r.stdout + r.stderr)
                results[what] = 'ok' if r.returncode == 0 else r.stdout.strip()
                self.assertTrue(ckfs.pid_alive(m.pid), 'the daemon died: %s' % m.log_tail())
                self.assertEqual(read_tracker(m), '4', 'after writing %s (%s)%s' %
                                 (what, results[what], m.log_tail()))
                self.assertIn(step_dir(4), listing(m))
            print('junk tracker writes: %s' % results, flush=True)
            claims = ctl_json(m.store, 'claims')['claims']
            bad = [c for c in claims if c['step'] is None]
            for what, data in junk[:2]:
                if results[what] == 'ok':
                    self.assertTrue([c for c in bad if c['content'] == data.decode()],
                                    '%s not listed as unparseable: %s' % (what, claims))
            if results['10 MB of random bytes'] == 'ok':
                self.assertTrue([c for c in bad if c['content_bytes'] >= 1 << 20 or
                                 c['content'] not in ('not a number', '../../etc/passwd', '')],
                                '10 MB of junk not listed as unparseable: %s' % claims)
            self.assertFalse([c for c in claims if c['step'] not in (None, 2, 4)], claims)
            off = log_size(log)
            before = LogView(read_log(log, 0, off))
            b = run_to_end('megatron', m.mnt, log, steps=4, every=2, resume=True)
            self.assertEqual(check_resumed(b, before, log, off, expect_step=4), 4)

    # -- 4: retention ------------------------------------------------------------------------
    def test_4_retention(self):
        with ckfs.Mount(opts=('keep_checkpoint_max=2',)) as m:
            log = os.path.join(m.tmp, 'trainer.log')
            # saves 2 4 6 complete, the save of 8 killed half-way
            a = Trainer('megatron', m.mnt, log, steps=12, every=2, slow=SLOW)
            try:
                deadline = time.monotonic() + RUN_TIMEOUT
                t_saving = dur = None
                while True:
                    t, ln = a.next_line(deadline)
                    if ln is None:
                        raise AssertionError('trainer exited before the kill%s' % a.tail())
                    if ln.startswith('SAVING '):
                        t_saving = t
                        if ln == 'SAVING 8':
                            time.sleep(max(0.0, t_saving + 0.5 * dur - time.monotonic()))
                            a.kill()
                            break
                    elif ln.startswith('SAVED ') and dur is None:
                        dur = t - t_saving
            finally:
                a.close()

            def eight_set_aside():
                return 'incomplete' in steps_by_number(m.store).get(8, [])
            wait_for('the killed step 8 to be judged incomplete', eight_set_aside,
                     extra=m.log_tail)
            st = steps_by_number(m.store)
            self.assertEqual(sorted(n for n in listing(m) if n.startswith('iter_')),
                             [step_dir(4), step_dir(6)],
                             'the killed step 8 must not count: %s%s' % (st, m.log_tail()))
            self.assertEqual((st.get(2), st.get(4), st.get(6)),
                             (['pruned'], ['complete'], ['complete']), st)
            self.assertEqual(read_tracker(m), '6')
            off = log_size(log)
            before = LogView(read_log(log, 0, off))
            b = run_to_end('megatron', m.mnt, log, steps=12, every=2, resume=True)
            self.assertEqual(check_resumed(b, before, log, off, expect_step=6), 6)
            self.assertEqual(listing(m), [step_dir(10), step_dir(12), TRACKER], m.log_tail())
            self.assertEqual(read_tracker(m), '12')
            st = steps_by_number(m.store)
            for s in (2, 4, 6):
                self.assertEqual(st.get(s), ['pruned'], st)
            self.assertEqual(sorted(st.get(8)), ['incomplete', 'pruned'], st)
            self.assertEqual((st.get(10), st.get(12)), (['complete'], ['complete']), st)
            rows = ctl_json(m.store, 'steps')['steps']
            m.unmount()
            bytes_kept = m.chunk_bytes()
            # the chunk files hold what the steps still in the store use (10, 12 and the torn
            # 8 set aside), not what the 5 pruned ones used (the steps share no chunk: every
            # save holds new tensors; a keep-all store is the sum of all rows)
            live = sum(r['stored_bytes'] for r in rows if r['state'] != 'pruned')
            pruned = sum(r['stored_bytes'] for r in rows if r['state'] == 'pruned')
            print('retention: chunk bytes with keep_checkpoint_max=2: %d; stored bytes of the '
                  'steps kept %d, of the pruned ones %d' % (bytes_kept, live, pruned),
                  flush=True)
            self.assertGreater(pruned, 4 * 1000000, rows)
            self.assertLessEqual(bytes_kept, live * 1.05 + (256 << 10),
                                 'pruned space not reclaimed: %d chunk bytes, but the steps '
                                 'left use %d (pruned steps used %d)' % (bytes_kept, live,
                                                                        pruned))
        with ckfs.Mount(opts=('keep_checkpoint_max=2', 'keep_every=4')) as m:
            run_to_end('megatron', m.mnt, os.path.join(m.tmp, 'trainer.log'), steps=12,
                       every=2)
            st = steps_by_number(m.store)
            kept = sorted(int(n[5:]) for n in listing(m) if n.startswith('iter_'))
            print('retention keep_checkpoint_max=2,keep_every=4: kept %s, states %s' %
                  (kept, st), flush=True)
            # the 2 newest complete steps, and every step divisible by 4, remain; 2 is pruned.
            # Step 6 is left open: fs/steps/steps.c does not count keep_every steps toward
            # keep_checkpoint_max (12 is one), so it keeps 6 and 10 as "the 2 newest"; Orbax's
            # keep_period counts them (it would prune 6).
            for s in (4, 8, 10, 12):
                self.assertIn(s, kept, '%s%s' % (st, m.log_tail()))
                self.assertEqual(st.get(s), ['complete'], st)
            self.assertNotIn(2, kept, st)
            self.assertEqual(st.get(2), ['pruned'], st)

    # -- 5: abandoned, then sealed by a later tracker write ----------------------------------
    def test_5_abandoned_then_sealed(self):
        with ckfs.PlainDir() as plain, ckfs.Mount() as m:
            # the step's files, written by the real trainer on a plain directory
            log = os.path.join(plain.tmp, 'trainer.log')
            run_to_end('megatron', plain.mnt, log, steps=2, every=2)
            # the whole step is written by several processes that exit without writing the
            # tracker: a job's ranks, not one copy (policy rule 3)
            subprocess.run(['mkdir', m.path(step_dir(2))], check=True, timeout=60)
            for rank_dir in sorted(os.listdir(os.path.join(plain.mnt, step_dir(2)))):
                subprocess.run(['cp', '-r', os.path.join(plain.mnt, step_dir(2), rank_dir),
                                m.path(step_dir(2))], check=True, timeout=60)
            qdir = m.path('.ckptfs', 'quarantine')

            def quarantined():
                return [n for n in os.listdir(qdir) if n.startswith(step_dir(2) + '.')]
            q = wait_for('the abandoned step to be quarantined', quarantined, timeout=15,
                         extra=m.log_tail)
            self.assertNotIn(step_dir(2), listing(m))
            self.assertIsNone(read_tracker(m))
            # link counts follow the move (find and ls -l rely on them)
            wait_for('directory link counts to agree', lambda: not ckfs.dir_link_errors(m.mnt),
                     timeout=5, extra=lambda: str(ckfs.dir_link_errors(m.mnt)))
            # readable there, byte for byte
            rel = os.path.join('mp_rank_00', 'model_optim_rng.pt')
            self.assertEqual(ckfs.read_bytes(os.path.join(qdir, q[0], rel)),
                             ckfs.read_bytes(os.path.join(plain.mnt, step_dir(2), rel)))
            self.assertEqual(steps_by_number(m.store).get(2), ['incomplete'])
            # the tracker, written later, names it: back, sealed, complete
            with open(m.path(TRACKER), 'w') as f:
                f.write('2')
            wait_for('the tracker to name step 2', lambda: read_tracker(m) == '2',
                     extra=lambda: '%s%s' % (steps_by_number(m.store), m.log_tail()))
            self.assertIn(step_dir(2), listing(m))
            self.assertFalse(quarantined())
            self.assertEqual(steps_by_number(m.store).get(2), ['complete'])
            wait_for('directory link counts to agree', lambda: not ckfs.dir_link_errors(m.mnt),
                     timeout=5, extra=lambda: str(ckfs.dir_link_errors(m.mnt)))
            off = log_size(log)
            before = LogView(read_log(log, 0, off))
            b = run_to_end('megatron', m.mnt, log, steps=2, every=2, resume=True)
            self.assertEqual(check_resumed(b, before, log, off, expect_step=2), 2)

    def test_5b_deletion_of_newest_cut_short(self):
        """The trainer starts deleting the newest complete step (its keep-last-N cleanup) and is
        killed after removing some of its files: the resuming reader finds the whole step, and
        what was left at the name is set aside, not lost."""
        with ckfs.Mount() as m:
            log = os.path.join(m.tmp, 'trainer.log')
            run_to_end('megatron', m.mnt, log, steps=2, every=2)
            wait_for('step 2 to complete', lambda: read_tracker(m) == '2', extra=m.log_tail)
            top = m.path(step_dir(2))
            before = {}
            for dp, _, fn in os.walk(top):
                for n in fn:
                    p = os.path.join(dp, n)
                    before[os.path.relpath(p, top)] = ckfs.read_bytes(p)
            self.assertGreaterEqual(len(before), 2, before.keys())
            gone = sorted(before)[0]
            os.remove(os.path.join(top, gone))      # the deletion, cut short after one file
            self.assertIn('kept as', m.log_tail())
            # the resuming reader: the tracker, then the step it names, whole and bit-exact
            self.assertEqual(read_tracker(m), '2')
            after = {}
            for dp, _, fn in os.walk(top):
                for n in fn:
                    p = os.path.join(dp, n)
                    after[os.path.relpath(p, top)] = ckfs.read_bytes(p)
            self.assertEqual(sorted(after), sorted(before), m.log_tail())
            self.assertTrue(after == before, 'restored bytes differ')
            self.assertIn('restored', m.log_tail())
            q = [n for n in os.listdir(m.path('.ckptfs', 'quarantine'))
                 if n.startswith(step_dir(2) + '.partial-')]
            self.assertEqual(len(q), 1, m.log_tail())
            self.assertNotIn(gone, [os.path.relpath(os.path.join(dp, n),
                                                    m.path('.ckptfs', 'quarantine', q[0]))
                                    for dp, _, fn in os.walk(m.path('.ckptfs', 'quarantine',
                                                                    q[0])) for n in fn])
            wait_for('directory link counts to agree', lambda: not ckfs.dir_link_errors(m.mnt),
                     timeout=5, extra=lambda: str(ckfs.dir_link_errors(m.mnt)))
            off = log_size(log)
            prev = LogView(read_log(log, 0, off))
            b = run_to_end('megatron', m.mnt, log, steps=2, every=2, resume=True)
            self.assertEqual(check_resumed(b, prev, log, off, expect_step=2), 2)
            r = ckfs.ckptctl(m.store, 'verify')
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_6_mf1_keep_before_save(self):
        def name(r, step):
            return 'rank_%d/llama_rank_%d-1_%d.ckpt' % (r, r, step)

        def save_file(m, r, step, data):
            tmp = m.path(name(r, step) + '.tmp')
            with open(tmp, 'wb') as f:
                f.write(data)
            os.rename(tmp, m.path(name(r, step)))
            os.chmod(m.path(name(r, step)), 0o400)

        def meta(m, r, step):
            tmp = m.path('rank_%d' % r, 'tmpmeta')
            with open(tmp, 'w') as f:
                json.dump({'last_epoch': 1, 'last_step': step,
                           'last_ckpt_file': os.path.basename(name(r, step))}, f)
            os.replace(tmp, m.path('rank_%d' % r, 'meta.json'))

        def read_meta(m, r):
            try:
                with open(m.path('rank_%d' % r, 'meta.json')) as f:
                    return json.load(f)['last_step']
            except FileNotFoundError:
                return None

        def remove(m, rel):
            os.chmod(m.path(rel), 0o200)
            os.remove(m.path(rel))

        def torn(m, rel):
            code = ('import os, sys, time\n'
                    'fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)\n'
                    'os.write(fd, b"x" * 65536)\nprint("w", flush=True)\ntime.sleep(60)\n')
            with subprocess.Popen([PYTHON, '-c', code, m.path(rel)],
                                  stdout=subprocess.PIPE) as p:
                p.stdout.readline()
                p.kill()

        data = {(r, st): os.urandom(300000 + r * 1000 + st) for r in (0, 1) for st in (2, 4)}
        with ckfs.Mount() as m:
            for r in (0, 1):
                os.mkdir(m.path('rank_%d' % r))
            for r in (0, 1):
                save_file(m, r, 2, data[(r, 2)])
            for r in (0, 1):
                meta(m, r, 2)
            wait_for('step 2 to complete',
                     lambda: steps_by_number(m.store).get(2) == ['complete'], extra=m.log_tail)
            for r in (0, 1):        # the first job dies before its step-4 meta.json
                save_file(m, r, 4, data[(r, 4)])
            for r in (0, 1):        # the restarted job re-saves 4: oldest first, then 4
                remove(m, name(r, 2))
                remove(m, name(r, 4))
            self.assertIn('kept in', m.log_tail())
            self.assertEqual(len(os.listdir(m.path('.ckptfs', 'retained'))), 1)
            save_file(m, 0, 4, data[(0, 4)])
            torn(m, name(1, 4) + '.tmp')
            wait_for('the torn file to be judged', lambda: 'torn' in m.log_tail(),
                     extra=m.log_tail)
            # the resuming job: meta.json, then the files it names
            self.assertEqual([read_meta(m, r) for r in (0, 1)], [2, 2], m.log_tail())
            for r in (0, 1):
                self.assertIn(os.path.basename(name(r, 2)), os.listdir(m.path('rank_%d' % r)),
                              m.log_tail())
                self.assertTrue(os.stat(m.path(name(r, 2))).st_mode & 0o400)
                self.assertEqual(ckfs.read_bytes(m.path(name(r, 2))), data[(r, 2)])
            self.assertEqual(os.listdir(m.path('.ckptfs', 'retained')), [])
            self.assertIn("restored step '1_2'", m.log_tail())
            # it re-saves 4 (its keep_checkpoint_max=2 deletes nothing: 1_2 is the only .ckpt)
            for r in (0, 1):
                if os.path.exists(m.path(name(r, 4))):
                    remove(m, name(r, 4))
                save_file(m, r, 4, data[(r, 4)])
            for r in (0, 1):
                meta(m, r, 4)
            wait_for('step 4 to complete',
                     lambda: steps_by_number(m.store).get(4) == ['complete'], extra=m.log_tail)
            self.assertEqual([read_meta(m, r) for r in (0, 1)], [4, 4])
            # its next save deletes 1_2 (no longer the newest): nothing is kept
            for r in (0, 1):
                remove(m, name(r, 2))
            self.assertEqual(os.listdir(m.path('.ckptfs', 'retained')), [])
            self.assertEqual([read_meta(m, r) for r in (0, 1)], [4, 4])
            for r in (0, 1):
                self.assertEqual(sorted(os.listdir(m.path('rank_%d' % r))),
                                 [os.path.basename(name(r, 4)), 'meta.json'])
            r = ckfs.ckptctl(m.store, 'verify')
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_6c_mf1_retention_by_ckptfs(self):
        """-o keep_checkpoint_max=2 prunes MindFormers 1.0 steps (issue 18): every rank's
        .ckpt of a step, nothing else, only once a newer step is complete on every rank."""
        def ckpts(m):
            """{rank: sorted steps of its .ckpt files, whatever launch's prefix (a killed
            launch may leave a whole file of a step the next launch saves again under its own
            prefix, as on any disk: pruning the step removes both)}"""
            return {r: sorted(set(int(x.group(1)) for x in (
                re.fullmatch(r'llama_rank_%d(?:_\d+)?-1_(\d+)\.ckpt' % r, n)
                for n in os.listdir(m.path('rank_%d' % r))) if x)) for r in (0, 1)}

        def want(steps):
            return {r: sorted(steps) for r in (0, 1)}
        with ckfs.Mount(opts=('keep_checkpoint_max=2',)) as m:
            log = os.path.join(m.tmp, 'trainer.log')
            # 6 saves, 2 ranks, the trainer's own keep_checkpoint_max off
            run_to_end('mf1', m.mnt, log, steps=12, every=2)
            wait_for('steps 10 and 12 only on every rank',
                     lambda: ckpts(m) == want([10, 12]), extra=lambda: '%s%s' % (
                         ckpts(m), m.log_tail()))
            for r in (0, 1):
                self.assertIn('meta.json', os.listdir(m.path('rank_%d' % r)))
            st = steps_by_number(m.store)
            self.assertEqual([st.get(n) for n in (2, 4, 6, 8, 10, 12)],
                             [['pruned']] * 4 + [['complete']] * 2, st)
            # a save killed half-way prunes nothing: 10 and 12 stay on every rank
            a = Trainer('mf1', m.mnt, log, steps=100, every=2, resume=True, slow=SLOW)
            try:
                deadline = time.monotonic() + RUN_TIMEOUT
                while True:
                    t, ln = a.next_line(deadline)
                    if ln is None:
                        raise AssertionError('trainer exited before the kill%s' % a.tail())
                    if ln == 'SAVING 14':
                        time.sleep(SLOW * 2)
                        a.kill()
                        break
            finally:
                a.close()
            time.sleep(2.5)     # past the reaper's quiet period
            got = ckpts(m)
            for r in (0, 1):
                for s_ in (10, 12):
                    self.assertIn(s_, got[r],
                                  'a killed save pruned step %d: %s%s' % (s_, got,
                                                                         m.log_tail()))
            off = log_size(log)
            before = LogView(read_log(log, 0, off))
            b = run_to_end('mf1', m.mnt, log, steps=16, every=2, resume=True)
            self.assertEqual(check_resumed(b, before, log, off, expect_step=12), 12)
            wait_for('steps 14 and 16 only on every rank',
                     lambda: ckpts(m) == want([14, 16]), extra=lambda: '%s%s' % (
                         ckpts(m), m.log_tail()))
            r = ckfs.ckptctl(m.store, 'verify')
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_7_deepspeed_rank_missing(self):
        files = ['mp_rank_00_model_states.pt', 'bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt',
                 'bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt']
        rank0 = files[:2]
        # DeepSpeed's rank 0: its files, then `latest`, before the barrier (framework-io.md)
        save = ('import os, sys, torch\n'
                'd = os.path.join(sys.argv[1], "global_step" + sys.argv[2])\n'
                'os.makedirs(d, exist_ok=True)\n'
                'for n in sys.argv[3:]:\n'
                '    torch.save({"w": torch.full((64, 64), float(sys.argv[2])), "n": n},'
                ' os.path.join(d, n))\n'
                'with open(os.path.join(sys.argv[1], "latest"), "w") as f:\n'
                '    f.write("global_step" + sys.argv[2])\n')

        def write(m, step, names, tag=True, alive=False):
            """alive: write from this (still running) process, else from one that exits"""
            if alive:
                import torch
                d = m.path('global_step%d' % step)
                os.makedirs(d, exist_ok=True)
                for n in names:
                    torch.save({'w': torch.full((64, 64), float(step)), 'n': n},
                               os.path.join(d, n))
            else:
                assert tag
                subprocess.run([PYTHON, '-c', save, m.mnt, str(step)] + names, check=True,
                               timeout=120)
                return
            if tag:
                with open(m.path('latest'), 'w') as f:
                    f.write('global_step%d' % step)

        def state(m, step):
            return steps_by_number(m.store).get(step)

        with ckfs.Mount() as m:
            write(m, 2, files, alive=True)
            wait_for('step 2 to complete', lambda: state(m, 2) == ['complete'],
                     extra=m.log_tail)
            # a job whose rank 1 died before creating its file; rank 0 saved and exited
            write(m, 4, rank0)
            wait_for('step 4 to be set aside', lambda: state(m, 4) == ['incomplete'],
                     extra=lambda: '%s%s' % (state(m, 4), m.log_tail()))
            self.assertIn("'bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt (in step 2)' never "
                          "written", m.log_tail())
            self.assertEqual(read_tracker(m, 'latest'), 'global_step2')
            self.assertNotIn('global_step4', listing(m))
            # a live job whose rank 1 is slow: the step waits for its file, then completes
            write(m, 6, rank0, alive=True)
            time.sleep(3.5)         # past the settle time (1.5 s) and two reaper ticks
            self.assertEqual(state(m, 6), ['sealed'], m.log_tail())
            self.assertEqual(read_tracker(m, 'latest'), 'global_step2')
            write(m, 6, files[2:], tag=False, alive=True)
            wait_for('step 6 to complete', lambda: read_tracker(m, 'latest') == 'global_step6',
                     extra=m.log_tail)
            # a job resumed on fewer ranks: its first step completes once the next one starts
            write(m, 8, rank0, alive=True)
            time.sleep(3.5)
            self.assertEqual(read_tracker(m, 'latest'), 'global_step6')
            write(m, 10, rank0[:1], tag=False, alive=True)
            wait_for('step 8 to complete', lambda: read_tracker(m, 'latest') == 'global_step8',
                     extra=m.log_tail)
            r = ckfs.ckptctl(m.store, 'verify')
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            # issue 18: a step holding every name of the previous complete step completes
            # when `latest` is closed, not after a quiet period, even where a digit run of a
            # name equals the step number (bf16_ at step 16); a daemon killed right after
            # loses nothing that returned
            for step in (14, 16, 18):
                write(m, step, files, alive=True)
                self.assertEqual(state(m, step), ['complete'],
                                 'step %d not complete when latest was closed%s'
                                 % (step, m.log_tail()))
            write(m, 20, files, alive=True)
            m.kill_daemon()
            m.start()
            self.assertEqual(state(m, 20), ['complete'], m.log_tail())
            self.assertEqual(read_tracker(m, 'latest'), 'global_step20')


def _add(layout):
    def t(self):
        self.daemon_kill(layout)
    t.__name__ = 'test_1_daemon_kill_%s' % layout
    setattr(TestScenarios, t.__name__, t)


for _l in trainers.selected_layouts():
    _add(_l)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(850, exit=True)
    unittest.main(verbosity=2)
