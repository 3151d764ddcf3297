#!/usr/bin/python3
"""Crash points inside ckptfs (fs/core/fault.c): the daemon, or ckptctl, SIGKILLs itself at a named
moment of a commit, a step's completion, retention, chunk freeing, recovery or gc; then the store
is mounted again without the fault, and nothing that was complete may be lost.

For every point (CKPTFS_FAULT=point[:n], the list in fs/core/fault.c), on a fresh store with
-o keep_checkpoint_max=2:
  1. Megatron-LM saves steps 2 and 4 (2 ranks, real torch.save, then the tracker); both complete.
  2. The daemon is restarted with CKPTFS_FAULT and the point's trigger runs (step 6 and 8 saves,
     an overwrite that frees chunks, an unlinked-but-open file then a daemon kill, ...).
     The process must die at the point: its log names it.
  3. Mounted again without the fault (recovery runs): the tracker names a complete step, every
     step `ckptctl steps` calls complete is in `ls` with files bit-exact with what was written,
     no step is left `writing`/`sealed` forever, steps 2/4 were never lost except by retention,
     `ckptctl verify` is clean, `ckptctl gc` finds no orphan left by recovery, and a new save
     (step 10) completes.
Prints `faults: P/N points recovered` and, per point, what the recovery found.

Environment: CKPTFS_BIN, CKPTCTL_BIN (see ../lib/ckfs.py), CKPTFS_FAULT_POINTS (comma list,
default all), CKPTFS_KEEP=1 keeps the temporary directories.
Run: /usr/bin/python3 tests/torture/test_faults.py [-v]
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import TRACKER, read_tracker, wait_for  # noqa: E402
import torch  # noqa: E402

RANKS = 2
SUMMARY = []


def rank_path(step, rank):
    return 'iter_%07d/mp_rank_%02d/model_optim_rng.pt' % (step, rank)


def torch_save_in_child(sd, p):
    """torch.save(sd, p) in a forked child, as a trainer's own process: when the daemon dies
    under it, torch 1.13's writer may throw from its destructor (PyTorchStreamWriter::
    writeEndOfFile, "unexpected pos"), which ends the process with std::terminate (SIGABRT,
    seen in a run of this test) -- the test's own process must survive that. Returns None, or
    a text saying how the child ended."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            torch.save(sd, p)
            code = 0
        except OSError as e:
            os.write(2, b'torch.save: %s\n' % str(e).encode())
            code = 1
        except RuntimeError as e:  # "Parent directory ... does not exist", see save_step
            os.write(2, b'torch.save: %s\n' % str(e).encode())
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return None
    if os.WIFSIGNALED(status):
        return 'torch.save of %s killed by signal %d' % (p, os.WTERMSIG(status))
    return 'torch.save of %s failed (exit %d)' % (p, os.WEXITSTATUS(status))


def save_step(m, step, written):
    """Megatron's save of `step`: every rank's torch.save (each in a child process,
    torch_save_in_child), then the tracker. Records the sha256 of every file it finished in
    written[path]. Returns None, or the error that stopped it because the daemon died under it:
    an OSError (ENOTCONN), or a torch.save that failed -- by an OSError, by torch.save's
    RuntimeError "Parent directory ... does not exist" when the daemon died between the makedirs
    and the save (torch/serialization.py _open_zipfile_writer_file checks the directory first),
    or by torch's abort -- but only when the daemon logged its fault kill; otherwise a failed
    torch.save is a real failure and raises."""
    try:
        for r in range(RANKS):
            p = m.path(rank_path(step, r))
            os.makedirs(os.path.dirname(p), exist_ok=True)
            g = torch.Generator().manual_seed(step * 100 + r)
            sd = {'model': {'w': torch.randn(512, 512, generator=g),
                            'b': torch.randn(512, generator=g)},
                  'optimizer': {'m': torch.randn(512, 512, generator=g)},
                  'iteration': step, 'rank': r}
            err = torch_save_in_child(sd, p)
            if err:
                if not any('killing pid' in ln for ln in fault_lines(m)):
                    raise AssertionError(err + ', and the daemon did not kill itself')
                return RuntimeError(err)
            written[rank_path(step, r)] = ckfs.sha256_file(p)
        with open(m.path(TRACKER), 'w') as f:
            f.write(str(step))
    except OSError as e:
        return e
    return None


def steps_json(m):
    p = m.ckptctl('steps', json_out=True)
    if p.returncode != 0:
        raise AssertionError('ckptctl steps exited %d: %s%s' % (p.returncode, p.stdout,
                                                                p.stderr))
    return json.loads(p.stdout)['steps']


def fault_lines(m):
    try:
        with open(os.path.join(m.store, 'ckptfs.log'), errors='replace') as f:
            return [ln.strip() for ln in f if 'fault injection' in ln]
    except OSError:
        return []


class TestFaults(unittest.TestCase):
    maxDiff = None

    @classmethod
    def tearDownClass(cls):
        if SUMMARY:
            n = len(SUMMARY)
            ok = sum(1 for s in SUMMARY if ' ok' in s)
            print('\n' + '\n'.join(SUMMARY) + '\nfaults: %d/%d points recovered' % (ok, n),
                  flush=True)

    # -- triggers: what makes the armed process reach its point ------------------------------

    def trigger_saves(self, m, written):
        for step in (6, 8):
            if save_step(m, step, written) is not None:
                return
            wait_for('step %d to complete' % step, lambda: read_tracker(m) == str(step)
                     or not ckfs.pid_alive(m.pid), timeout=30.0)

    def trigger_overwrite(self, m, written):
        """Frees several chunks: a 6 MiB file overwritten with other bytes, twice, each
        generation fsynced (without the fsync, a rewrite made while the committer has not yet
        taken the close replaces bytes never committed, and frees nothing in the index)."""
        try:
            for gen in range(3):
                with open(m.path('scratch.bin'), 'wb') as f:
                    f.write(ckfs.content('scratch-%d' % gen, 6 << 20))
                    f.flush()
                    os.fsync(f.fileno())
        except OSError:
            pass

    def trigger_unclean(self, m, written):
        """Leaves work for recovery, in one daemon life: an unlinked file held open (its chunks
        are freed by recovery), then a commit killed after its chunks are durable but before
        the index names them (orphan chunk files). The store is left uncleanly stopped."""
        m.unmount()
        m.env = {'CKPTFS_FAULT': 'commit-before-index:2'}
        m.start()
        keep = open(m.path('held.bin'), 'wb')
        try:
            keep.write(ckfs.content('held', 6 << 20))
            keep.flush()
            os.fsync(keep.fileno())        # commit 1
            os.unlink(m.path('held.bin'))
            with open(m.path('orphans.bin'), 'wb') as f:
                f.write(ckfs.content('orphans', 6 << 20))
        except OSError:
            pass                           # commit 2 (orphans.bin's close) kills the daemon
        self.assertTrue(m.wait_daemon_death(), 'commit-before-index:2 did not kill the daemon'
                        + m.log_tail())
        try:
            keep.close()
        except OSError:
            pass

    # -- the round ---------------------------------------------------------------------------

    def point(self, point, trigger, where='daemon'):
        t0 = time.monotonic()
        written = {}
        with ckfs.Mount(opts=('keep_checkpoint_max=2',)) as m:
            for step in (2, 4):
                self.assertIsNone(save_step(m, step, written))
                wait_for('step %d to complete' % step, lambda: read_tracker(m) == str(step),
                         timeout=30.0)
            complete_before = {s['step'] for s in steps_json(m) if s['state'] == 'complete'}
            self.assertEqual(complete_before, {2, 4})
            m.unmount()

            m.env = {} if where != 'daemon' else {'CKPTFS_FAULT': point}
            m.start()
            if where == 'daemon':
                trigger(m, written)
                died = m.wait_daemon_death(timeout=60)
                self.assertTrue(died, 'the daemon did not die at %s%s' % (point, m.log_tail()))
                hits = fault_lines(m)
                self.assertTrue(any("'%s'" % point in ln for ln in hits),
                                'the daemon died, but not at %s: %s%s' % (point, hits,
                                                                         m.log_tail()))
            elif where == 'recovery':
                trigger(m, written)          # leaves the store uncleanly stopped
                m.env = {'CKPTFS_FAULT': point}
                with self.assertRaises(ckfs.MountError):
                    m.start()              # the daemon dies inside recovery, before mounting
                hits = fault_lines(m)
                self.assertTrue(any("'%s'" % point in ln for ln in hits),
                                'recovery did not die at %s: %s%s' % (point, hits,
                                                                     m.log_tail()))
            elif where == 'gc':
                trigger(m, written)
                env = dict(os.environ, CKPTFS_FAULT=point)
                p = subprocess.run([ckfs.ckptctl_bin(), m.store, 'gc'], env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
                self.assertEqual(p.returncode, -signal.SIGKILL,
                                 'ckptctl gc was not killed at %s: %d %s%s' %
                                 (point, p.returncode, p.stdout, p.stderr))
                self.assertIn("'%s'" % point, p.stderr)

            # -- recovery: mount again, no fault -------------------------------------------
            m.env = {}
            m.start()
            note = self.check_store(m, written, complete_before)
            # the next save goes through
            self.assertIsNone(save_step(m, 10, written))
            wait_for('step 10 to complete', lambda: read_tracker(m) == '10', timeout=30.0)
            m.unmount()
            v = m.ckptctl('verify')
            self.assertEqual(v.returncode, 0, 'verify after step 10: %s%s' % (v.stdout,
                                                                              v.stderr))
        line = 'fault %-20s ok (%s; %.1fs)' % (point, note, time.monotonic() - t0)
        SUMMARY.append(line)
        print(line, flush=True)

    def check_store(self, m, written, complete_before):
        steps = steps_json(m)
        # judging may need a moment after the remount (a sealed step whose writers are gone)
        wait_for('no step left writing or sealed',
                 lambda: not [s for s in steps_json(m) if s['state'] in ('writing', 'sealed')],
                 timeout=20)
        steps = steps_json(m)
        by_state = {}
        for s in steps:
            by_state.setdefault(s['state'], []).append(s['step'])
        complete = set(by_state.get('complete', []))
        # a step complete before the fault is still complete, or pruned by retention (which
        # keeps the 2 newest complete ones)
        for s in complete_before:
            self.assertTrue(s in complete or s in by_state.get('pruned', []),
                            'step %d was complete before the fault and is now %s' %
                            (s, [x['state'] for x in steps if x['step'] == s]))
        self.assertEqual(len(complete), 2, 'keep_checkpoint_max=2, complete: %s' % by_state)
        tracker = read_tracker(m)
        self.assertIsNotNone(tracker, 'tracker unreadable')
        self.assertIn(int(tracker), complete, 'tracker names %s, complete: %s' %
                      (tracker, sorted(complete)))
        for step in complete:
            for r in range(RANKS):
                rel = rank_path(step, r)
                self.assertIn(rel, written, 'step %d complete but rank %d never finished' %
                              (step, r))
                self.assertEqual(ckfs.sha256_file(m.path(rel)), written[rel], '%s not bit-exact' % rel)
        names = sorted(os.listdir(m.mnt))
        for step in complete:
            self.assertIn('iter_%07d' % step, names)
        # recovery swept what the crash left: gc (unmounted) finds nothing more to remove
        m.unmount()
        g = m.ckptctl('gc', json_out=True)
        self.assertEqual(g.returncode, 0, g.stdout + g.stderr)
        gj = json.loads(g.stdout)
        self.assertEqual((gj['inodes_removed'], gj['chunks_removed']), (0, 0),
                         'recovery left orphans behind: %s' % gj)
        v = m.ckptctl('verify')
        self.assertEqual(v.returncode, 0, 'verify: %s%s' % (v.stdout, v.stderr))
        m.start()
        return 'complete %s, tracker %s, %s' % (sorted(complete), tracker,
                                               ', '.join('%s %s' % (k, sorted(v))
                                                         for k, v in sorted(by_state.items())
                                                         if k != 'complete'))


POINTS = [
    ('commit-before-index', 'trigger_saves', 'daemon'),
    ('commit-mid-txn', 'trigger_saves', 'daemon'),
    ('commit-after-index', 'trigger_overwrite', 'daemon'),
    ('chunk-free', 'trigger_overwrite', 'daemon'),
    ('step-complete-txn', 'trigger_saves', 'daemon'),
    ('retention-txn', 'trigger_saves', 'daemon'),
    ('retention-after', 'trigger_saves', 'daemon'),
    ('sweep-after-commit', 'trigger_unclean', 'recovery'),
    ('sweep-orphan', 'trigger_unclean', 'recovery'),
    ('sweep-orphan', 'trigger_unclean', 'gc'),
]


def _add(point, trig, where):
    def t(self):
        self.point(point, getattr(self, trig), where)
    t.__name__ = 'test_%s_%s' % (where, point.replace('-', '_'))
    setattr(TestFaults, t.__name__, t)


_sel = [x for x in os.environ.get('CKPTFS_FAULT_POINTS', '').split(',') if x]
for _p in POINTS:
    if not _sel or _p[0] in _sel:
        _add(*_p)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(1200, exit=True)
    unittest.main(verbosity=2)
