#!/usr/bin/python3
"""Every framework layout, end to end, with a real 2-rank PyTorch training job (trainer.py).

For each layout (mf2 megatron mf1 deepspeed hf dcp internevo orbax):
  plain   - harness self-test on a plain temporary directory: train with saves (and the
            framework's own retention), then --resume: it must land on the last saved step, the
            loaded files must hash to what the writers logged, the state digest and loss must
            match, the next step's loss must equal the uninterrupted run's, the directory must
            hold exactly what the framework leaves.
  ckptfs  - CKPTFS_CRASH_ROUNDS rounds (default 2) on a fresh ckptfs mount each: train with
            --slow-save, SIGKILL the whole job at a random moment inside a save (the daemon stays
            up), restart with --resume, and assert it resumed, onto the newest step the log says
            was SAVED (complete), bit-exact (file sha256s vs the log, state digest, loss); then
            the resumed job must complete its next save (it re-creates the torn step).
            Prints `layout L: P/N rounds resumed to a complete step`.

Environment: CKPTFS_BIN, CKPTCTL_BIN (see ../lib/ckfs.py), CKPTFS_CRASH_ROUNDS (2),
CKPTFS_CRASH_SEED (random; printed), CKPTFS_E2E_LAYOUTS (comma list, default all),
CKPTFS_SLOW_SAVE (0.15 seconds), CKPTFS_CRASH_FRAC (`lo,hi`: the kill lands at a uniform
fraction of the first save's duration, default 0.02,0.98).
Run: /usr/bin/python3 tests/e2e/test_frameworks.py [-v] [TestFrameworks.test_hf_ckptfs]
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import os  # noqa: E402
import queue  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402

TRAINER = os.path.join(HERE, 'trainer.py')
PYTHON = '/usr/bin/python3'
LAYOUTS = ('mf2', 'megatron', 'mf1', 'deepspeed', 'hf', 'dcp', 'internevo', 'internevo-snap',
           'orbax')
# the framework's own retention where it has one; mf2 with keep=1 deletes the newest complete
# step before writing the next one, which ckptfs must survive
KEEP_PLAIN = {'mf2': 2, 'mf1': 2, 'hf': 2, 'dcp': 2, 'orbax': 2}
KEEP_CRASH = {'mf2': 1, 'mf1': 2, 'hf': 2, 'dcp': 2, 'orbax': 2}
ROUNDS = int(os.environ.get('CKPTFS_CRASH_ROUNDS', '2'))
SEED = int(os.environ.get('CKPTFS_CRASH_SEED') or random.SystemRandom().randrange(1 << 30))
SLOW = float(os.environ.get('CKPTFS_SLOW_SAVE', '0.15'))
# where in a save the kill lands, as a fraction of the first save's duration
FRAC = tuple(float(x) for x in os.environ.get('CKPTFS_CRASH_FRAC', '0.02,0.98').split(','))
RUN_TIMEOUT = 180
SUMMARY = []


def selected_layouts():
    v = os.environ.get('CKPTFS_E2E_LAYOUTS')
    return tuple(x for x in v.split(',') if x) if v else LAYOUTS


def kv(line):
    return dict(x.split('=', 1) for x in line.split()[1:] if '=' in x)


class Trainer:
    """One trainer.py job in its own session (process group); stdout lines are timestamped."""

    def __init__(self, layout, save, log, steps, every, keep=0, resume=False, slow=0.0,
                 exit_in_save=0):
        self.argv = [PYTHON, TRAINER, '--layout', layout, '--save', save, '--steps', str(steps),
                     '--save-every', str(every), '--keep', str(keep), '--log', log,
                     '--slow-save', str(slow)] + (['--resume'] if resume else []) + (
                         ['--exit-in-save', str(exit_in_save)] if exit_in_save else [])
        self.errf = tempfile.TemporaryFile()
        env = dict(os.environ, PYTHONUNBUFFERED='1', PYTHONDONTWRITEBYTECODE='1')
        self.p = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self.errf,
                                  stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        self.q = queue.Queue()
        self.lines = []
        self.killed = False
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for raw in self.p.stdout:
            self.q.put((time.monotonic(), raw.decode(errors='replace').rstrip('\n')))
        self.q.put((time.monotonic(), None))

    def next_line(self, deadline):
        """(time, line) or (time, None) at EOF; raises AssertionError past deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            self.kill()
            raise AssertionError('trainer timed out: %s%s' % (' '.join(self.argv), self.tail()))
        try:
            t, ln = self.q.get(timeout=left)
        except queue.Empty:
            self.kill()
            raise AssertionError('trainer timed out: %s%s' % (' '.join(self.argv), self.tail()))
        if ln is not None:
            self.lines.append(ln)
        return t, ln

    def kill(self):
        """SIGKILL the whole process group (launcher and every rank)."""
        self.killed = True
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait(timeout=60)
        self.wait_gone()

    def wait_gone(self, timeout=30):
        """Wait until no process of the job's group (launcher and every rank) is left;
        returns whether none is."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(self.p.pid, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.01)
        return False

    def wait(self, timeout=RUN_TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            _, ln = self.next_line(deadline)
            if ln is None:
                break
        return self.p.wait(timeout=max(1, deadline - time.monotonic()))

    def tail(self, n=25):
        try:
            self.errf.seek(0)
            err = self.errf.read().decode(errors='replace').splitlines()[-n:]
        except (OSError, ValueError):
            err = []
        return '\n--- stdout tail ---\n%s\n--- stderr tail ---\n%s' % (
            '\n'.join(self.lines[-n:]), '\n'.join(err))

    def close(self):
        if self.p.poll() is None:
            self.kill()
        self.t.join(timeout=10)
        self.p.stdout.close()
        self.errf.close()


class LogView:
    """What the writers logged (before a given byte offset of the side log)."""

    def __init__(self, text):
        self.saved = []          # steps, in order
        self.wrote = {}          # path -> sha256 (last)
        self.will = {}           # path -> sha256 (last intended, logged before the write)
        self.state = {}          # step -> digest (last)
        # (step, path) -> sha256: a slot (InternEvo snapshot/K) holds the same paths at every
        # step, so what a resumed step's files must hash to is what that step wrote
        self.wrote_at = {}
        self.will_at = {}
        self.loss = {}           # step -> loss string (last STEP line)
        for ln in text.splitlines():
            w = ln.split(' ', 1)[0]
            f = kv(ln)
            if w == 'SAVED':
                self.saved.append(int(ln.split()[1]))
            elif w == 'WROTE':
                self.wrote[f['path']] = f['sha256']
                self.wrote_at[(int(f['step']), f['path'])] = f['sha256']
            elif w == 'WILL':
                self.will[f['path']] = f['sha256']
                self.will_at[(int(f['step']), f['path'])] = f['sha256']
            elif w == 'STATE':
                self.state[int(f['step'])] = f['digest']
            elif w == 'STEP':
                self.loss[int(ln.split()[1])] = f['loss']


def read_log(path, start=0, end=None):
    with open(path, 'rb') as f:
        f.seek(start)
        b = f.read() if end is None else f.read(end - start)
    return b.decode(errors='replace')


def log_size(path):
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def check_resumed(tr, before, log_path, log_off, expect_step=None, killed_step=None,
                  unlogged=()):
    """Assert the trainer resumed onto a complete step, bit-exact. Returns the step.

    The expected step is `expect_step` (default: the newest SAVED). `killed_step`, the step
    whose save the kill interrupted, is accepted instead when it is newer: the kill can land
    after the save's last file (the marker) is whole but before the trainer logs WROTE/SAVED,
    and then the step is rightly complete; it must still load bit-exact with what the writers
    meant to write (a torn file never hashes to that). `unlogged`: such steps accepted in
    earlier rounds (a chained crash loop), checked the same way."""
    resumed = [ln for ln in tr.lines if ln.startswith(('RESUMED', 'FRESH'))]
    if not resumed:
        raise AssertionError('no RESUMED line%s' % tr.tail())
    if resumed[0] == 'FRESH':
        raise AssertionError('did not resume: the trainer found no checkpoint and started '
                             'fresh, but steps %s were SAVED' % before.saved)
    f = kv(resumed[0])
    step = int(f['step'])
    newest = max(before.saved) if before.saved else None
    if expect_step is None:
        expect_step = newest
    finished_unlogged = ((killed_step is not None and step == killed_step and
                          (newest is None or killed_step > newest)) or step in unlogged)
    if step not in before.saved and not finished_unlogged:
        raise AssertionError('resumed onto step %d, which was never SAVED (complete steps: %s)'
                             % (step, before.saved))
    if step != expect_step and not finished_unlogged:
        raise AssertionError('resumed onto step %d, but step %d was the newest complete step '
                             '(SAVED: %s)' % (step, expect_step, before.saved))
    if f['digest'] != before.state.get(step):
        raise AssertionError('step %d: loaded state digest %s != saved %s' %
                             (step, f['digest'][:16], str(before.state.get(step))[:16]))
    if f['loss'] != before.loss.get(step):
        raise AssertionError('step %d: resumed loss %s != logged loss %s' %
                             (step, f['loss'], before.loss.get(step)))
    loaded = [kv(ln) for ln in read_log(log_path, log_off).splitlines()
              if ln.startswith('LOADED ')]
    if not loaded:
        raise AssertionError('no LOADED lines in the log after the resume')
    # a SAVED step's files must equal their last WROTE; the killed step's, their last intent
    want = before.will if finished_unlogged else before.wrote
    want_at = before.will_at if finished_unlogged else before.wrote_at

    def ok_hashes(p):
        if (step, p) in want_at or (step, p) in before.wrote_at:
            return (want_at.get((step, p)), before.wrote_at.get((step, p)))
        return (want.get(p), before.wrote.get(p))
    bad = ['%s (rank %s): read %s, written %s' % (x['path'], x['rank'], x['sha256'][:16],
                                                   (ok_hashes(x['path'])[0] or
                                                    'never completely')[:16])
           for x in loaded if x['sha256'] not in ok_hashes(x['path'])]
    if bad:
        raise AssertionError('step %d: files not bit-exact: %s' % (step, '; '.join(bad)))
    return step


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
            killed_at = None
            try:
                deadline = time.monotonic() + RUN_TIMEOUT
                nsave, t_saving, dur = 0, None, None
                while True:
                    t, ln = a.next_line(deadline)
                    if ln is None:
                        raise AssertionError('trainer exited (%s) before the kill%s' %
                                             (a.p.wait(), a.tail()))
                    if ln.startswith('SAVING '):
                        nsave += 1
                        t_saving = t
                        if nsave == kill_save:
                            # a save lasts about as long as the first one did
                            delay = frac * dur
                            time.sleep(max(0.0, t_saving + delay - time.monotonic()))
                            a.kill()
                            killed_at = (int(ln.split()[1]), delay, dur)
                            break
                    elif ln.startswith('SAVED ') and dur is None:
                        dur = t - t_saving
            finally:
                a.close()
            off = log_size(log)
            before = LogView(read_log(log, 0, off))
            # what the writers had finished when the job died
            note = 'killed %.2fs into the save of step %d (first save took %.2fs); SAVED: %s' % (
                killed_at[1], killed_at[0], killed_at[2], before.saved)
            b = Trainer(layout, save, log, steps=1000, every=2, keep=keep, resume=True)
            try:
                deadline = time.monotonic() + RUN_TIMEOUT
                resumed = None
                while True:
                    _, ln = b.next_line(deadline)
                    if ln is None:
                        raise AssertionError('resumed trainer exited with status %s: %s%s' %
                                             (b.p.wait(), note, b.tail()))
                    if ln.startswith(('RESUMED', 'FRESH')) and resumed is None:
                        resumed = ln
                        if ln == 'FRESH':
                            break
                    if resumed and ln.startswith('SAVED '):
                        break   # it also saved again over the torn step
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
        t0 = time.monotonic()
        rng = random.Random('%d-%s' % (SEED, layout))
        ok, fails = 0, []
        for rnd in range(1, ROUNDS + 1):
            try:
                msg = self.crash_round(layout, rnd, rng)
                ok += 1
                print('layout %s: %s' % (layout, msg), flush=True)
            except AssertionError as e:
                fails.append('round %d: %s' % (rnd, e))
                print('layout %s: round %d FAILED: %s' % (layout, rnd, e), flush=True)
        line = 'layout %s: %d/%d rounds resumed to a complete step (%.1fs)' % (
            layout, ok, ROUNDS, time.monotonic() - t0)
        SUMMARY.append(line)
        print(line, flush=True)
        if fails:
            self.fail('\n'.join(fails))


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
