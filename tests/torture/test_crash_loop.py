#!/usr/bin/python3
"""The crash loop: for each layout, CKPTFS_TORTURE_ROUNDS rounds (default 20) of a real 2-rank
PyTorch training job (tests/e2e/trainer.py, gloo) on one ckptfs mount, SIGKILLed at a random
moment of a save; every 5th round the daemon is SIGKILLed too (then fusermount3 -uz and a remount
of the same STORE). Each round's job is the previous round's resume: it starts with --resume, and
the framework's own resume logic must land on a complete step, bit-exact (file sha256s against
what the writers logged, state digest, loss: trainers.check_resumed); then it trains on
and is killed inside one of its next saves.

Rounds are chained (one trainer start per round), so 20 rounds x 8 layouts take ~15 min on 2
cores. Prints per layout `layout L: P/N rounds resumed to a complete step (D daemon kills)`.

Every 4th round that kills no daemon, rank 0 instead exits by itself (os._exit) right after its
first file of the save, no file torn by a kill, and the next trainer starts 0.1 s after the last
process of the job is gone (issue 18: a restart faster than any timer never lands on the
abandoned step). DeepSpeed and Hugging Face get a second loop, test_<layout>_saved_daemon_kill,
whose every round SIGKILLs the daemon 0-1 s after a save returned (its SAVED line): the resume
must land on that save.

The step resumed onto must be the newest SAVED one, or the killed step when its files were all
whole (see check_resumed): a save that returned is never lost, daemon kills included.

CKPTFS_CRASH_PLAIN=1 runs the same loop on a plain directory (no ckptfs, no daemon kills) as the
baseline a user has today: a round whose resume is not a complete step is counted, not failed,
and the summary says how many rounds resumed torn (issue 18 asks this of internevo-snap:
`CKPTFS_CRASH_PLAIN=1 CKPTFS_E2E_LAYOUTS=internevo-snap ... test_crash_loop.py`).

Environment: CKPTFS_BIN, CKPTCTL_BIN, CKPTFS_TORTURE_ROUNDS (20), CKPTFS_E2E_LAYOUTS (default
all), CKPTFS_CRASH_SEED (random; printed), CKPTFS_SLOW_SAVE (0.15), CKPTFS_KEEP=1,
CKPTFS_CRASH_PLAIN.
Run: /usr/bin/python3 tests/torture/test_crash_loop.py [-v]      (200+ rounds by hand:
CKPTFS_TORTURE_ROUNDS=200 scripts/torture.sh)
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from crashround import await_resume  # noqa: E402
import trainers  # noqa: E402
from trainers import (LogView, Trainer, check_resumed, daemon_log, drain, log_size,  # noqa: E402
                      read_log)

ROUNDS = int(os.environ.get('CKPTFS_TORTURE_ROUNDS', '20'))
SEED = trainers.SEED
SLOW = trainers.SLOW
RUN_TIMEOUT = trainers.RUN_TIMEOUT
PLAIN = os.environ.get('CKPTFS_CRASH_PLAIN') == '1'
SUMMARY = []


class TestCrashLoop(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        print('crash loop: CKPTFS_CRASH_SEED=%d, %d rounds per layout, %s, slow-save %.2fs' % (
            SEED, ROUNDS, 'on a PLAIN DIRECTORY (baseline, no ckptfs)' if PLAIN else
            'every 5th also kills the daemon', SLOW), flush=True)

    @classmethod
    def tearDownClass(cls):
        if SUMMARY:
            print('\n' + '\n'.join(SUMMARY), flush=True)

    def loop(self, layout, after_saved=False):
        """after_saved: every round SIGKILLs the daemon (and the job) 0-1 s after a save
        returned (its SAVED line), and the resume must land on that save."""
        t0 = time.monotonic()
        rng = random.Random('%d-loop-%s%s' % (SEED, layout, '-saved' if after_saved else ''))
        keep = trainers.KEEP_CRASH.get(layout, 0)
        ok, fails, dkills = 0, [], 0
        m = ckfs.PlainDir() if PLAIN else ckfs.Mount()
        m.start()
        log = os.path.join(m.tmp, 'trainer.log')
        dur = None              # how long a save takes (the first one measured)
        saved_t = {}            # step -> time its SAVED line was read
        pending = None          # what the next trainer's resume is checked against
        unlogged = set()        # killed steps found whole and resumed onto (never SAVED)
        tr = None
        fresh = True            # plain: the next trainer starts fresh (no resume)
        try:
            for rnd in range(1, ROUNDS + 2):
                daemon = not PLAIN and (after_saved or rnd % 5 == 0)
                # every 4th round (not a daemon kill): rank 0 exits by itself right after its
                # first file of the save, its files closed normally, and the resume starts
                # 0.1 s after the whole job is gone (issue 18: no race with a fast restart)
                torn_exit = not after_saved and not daemon and rnd % 4 == 2
                kill_save = rng.choice([2, 3] if dur is None else [1, 2])
                frac = rng.uniform(*trainers.FRAC)
                tr = Trainer(layout, m.mnt, log, steps=1000000, every=2, keep=keep,
                             slow=SLOW, resume=not fresh,
                             exit_in_save=kill_save if torn_exit and rnd <= ROUNDS else 0)
                deadline = time.monotonic() + RUN_TIMEOUT
                carry = []      # lines check_resume read that the kill loop must see
                # 1. the resume of the previous round's kill
                if pending:
                    try:
                        carry = self.check_resume(tr, log, pending, deadline, m)
                        ok += 1
                        print('layout %s: %s' % (layout, pending['msg']), flush=True)
                    except AssertionError as e:
                        fails.append('round %d: %s' % (rnd - 1, e))
                        print('layout %s: round %d FAILED: %s' % (layout, rnd - 1, e),
                              flush=True)
                    pending = None
                if rnd > ROUNDS:
                    break
                fresh = False
                if PLAIN and tr.p.poll() is not None:
                    # the resume of a torn save crashed the trainer, as it would again at every
                    # restart: the next round starts a new job in an emptied directory
                    plain_restart(tr, m, log, unlogged)
                    tr, fresh = None, True
                    continue
                # 2. kill it inside one of its next saves (or just after one, or let rank 0
                # exit in one)
                nsave, t_saving, what, saving_line, t_kill = 0, None, None, None, None
                while True:
                    t, ln = carry.pop(0) if carry else tr.next_line(deadline)
                    if ln is None:
                        if torn_exit and nsave == kill_save:
                            # rank 0 exited; the launcher stopped the other ranks
                            tr.p.wait(timeout=60)
                            if not tr.wait_gone():
                                raise AssertionError('round %d: the job did not end within 30 s '
                                                     'after rank 0 exited' % rnd)
                            t_kill = time.monotonic()
                            delay = t_kill - t_saving
                            killed = int(saving_line.split()[1])
                            what = 'rank 0 exited after its first file'
                            break
                        if PLAIN:
                            break
                        raise AssertionError('round %d: trainer exited (%s) before the kill%s'
                                             % (rnd, tr.p.wait(), tr.tail()))
                    if ln.startswith('SAVED '):
                        saved_t[int(ln.split()[1])] = t
                        if dur is None and t_saving is not None:
                            dur = t - t_saving
                        if after_saved and nsave >= kill_save and dur is not None:
                            delay = rng.uniform(0.0, 1.0)
                            time.sleep(max(0.0, t + delay - time.monotonic()))
                            t_kill = time.monotonic()
                            m.kill_daemon(then=tr.kill)
                            dkills += 1
                            killed = int(ln.split()[1])
                            what = 'daemon and trainer killed %.2fs after SAVED %d' % (
                                delay, killed)
                            break
                    elif ln.startswith('SAVING '):
                        nsave += 1
                        t_saving = t
                        saving_line = ln
                        if nsave == kill_save and dur is not None and not torn_exit and \
                                not after_saved:
                            delay = frac * dur
                            time.sleep(max(0.0, t_saving + delay - time.monotonic()))
                            t_kill = time.monotonic()
                            if daemon:
                                m.kill_daemon(then=tr.kill)   # the job dies with the daemon
                                dkills += 1
                            else:
                                tr.kill()
                            killed = int(ln.split()[1])
                            break
                if PLAIN and what is None and t_kill is None:
                    if not fails or not fails[-1].startswith('round %d:' % (rnd - 1)):
                        fails.append('round %d: the resumed trainer exited' % (rnd - 1))
                    plain_restart(tr, m, log, unlogged)
                    tr, fresh = None, True
                    continue
                for t, ln in drain(tr):
                    if ln.startswith('SAVED '):
                        saved_t[int(ln.split()[1])] = t
                tr.close()
                tr = None
                if daemon:
                    m.start()
                if torn_exit:
                    time.sleep(0.1)
                off = log_size(log)
                before = LogView(read_log(log, 0, off))
                if PLAIN and not (set(before.saved) | unlogged):
                    fresh = True    # killed in the fresh job's first save: nothing to resume
                    continue
                expect = max(set(before.saved) | unlogged)
                before.saved += [s for s in sorted(unlogged) if s not in before.saved]
                pending = {
                    'tree': ckfs.tree_dump(m.mnt), 'unlogged': unlogged,
                    'before': before, 'off': off, 'expect': expect, 'killed': killed,
                    'msg': ('round %d: %s (step %d; a save takes %.2fs); newest SAVED %d' % (
                        rnd, what, killed, dur, expect)) if what else
                    ('round %d: %s killed %.2fs into the save of step %d (a save takes '
                     '%.2fs); newest SAVED %d' % (rnd, 'daemon and trainer' if daemon
                                                  else 'trainer', delay, killed, dur, expect)),
                }
        finally:
            if tr is not None:
                tr.close()
            m.close()
        line = 'layout %s%s: %d/%d rounds resumed to a complete step (%d daemon kills, %.1fs)' % (
            layout, ' (daemon killed after SAVED)' if after_saved else '', ok, ROUNDS, dkills,
            time.monotonic() - t0)
        if PLAIN:
            line = ('layout %s on a plain directory: %d rounds, %d with a step to resume: %d '
                    'resumed to a complete step, %d resumed torn (loaded a mix of steps, or '
                    'failed on a torn file) (%.1fs)' % (
                        layout, ROUNDS, ok + len(fails), ok, len(fails),
                        time.monotonic() - t0))
        SUMMARY.append(line)
        print(line, flush=True)
        if fails and not PLAIN:
            self.fail('\n'.join(fails))

    def check_resume(self, tr, log, p, deadline, m):
        """Read until the resumed job's first SAVING (its LOADED lines are in the log by
        then), then check where it resumed. Returns [(t, that SAVING line)] for the caller."""
        t, _, ln = await_resume(tr, deadline, 'SAVING ',
                                lambda: p['msg'] + ('' if PLAIN else daemon_log(m)))
        exp = p['expect']
        try:
            step = check_resumed(tr, p['before'], log, p['off'], expect_step=exp,
                                 killed_step=p['killed'], unlogged=p['unlogged'])
        except AssertionError as e:
            raise AssertionError('%s; %s\n--- the save directory before the resume ---\n%s%s'
                                 % (e, p['msg'], p['tree'], ('' if PLAIN else daemon_log(m))))
        if step == p['killed'] and step not in p['before'].saved:
            p['unlogged'].add(step)     # complete, though its SAVED line was never written
        p['msg'] += '; resumed to %d' % step
        return [(t, ln)] if ln and ln.startswith('SAVING ') else []


def plain_restart(tr, m, log, unlogged):
    """Plain directory: close the dead job, empty the save directory (kept: the trainer log
    lives beside it), the log and the unlogged steps: the next job starts from nothing."""
    tr.close()
    open(log, 'w').close()
    unlogged.clear()
    top = m.mnt
    for name in os.listdir(top):
        p = os.path.join(top, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)


def _add(layout):
    def t(self):
        self.loop(layout)
    t.__name__ = 'test_%s' % layout
    setattr(TestCrashLoop, t.__name__, t)
    if layout in ('deepspeed', 'hf') and not PLAIN:
        # issue 18: a daemon kill within 1 s after a save returned resumes on that save
        def t2(self):
            self.loop(layout, after_saved=True)
        t2.__name__ = 'test_%s_saved_daemon_kill' % layout
        setattr(TestCrashLoop, t2.__name__, t2)


for _l in trainers.selected_layouts():
    _add(_l)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(5400, exit=True)
    unittest.main(verbosity=2)
