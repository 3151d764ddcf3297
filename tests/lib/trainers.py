"""trainers.py - drive the trainer of tests/e2e/trainer.py and read what it logs.

Trainer(layout, save, log, ...) runs one training job (2 ranks, one of the frameworks' layouts,
saving into `save`) in its own process group and hands out its stdout lines with their times;
LogView, read_log and log_size read its log (SAVING / SAVED / RESUMED / LOADED lines);
check_resumed checks that a resumed job loaded one complete step. The crash tests (tests/e2e,
tests/torture) and the save-window benchmark share these and the settings below.

Environment: CKPTFS_E2E_LAYOUTS (comma list, default all), CKPTFS_CRASH_SEED (random),
CKPTFS_SLOW_SAVE (0.15 seconds), CKPTFS_CRASH_FRAC (`lo,hi`, default 0.02,0.98).
"""

import os
import queue
import random
import signal
import subprocess
import tempfile
import threading
import time

import ckfs

TRAINER = os.path.join(ckfs.REPO_ROOT, 'tests', 'e2e', 'trainer.py')
PYTHON = '/usr/bin/python3'
LAYOUTS = ('mf2', 'megatron', 'mf1', 'deepspeed', 'hf', 'dcp', 'internevo', 'internevo-snap',
           'orbax', 'lightning', 'lightning-link')
# the framework's own retention in the crash tests; mf2 with keep=1 deletes the newest complete
# step before writing the next one, which ckptfs must survive
# lightning's default (save_top_k=1) removes the previous step file once the new one is written
KEEP_CRASH = {'mf2': 1, 'mf1': 2, 'hf': 2, 'dcp': 2, 'orbax': 2, 'lightning': 1,
              'lightning-link': 1}
SEED = int(os.environ.get('CKPTFS_CRASH_SEED') or random.SystemRandom().randrange(1 << 30))
SLOW = float(os.environ.get('CKPTFS_SLOW_SAVE', '0.15'))
# where in a save the kill lands, as a fraction of the first save's duration
FRAC = tuple(float(x) for x in os.environ.get('CKPTFS_CRASH_FRAC', '0.02,0.98').split(','))
RUN_TIMEOUT = 180


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


def drain(tr):
    """Lines the trainer printed that nobody read yet, with their times: [(t, line)]."""
    out = []
    tr.t.join(timeout=10)
    while True:
        try:
            t, ln = tr.q.get_nowait()
        except queue.Empty:
            break
        if ln is not None:
            tr.lines.append(ln)
            out.append((t, ln))
    return out



def daemon_log(m, n=40):
    """The daemon log's tail and the step table, for a failure message."""
    r = ckfs.ckptctl(m.store, 'steps')
    return '%s\n--- ckptctl steps ---\n%s%s' % (m.log_tail(n), r.stdout, r.stderr)
