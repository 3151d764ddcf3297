#!/usr/bin/python3
"""Every framework layout, end to end, with a real 2-rank PyTorch training job (trainer.py).

For each layout (mf2 megatron mf1 deepspeed hf dcp internevo orbax lightning lightning-link):
  plain   - harness self-test on a plain temporary directory: train with saves (and the
            framework's own retention), then --resume: it must land on the last saved step, the
            loaded files must hash to what the writers logged, the state digest and loss must
            match, the next step's loss must equal the uninterrupted run's, the directory must
            hold exactly what the framework leaves.
  ckptfs  - CKPTFS_CRASH_ROUNDS rounds (default 1) on a fresh ckptfs mount each: train with
            --slow-save, SIGKILL the whole job at a random moment inside a save (the daemon stays
            up), restart with --resume, and assert it resumed, onto the newest step the log says
            was SAVED (complete), bit-exact (file sha256s vs the log, state digest, loss); then
            the resumed job must complete its next save (it re-creates the torn step).
            Prints `layout L: P/N rounds resumed to a complete step`.

Environment: CKPTFS_BIN, CKPTCTL_BIN (see ../lib/ckfs.py), CKPTFS_CRASH_ROUNDS (1;
the full suite's crash loop, tests/torture/test_crash_loop.py, runs 20 rounds of every layout),
CKPTFS_CRASH_SEED (random; printed), CKPTFS_E2E_LAYOUTS (comma list, default all),
CKPTFS_SLOW_SAVE (0.15 seconds), CKPTFS_CRASH_FRAC (`lo,hi`: the kill lands at a uniform
fraction of the first save's duration, default 0.02,0.98).
Run: /usr/bin/python3 tests/e2e/test_frameworks.py [-v] [TestFrameworks.test_hf_ckptfs]
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from crashround import await_resume, kill_in_save, run_rounds  # noqa: E402
from trainers import (FRAC, KEEP_CRASH, RUN_TIMEOUT, SEED, SLOW, LogView, Trainer,  # noqa: E402
                      check_resumed, log_size, read_log, selected_layouts)

# the framework's own retention where it has one
KEEP_PLAIN = {'mf2': 2, 'mf1': 2, 'hf': 2, 'dcp': 2, 'orbax': 2, 'lightning': 2,
              'lightning-link': 2}
ROUNDS = int(os.environ.get('CKPTFS_CRASH_ROUNDS', '1'))
SUMMARY = []


def expected_listing(layout, steps, keep, ranks=2):
    """Names the framework leaves in the save dir after saving `steps` (plain directory)."""
    kept = steps[-keep:] if keep else steps
    if layout == 'mf2':
        return sorted(['iteration_%08d' % s for s in kept] + ['latest_checkpointed_iteration.txt'])
    if layout == 'megatron':
        return sorted(['iter_%07d' % s for s in kept] + ['latest_checkpointed_iteration.txt'])
    if layout == 'mf1':
        return sorted('rank_%d' % r for r in range(ranks))
    if layout == 'deepspeed':
        return sorted(['global_step%d' % s for s in kept] + ['latest'])
    if layout == 'hf':
        return sorted('checkpoint-%d' % s for s in kept)
    if layout == 'dcp':
        return sorted('step-%d' % s for s in kept)
    if layout == 'internevo':
        return sorted('%d' % s for s in kept)
    if layout == 'internevo-snap':
        return ['snapshot']
    if layout == 'orbax':
        return sorted('%d' % s for s in kept)
    if layout in ('lightning', 'lightning-link'):
        return sorted(['epoch=0-step=%d.ckpt' % s for s in kept] + ['last.ckpt'])
    raise ValueError(layout)


class TestFrameworks(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        print('crash seed: CKPTFS_CRASH_SEED=%d, rounds per layout: %d, slow-save %.2fs' %
              (SEED, ROUNDS, SLOW), flush=True)

    @classmethod
    def tearDownClass(cls):
        if SUMMARY:
            print('\n' + '\n'.join(SUMMARY), flush=True)

    # -- plain directory: the harness self-test ----------------------------------------------
    def plain(self, layout):
        t0 = time.monotonic()
        keep = KEEP_PLAIN.get(layout, 0)
        with ckfs.PlainDir() as d:
            save = d.mnt
            log = os.path.join(d.tmp, 'trainer.log')
            a = Trainer(layout, save, log, steps=11, every=2, keep=keep)
            try:
                rc = a.wait()
                self.assertEqual(rc, 0, 'first run failed%s' % a.tail())
            finally:
                a.close()
            first = LogView(read_log(log))
            self.assertEqual(first.saved, [2, 4, 6, 8, 10])
            self.assertEqual(sorted(os.listdir(save)),
                             expected_listing(layout, [2, 4, 6, 8, 10], keep))
            off = log_size(log)
            b = Trainer(layout, save, log, steps=12, every=2, keep=keep, resume=True)
            try:
                rc = b.wait()
                self.assertEqual(rc, 0, 'resumed run failed%s' % b.tail())
            finally:
                b.close()
            self.assertEqual(check_resumed(b, first, log, off), 10)
            self.assertIn('VERIFY ok step=10', '\n'.join(b.lines))
            # the loss curve continues exactly where the uninterrupted run went
            l11 = [ln for ln in b.lines if ln.startswith('STEP 11 ')]
            self.assertEqual(l11, ['STEP 11 loss=%s' % first.loss[11]])
            self.assertIn('SAVED 12 loss=', '\n'.join(b.lines))
            self.assertEqual(sorted(os.listdir(save)),
                             expected_listing(layout, [2, 4, 6, 8, 10, 12], keep))
            if layout == 'mf1':
                # the first launch kept 8 and 10 (MindSpore's keep_checkpoint_max=2); the
                # resumed launch writes under the prefix llama_rank_R_1 (a .ckpt of the first
                # prefix exists) and its retention counts only that prefix's files
                for r in range(2):
                    self.assertEqual(sorted(os.listdir(os.path.join(save, 'rank_%d' % r))),
                                     sorted(['llama_rank_%d-1_8.ckpt' % r,
                                             'llama_rank_%d-1_10.ckpt' % r,
                                             'llama_rank_%d_1-1_12.ckpt' % r,
                                             'llama_rank_%d-graph.meta' % r,
                                             'llama_rank_%d_1-graph.meta' % r, 'meta.json']))
            tracker = {'mf2': 'latest_checkpointed_iteration.txt',
                       'megatron': 'latest_checkpointed_iteration.txt',
                       'deepspeed': 'latest'}.get(layout)
            if tracker:
                with open(os.path.join(save, tracker)) as f:
                    self.assertEqual(f.read(), 'global_step12' if layout == 'deepspeed'
                                     else '12')
        print('layout %s: plain directory ok (%.1fs)' % (layout, time.monotonic() - t0),
              flush=True)

    # -- ckptfs: SIGKILL the job in the middle of a save, resume -----------------------------
    def crash_round(self, layout, rnd, rng):
        keep = KEEP_CRASH.get(layout, 0)
        with ckfs.Mount() as m:
            save = m.mnt
            log = os.path.join(m.tmp, 'trainer.log')
            kill_save = rng.choice([2, 3])
            frac = rng.uniform(*FRAC)
            a = Trainer(layout, save, log, steps=1000, every=2, keep=keep, slow=SLOW)
            try:
                killed_at = kill_in_save(a, kill_save, frac, a.kill,
                                         time.monotonic() + RUN_TIMEOUT)
            finally:
                a.close()
            off = log_size(log)
            before = LogView(read_log(log, 0, off))
            # what the writers had finished when the job died
            note = 'killed %.2fs into the save of step %d (first save took %.2fs); SAVED: %s' % (
                killed_at[1], killed_at[0], killed_at[2], before.saved)
            b = Trainer(layout, save, log, steps=1000, every=2, keep=keep, resume=True)
            try:
                # until it also saved again over the torn step
                await_resume(b, time.monotonic() + RUN_TIMEOUT, 'SAVED ', lambda: note)
                b.kill()
                try:
                    step = check_resumed(b, before, log, off, killed_step=killed_at[0])
                except AssertionError as e:
                    raise AssertionError('%s; %s' % (e, note))
            finally:
                b.close()
        extra = '' if step in before.saved else ' (whole before the kill, SAVED not yet logged)'
        return 'round %d: %s; resumed to %d%s' % (rnd, note, step, extra)

    def crash(self, layout):
        run_rounds(self, layout, ROUNDS, self.crash_round,
                   random.Random('%d-%s' % (SEED, layout)), SUMMARY)


def _add(layout):
    def t_plain(self):
        self.plain(layout)

    def t_crash(self):
        self.crash(layout)
    t_plain.__name__ = 'test_%s_1_plain' % layout
    t_crash.__name__ = 'test_%s_2_ckptfs' % layout
    setattr(TestFrameworks, t_plain.__name__, t_plain)
    setattr(TestFrameworks, t_crash.__name__, t_crash)


for _l in selected_layouts():
    _add(_l)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(1500, exit=True)
    unittest.main(verbosity=2)
