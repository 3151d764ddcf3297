#!/usr/bin/python3
"""PyTorch Lightning's ModelCheckpoint on a mount, killed at the named moments of a save
(tests/traces/lightning.md, "What a crash leaves"), with the real 2-rank trainer
(trainer.py --layout lightning): each kill lands where the trace's crash table says Lightning
alone fails, and the resume (`ckpt_path="last"`: the newest mtime among `last*.ckpt`) must land
on the newest saved step, bit-exact (trainers.check_resumed).

  last_rewrite   save_last=True: the trainer is killed while it copies `last.ckpt` in place
                 (O_TRUNC, the copy shutil.move makes across devices). On a plain directory
                 the resume torch.loads the torn copy and fails; ckptfs gives back the last
                 whole `last.ckpt` (fs/steps/steps_top.c).
  daemon_kill    the daemon SIGKILLed during that copy, then a remount of the same store: the
                 resume lands on the newest saved step (steps_top_recover at the mount).
  link_dangling  save_last="link": killed after the top-k retention removed the previous
                 step file and before last.ckpt is linked to the new one. Alone, the link
                 dangles and the resume starts from scratch; ckptfs points it at the newest
                 complete step file when its target is removed.
  link_retention the same when -o keep_checkpoint_max prunes the link's target (the trainer
                 keeps every file, save_top_k=-1): the link names the newest complete step.
  link_removed   save_last="link": killed between Lightning's os.remove(last.ckpt) and its
                 os.symlink. Alone, there is no last.ckpt and the resume starts from scratch;
                 ckptfs keeps the removed link until its remover makes it again, and puts it
                 back when the remover is gone.
  fsync_midway   a rewrite of last.ckpt that fsyncs half-way (its half is malformed when
                 committed) goes on into the name: only a writer that died gets the old
                 version back.
  step_files     the step files are steps: complete once closed whole, pruned by
                 -o keep_checkpoint_max, and a torn step file is no complete step.

Environment: CKPTFS_BIN, CKPTCTL_BIN (see ../lib/ckfs.py).
Run: /usr/bin/python3 tests/e2e/test_lightning.py [-v]
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from crashround import await_resume  # noqa: E402
from trainers import (RUN_TIMEOUT, LogView, Trainer, check_resumed, daemon_log,  # noqa: E402
                      log_size, read_log)

SLOW = 0.8


def wait_log(log, pred, deadline):
    """Poll the side log until a line satisfies pred; returns the line."""
    while time.monotonic() < deadline:
        try:
            with open(log, errors='replace') as f:
                for ln in f.read().splitlines():
                    if pred(ln):
                        return ln
        except FileNotFoundError:
            pass
        time.sleep(0.005)
    raise AssertionError('no such line in %s' % log)


class TestLightning(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        ckfs.check_fuse_usable()

    def run_to_end(self, m, log, steps, resume=False, keep=1):
        tr = Trainer('lightning', m.mnt, log, steps=steps, every=4, keep=keep, resume=resume)
        try:
            self.assertEqual(tr.wait(), 0, tr.tail())
        finally:
            tr.close()

    def kill_in_save(self, m, layout, line, after=0.0, keep=1, daemon=False):
        """Run the trainer on m until its side log has a line starting with line (a point of
        step 8's save), wait after x SLOW, then SIGKILL it (with daemon, the daemon first).
        Returns (log path, the log's size, what was logged before)."""
        log = os.path.join(m.tmp, 'trainer.log')
        tr = Trainer(layout, m.mnt, log, steps=1000, every=4, keep=keep, slow=SLOW)
        try:
            wait_log(log, lambda ln: ln.startswith(line), time.monotonic() + RUN_TIMEOUT)
            time.sleep(SLOW * after)
            if daemon:
                m.kill_daemon(then=tr.kill)
            else:
                tr.kill()
        finally:
            tr.close()
        before = LogView(read_log(log))
        self.assertEqual(before.saved, [4])
        return log, log_size(log), before

    def resume(self, m, layout, log, off, before, killed_step=None):
        """Resume (ckpt_path="last") to step 12; returns the step it resumed from, checked
        bit-exact against what the killed run wrote."""
        tr = Trainer(layout, m.mnt, log, steps=12, every=4, keep=1, resume=True)
        try:
            await_resume(tr, time.monotonic() + RUN_TIMEOUT, 'SAVED ', lambda: daemon_log(m))
            step = check_resumed(tr, before, log, off, killed_step=killed_step)
            self.assertEqual(tr.wait(), 0, tr.tail())
            return step
        finally:
            tr.close()

    def link(self, m):
        return os.readlink(os.path.join(m.mnt, 'last.ckpt'))

    def test_last_rewrite(self):
        m = ckfs.Mount()
        try:
            m.start()
            # the second save's copy into last.ckpt has begun: kill inside its paced writes
            log, off, before = self.kill_in_save(m, 'lightning',
                                                 'WILL step=8 rank=0 path=last.ckpt ', 0.15)
            self.assertEqual(self.resume(m, 'lightning', log, off, before), 4)
            # step 8's file was whole before the kill; the resumed callback's state (of step 4)
            # does not know it, so Lightning saves step 8 again as -v1 and never removes it
            self.assertEqual(sorted(os.listdir(m.mnt)),
                             ['epoch=0-step=12.ckpt', 'epoch=0-step=8.ckpt', 'last.ckpt'])
        finally:
            m.close()

    def test_daemon_kill(self):
        m = ckfs.Mount()
        try:
            m.start()
            log, off, before = self.kill_in_save(m, 'lightning',
                                                 'WILL step=8 rank=0 path=last.ckpt ', 0.15,
                                                 daemon=True)
            m.start()
            self.assertEqual(self.resume(m, 'lightning', log, off, before), 4)
        finally:
            m.close()

    def test_link_dangling(self):
        m = ckfs.Mount()
        try:
            m.start()
            # step 8's file is written; the barrier, the removal of step 4's file, then the
            # pause before last.ckpt is removed and linked again: killed in that pause
            log, off, before = self.kill_in_save(m, 'lightning-link',
                                                 'PAUSE step=8 before=remove ')
            self.assertEqual(self.link(m), 'epoch=0-step=8.ckpt', daemon_log(m))
            # step 8 was complete (its file whole) though not SAVED: accepted as killed_step
            self.assertEqual(self.resume(m, 'lightning-link', log, off, before, killed_step=8),
                             8)
        finally:
            m.close()

    def test_link_retention(self):
        m = ckfs.Mount(opts=('keep_checkpoint_max=1',))
        try:
            m.start()
            # keep=0: save_top_k=-1, the trainer keeps every file; step 8's file complete,
            # ckptfs prunes step 4's, which last.ckpt names until the trainer links it again:
            # killed before it does
            self.kill_in_save(m, 'lightning-link', 'PAUSE step=8 before=remove ', keep=0)
            self.assertEqual(sorted(os.listdir(m.mnt)), ['epoch=0-step=8.ckpt', 'last.ckpt'])
            self.assertEqual(self.link(m), 'epoch=0-step=8.ckpt', daemon_log(m))
        finally:
            m.close()

    def test_link_removed(self):
        m = ckfs.Mount()
        try:
            m.start()
            # killed between os.remove(last.ckpt) and os.symlink
            log, off, before = self.kill_in_save(m, 'lightning-link',
                                                 'PAUSE step=8 before=symlink ')
            self.assertEqual(self.link(m), 'epoch=0-step=8.ckpt', daemon_log(m))
            self.assertEqual(self.resume(m, 'lightning-link', log, off, before, killed_step=8),
                             8)
        finally:
            m.close()

    def test_fsync_midway(self):
        import io
        import torch
        m = ckfs.Mount()
        try:
            m.start()
            path = os.path.join(m.mnt, 'last.ckpt')
            old, new = io.BytesIO(), io.BytesIO()
            torch.save({'v': torch.zeros(50000)}, old)
            torch.save({'v': torch.ones(50000)}, new)
            with open(path, 'wb') as f:
                f.write(old.getvalue())
            b = new.getvalue()
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, b[:len(b) // 2])
                os.fsync(fd)
                os.write(fd, b[len(b) // 2:])
            finally:
                os.close(fd)
            with open(path, 'rb') as f:
                self.assertTrue(f.read() == b, 'last.ckpt does not hold what was written%s' %
                                daemon_log(m))
        finally:
            m.close()

    def test_step_files(self):
        m = ckfs.Mount(opts=('keep_checkpoint_max=2',))
        try:
            m.start()
            log = os.path.join(m.tmp, 'trainer.log')
            # keep=0: save_top_k=-1, Lightning keeps every file; ckptfs keeps the newest 2
            self.run_to_end(m, log, 16, keep=0)
            m.settle()
            self.assertEqual(sorted(os.listdir(m.mnt)),
                             ['epoch=0-step=12.ckpt', 'epoch=0-step=16.ckpt', 'last.ckpt'])
            # a step file torn by hand: no complete step
            with open(os.path.join(m.mnt, 'epoch=0-step=99.ckpt'), 'wb') as f:
                f.write(b'PK\x03\x04' + b'\0' * 1000)
            m.settle()
            r = ckfs.ckptctl(m.store, 'steps', json_out=True)
            st = {s['name']: s['state'] for s in json.loads(r.stdout)['steps']}
            self.assertEqual(st, {'epoch=0-step=4.ckpt': 'pruned',
                                  'epoch=0-step=8.ckpt': 'pruned',
                                  'epoch=0-step=12.ckpt': 'complete',
                                  'epoch=0-step=16.ckpt': 'complete'})
        finally:
            m.close()


if __name__ == '__main__':
    faulthandler.dump_traceback_later(900, exit=True)
    unittest.main(verbosity=2)
