#!/usr/bin/python3
"""The crash loop with rollbacks and rewrites (issue 40): a real 2-rank PyTorch job
(tests/e2e/trainer.py, gloo) on one ckptfs mount, SIGKILLed at a random moment of a save, round
after round, each round's job the previous round's resume (as in test_crash_loop.py). Between
the kill and the resume, a round may also change the checkpoints as a user does:

  rollback  the tracker is made to name an older complete step of the current lineage, by a
            tracker write (`echo 4 > latest_checkpointed_iteration.txt`) or by
            `ckptctl MOUNT rollback 4`, alternately. The resume must land on that step; the job
            then saves the steps after it again, each a new version of a complete step of the
            abandoned lineage, and is killed inside one of those rewrites.
  rewrite   one file of the newest complete step is overwritten in place by another process
            (`cp` of the same file of an older step: whole, well-formed, other bytes) that exits
            without a claim. The new version is set aside and the complete one comes back: the
            resume lands on the newest complete step, bit-exact.

Every 4th round also SIGKILLs the daemon with the job (then fusermount3 -uz and a remount). Every
resume must land on the newest step SAVED in the current lineage (or the killed step, when its
save finished before the kill reached its log line), bit-exact: the files it loads hash to what
the writers logged, the state digest and the loss match (trainers.check_resumed, and the trainer's
own VERIFY). A step whose last save was killed is never rolled back to: its log lines are those
of the killed attempt.

Default: 6 rounds of Megatron (about 90 s on 2 cores). Environment: CKPTFS_BIN, CKPTCTL_BIN,
CKPTFS_TORTURE_ROUNDS (6), CKPTFS_E2E_LAYOUTS (megatron; also mf2, deepspeed: the layouts with a
tracker), CKPTFS_CRASH_SEED (random; printed), CKPTFS_SLOW_SAVE (0.15).
Run: /usr/bin/python3 tests/torture/test_crash_lineage.py [-v]
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from crashround import await_resume  # noqa: E402
import trainers  # noqa: E402
from trainers import (LogView, Trainer, check_resumed, daemon_log, drain, log_size,  # noqa: E402
                      read_log)

ROUNDS = int(os.environ.get('CKPTFS_TORTURE_ROUNDS', '6'))
SEED = trainers.SEED
SLOW = trainers.SLOW
SUMMARY = []

# per layout with a tracker: the tracker, what it says for step n, step n's directory
TRACKED = {
    'megatron': ('latest_checkpointed_iteration.txt', str, lambda n: 'iter_%07d' % n),
    'mf2': ('latest_checkpointed_iteration.txt', str, lambda n: 'iteration_%08d' % n),
    'deepspeed': ('latest', lambda n: 'global_step%d' % n, lambda n: 'global_step%d' % n),
}


def selected():
    v = os.environ.get('CKPTFS_E2E_LAYOUTS')
    names = [x for x in v.split(',') if x] if v else ['megatron']
    return [x for x in names if x in TRACKED]


class Lineage:
    """What the rounds know of the current lineage: the steps SAVED in it, in order (the last
    is where a resume lands), the steps whose last save was killed, the killed steps found whole
    and resumed onto (never SAVED)."""

    def __init__(self):
        self.saved = []
        self.dirty = set()
        self.unlogged = set()
        self.abandoned = set()  # complete steps a rollback left: saving one again rewrites it

    def add_saved(self, step):
        if step in self.saved:
            self.saved.remove(step)
        self.saved.append(step)
        self.dirty.discard(step)
        self.unlogged.discard(step)

    def newest(self):
        return self.saved[-1] if self.saved else None

    def cut_to(self, step):
        """The lineage now ends at step (a rollback, or a resume onto it)."""
        self.abandoned |= {s for s in self.saved if s > step and s not in self.dirty}
        self.saved = [s for s in self.saved if s < step] + [step]
        self.dirty.discard(step)
        self.unlogged = {s for s in self.unlogged if s <= step}


class TestCrashLineage(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        print('crash loop with rollbacks and rewrites: CKPTFS_CRASH_SEED=%d, %d rounds per '
              'layout, slow-save %.2fs' % (SEED, ROUNDS, SLOW), flush=True)

    @classmethod
    def tearDownClass(cls):
        if SUMMARY:
            print('\n' + '\n'.join(SUMMARY), flush=True)

    # -- what a user does between two runs ---------------------------------------------------

    def states(self, m):
        r = m.ckptctl('steps', json_out=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)['steps']

    def tracker(self, m, layout):
        return ckfs.read_tracker(m, TRACKED[layout][0])

    def rollback(self, m, layout, lin, rnd, rng):
        """Make the tracker name an older complete step of the lineage. Returns what was done,
        or None when there is no step to roll back to."""
        tracker, says, dname = TRACKED[layout]
        complete = {s['name'] for s in self.states(m)
                    if s['state'] == 'complete' and not s['other_lineage']}
        cands = [s for s in lin.saved[:-1] if s not in lin.dirty and dname(s) in complete]
        if not cands:
            return None
        # a few saves back, so that the job's next saves rewrite complete steps of the
        # abandoned lineage and a kill lands inside one
        to = rng.choice(cands[:max(1, len(cands) - 2)])
        if rnd % 2:
            with open(m.path(tracker), 'w') as f:
                f.write(says(to))
            how = 'tracker write'
        else:
            r = ckfs.run([ckfs.ckptctl_bin(), m.mnt, 'rollback', str(to)], timeout=120)
            self.assertEqual(r.returncode, 0, 'ckptctl rollback %d: %s%s' % (to, r.stdout,
                                                                             r.stderr))
            how = 'ckptctl rollback'
        self.assertEqual(self.tracker(m, layout), says(to),
                         'the tracker after a %s to %d%s' % (how, to, daemon_log(m)))
        lin.cut_to(to)
        return 'rolled back to %d (%s)' % (to, how)

    def rewrite(self, m, layout, lin, rng):
        """Overwrite a file of the newest complete step with the same file of an older step, by
        a process that exits without a claim. Returns what was done, or None."""
        tracker, says, dname = TRACKED[layout]
        newest = lin.newest()
        others = [s for s in lin.saved[:-1] if os.path.isdir(m.path(dname(s)))]
        if newest is None or not others or self.tracker(m, layout) != says(newest):
            return None     # (the killed save finished: the tracker names that step)
        top = m.path(dname(newest))
        files = sorted(os.path.relpath(os.path.join(dp, n), top)
                       for dp, _, fn in os.walk(top) for n in fn)
        src_top = m.path(dname(rng.choice(others)))
        files = [f for f in files if os.path.isfile(os.path.join(src_top, f))]
        if not files:
            return None
        rel = rng.choice(files)
        r = ckfs.run(['cp', os.path.join(src_top, rel), os.path.join(top, rel)], timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        # the change, left unsealed, is set aside and the complete version comes back
        ckfs.wait_for('step %d named again after the rewrite of %s' % (newest, rel),
                      lambda: self.tracker(m, layout) == says(newest), timeout=30,
                      extra=lambda: daemon_log(m))
        return 'rewrote %s/%s by hand' % (dname(newest), rel)

    # -- the loop ------------------------------------------------------------------------------

    def loop(self, layout):
        t0 = time.monotonic()
        rng = random.Random('%d-lineage-%s' % (SEED, layout))
        lin = Lineage()
        ok, fails, dkills = 0, [], 0
        m = ckfs.Mount()
        m.start()
        log = os.path.join(m.tmp, 'trainer.log')
        dur = None
        pending = None
        tr = None
        try:
            for rnd in range(1, ROUNDS + 2):
                # 1. between the runs: a rollback or a rewrite, as the round says
                did = ''
                if pending:
                    act = ('rollback', 'rewrite', None)[rnd % 3]
                    if act == 'rollback':
                        did = self.rollback(m, layout, lin, rnd, rng) or ''
                        if did:
                            pending['killed'] = None    # no longer what a resume may find
                    elif act == 'rewrite':
                        did = self.rewrite(m, layout, lin, rng) or ''
                    pending['expect'] = lin.newest()
                    pending['tree'] = ckfs.tree_dump(m.mnt)
                    if did:
                        pending['msg'] += '; then ' + did
                daemon = rnd % 4 == 0
                # every round saves one step at least, so the lineage grows: rollbacks and
                # rewrites need older complete steps
                kill_save = rng.choice([3, 4] if dur is None else [2, 3])
                frac = rng.uniform(*trainers.FRAC)
                tr = Trainer(layout, m.mnt, log, steps=1000000, every=2, slow=SLOW,
                             resume=pending is not None)
                deadline = time.monotonic() + trainers.RUN_TIMEOUT
                carry = []
                # 2. the resume lands on the newest step of the current lineage, bit-exact
                if pending:
                    try:
                        carry = self.check_resume(tr, log, pending, lin, deadline, m)
                        ok += 1
                        print('layout %s: %s' % (layout, pending['msg']), flush=True)
                    except AssertionError as e:
                        fails.append('round %d: %s' % (rnd - 1, e))
                        print('layout %s: round %d FAILED: %s' % (layout, rnd - 1, e),
                              flush=True)
                        break   # the lineage the next rounds would check is unknown now
                    pending = None
                if rnd > ROUNDS:
                    break
                # 3. killed inside one of its next saves (with the daemon, every 4th round)
                nsave, t_saving = 0, None
                while True:
                    t, ln = carry.pop(0) if carry else tr.next_line(deadline)
                    if ln is None:
                        raise AssertionError('round %d: trainer exited (%s) before the kill%s'
                                             % (rnd, tr.p.wait(), tr.tail()))
                    if ln.startswith('SAVED '):
                        lin.add_saved(int(ln.split()[1]))
                        if dur is None and t_saving is not None:
                            dur = t - t_saving
                    elif ln.startswith('SAVING '):
                        nsave += 1
                        t_saving = t
                        if nsave == kill_save and dur is not None:
                            delay = frac * dur
                            time.sleep(max(0.0, t_saving + delay - time.monotonic()))
                            if daemon:
                                m.kill_daemon(then=tr.kill)
                                dkills += 1
                            else:
                                tr.kill()
                            killed = int(ln.split()[1])
                            what = ('the rewrite of complete step %d' % killed
                                    if killed in lin.abandoned else 'the save of step %d' %
                                    killed)
                            break
                for _, ln in drain(tr):
                    if ln.startswith('SAVED '):
                        lin.add_saved(int(ln.split()[1]))
                tr.close()
                tr = None
                if daemon:
                    m.start()
                if lin.newest() != killed:
                    lin.dirty.add(killed)   # its log lines are the killed attempt's
                off = log_size(log)
                pending = {
                    'off': off, 'killed': killed, 'expect': lin.newest(),
                    'msg': 'round %d: %s killed %.2fs into %s (a save takes %.2fs); newest '
                           'SAVED in the lineage %s' % (
                               rnd, 'daemon and trainer' if daemon else 'trainer', delay,
                               what, dur, lin.newest()),
                }
        finally:
            if tr is not None:
                tr.close()
            m.close()
        line = ('layout %s: %d/%d rounds with rollbacks and rewrites resumed to a complete step '
                '(%d daemon kills, %.1fs)' % (layout, ok, ROUNDS, dkills, time.monotonic() - t0))
        SUMMARY.append(line)
        print(line, flush=True)
        if fails:
            self.fail('\n'.join(fails))

    def check_resume(self, tr, log, p, lin, deadline, m):
        """Read until the resumed job's first SAVING, then check where it resumed against the
        lineage. Returns [(t, that SAVING line)] for the kill loop."""
        t, _, ln = await_resume(tr, deadline, 'SAVING ', lambda: p['msg'] + daemon_log(m))
        before = LogView(read_log(log, 0, p['off']))
        before.saved = list(lin.saved)  # the current lineage's, not every SAVED of the log
        try:
            step = check_resumed(tr, before, log, p['off'], expect_step=p['expect'],
                                 killed_step=p['killed'], unlogged=lin.unlogged)
        except AssertionError as e:
            raise AssertionError('%s; %s\n--- the save directory before the resume ---\n%s%s'
                                 % (e, p['msg'], p.get('tree', ''), daemon_log(m)))
        if step == p['killed'] and step not in lin.saved:
            lin.unlogged.add(step)  # complete, though its SAVED line was never written
        lin.cut_to(step)
        p['msg'] += '; resumed to %d' % step
        return [(t, ln)] if ln and ln.startswith('SAVING ') else []


for _l in selected():
    def _t(self, layout=_l):
        self.loop(layout)
    _t.__name__ = 'test_%s' % _l
    setattr(TestCrashLineage, _t.__name__, _t)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '1500')),
                                      exit=True)
    unittest.main(verbosity=2)
