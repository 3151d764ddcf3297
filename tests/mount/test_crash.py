#!/usr/bin/python3
"""Crash test: SIGKILL the daemon while a writer process is writing, remount, check durability.

The writer writes files in several ways (fsync at the end, fsync half-way, no fsync, rewrite of
an fsynced file with O_TRUNC, write tmp + fsync + rename over the final name) and records, in a
side file outside the mount, each file it starts and each fsync that returned. After the kill
and a remount, every file must be in a state the record allows:
  - fsynced at some point: exactly its content as of the last fsync, or a later complete version
    (bytes that reached the daemon and were made durable on close) -- never absent, never a mix;
  - never fsynced: absent, or a complete version (never empty or a prefix).
The tree must be readable, `ckptctl STORE verify` must exit 0, and what a round found must still
be there, unchanged, after the next crash.

LockTest: a mount while the previous owner of STORE is exiting (its leader a zombie, a thread
still holding STORE/lock), while a reader holds it shared, or while the previous daemon, unmounted,
finishes its writes (a mount right after `fusermount3 -u`, cycle after cycle) waits for the lock;
a live owner, or a daemon still mounted, is refused at once, by pid.

CachedStepDirTest: the kernel caches a step directory's name as any other; a step set aside
after its writer was killed, or removed by retention, becomes unreachable through the cached
name at once (the daemon tells the kernel), not when the entry times out.

StepDirMadeTest: the daemon killed right after a step directory's mkdir, or its commit rename
(tmp-checkpoint-N to checkpoint-N, N.orbax-checkpoint-tmp to N), is committed: the index knew the
step from the same transaction, so the restart sets an empty one aside and completes a renamed one.

Environment: CKPTFS_CRASH_ROUNDS (default 3), CKPTFS_SEED (default 1234).
Run: /usr/bin/python3 tests/mount/test_crash.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import fcntl  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import unittest  # noqa: E402
import zipfile  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import content  # noqa: E402

ROUNDS = int(os.environ.get('CKPTFS_CRASH_ROUNDS', '3'))
SEED = int(os.environ.get('CKPTFS_SEED', '1234'))
MiB = 1 << 20
ABSENT = ('absent',)


def writer(mnt, rnd, log_path, seed):
    """Child process: write files under mnt/r<rnd>/ until the mount goes away."""
    r = random.Random(seed)
    with open(log_path, 'a') as log:
        _writer(mnt, rnd, r, log, seed)


def _writer(mnt, rnd, r, log, seed):

    def rec(**kw):
        log.write(json.dumps(kw) + '\n')
        log.flush()

    def fsync_dir(path):
        dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def write_file(rel, key, size, flags, fsync_at):
        path = os.path.join(mnt, rel)
        data = content(key, size)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | flags, 0o644)
        try:
            off = 0
            while True:
                if off == fsync_at:
                    # logged before: a kill inside the fsync may leave this state durable
                    rec(ev='fsync_begin', path=rel, key=key, len=off)
                    os.fsync(fd)
                    fsync_dir(path)
                    rec(ev='fsync', path=rel, key=key, len=off)
                if off >= size:
                    break
                n = min(size - off, r.choice([4096, 65536, 300_000, MiB, 2 * MiB + 3]))
                off += os.write(fd, data[off:off + n])
        finally:
            os.close(fd)

    try:
        base = 'r%d' % rnd
        os.mkdir(os.path.join(mnt, base))
        for k in range(4):
            os.mkdir(os.path.join(mnt, base, 'd%d' % k))
        for k in range(4):
            fsync_dir(os.path.join(mnt, base, 'd%d' % k, 'x'))
        fsync_dir(os.path.join(mnt, base, 'x'))
        rec(ev='dirs', rnd=rnd)
        durable = []
        i = 0
        while True:
            i += 1
            kind = r.choices(['fsync_end', 'fsync_mid', 'nofsync', 'rewrite', 'rename_tmp'],
                             weights=[3, 2, 3, 2, 2])[0]
            if kind == 'rewrite' and not durable:
                kind = 'fsync_end'
            key = 's%d-r%d-%d' % (seed, rnd, i)
            size = r.choice([0, 1, 4095, r.randrange(1, 6 * MiB), r.randrange(1, 6 * MiB)])
            if kind == 'rewrite':
                rel = r.choice(durable)
            else:
                rel = '%s/d%d/f%04d.bin' % (base, i % 4, i)
            if kind == 'rename_tmp':
                tmp = rel + '.tmp'
                rec(ev='start', path=tmp, key=key, size=size)
                write_file(tmp, key, size, os.O_TRUNC, size)
                rec(ev='rename_begin', src=tmp, dst=rel)
                os.rename(os.path.join(mnt, tmp), os.path.join(mnt, rel))
                fsync_dir(os.path.join(mnt, rel))
                rec(ev='rename', src=tmp, dst=rel)
                durable.append(rel)
                continue
            rec(ev='start', path=rel, key=key, size=size)
            fsync_at = {'fsync_end': size, 'fsync_mid': size // 2, 'nofsync': -1,
                        'rewrite': r.choice([size, -1])}[kind]
            write_file(rel, key, size, os.O_TRUNC, fsync_at)
            rec(ev='closed', path=rel, key=key)
            if fsync_at >= 0:
                durable.append(rel)
    except OSError as e:
        rec(ev='writer_stopped', error=str(e))
    except BaseException:  # noqa: BLE001
        rec(ev='writer_bug', error=traceback.format_exc())


class Model:
    """Acceptable states of every path the writers touched; a state is ABSENT or (key, len)."""

    def __init__(self):
        self.sizes = {}       # key -> full size
        self.durable = {}     # path -> last fsynced state (ABSENT if never)
        self.later = {}       # path -> states that may have superseded durable

    def load(self, log_path):
        bugs = []
        fsyncs = 0
        with open(log_path) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue    # a line cut short by the kill
                ev = e['ev']
                if ev == 'start':
                    p = e['path']
                    self.sizes[e['key']] = e['size']
                    self.durable.setdefault(p, ABSENT)
                    self.later.setdefault(p, set()).add((e['key'], e['size']))
                elif ev == 'fsync_begin':  # durable from any moment after this line
                    self.later.setdefault(e['path'], set()).add((e['key'], e['len']))
                elif ev == 'fsync':
                    p = e['path']
                    self.durable[p] = (e['key'], e['len'])
                    self.later[p] = {(e['key'], self.sizes[e['key']])}
                    fsyncs += 1
                elif ev == 'rename_begin':
                    s, d = e['src'], e['dst']
                    self.durable.setdefault(d, ABSENT)
                    self.later.setdefault(d, set()).add(self.durable[s])
                    self.later[s].add(ABSENT)
                elif ev == 'rename':
                    s, d = e['src'], e['dst']
                    self.durable[d] = self.durable[s]
                    self.later[d] = set()
                    self.durable[s] = ABSENT
                    self.later[s] = set()
                elif ev == 'writer_bug':
                    bugs.append(e['error'])
        return fsyncs, bugs

    def acceptable(self, path):
        return {self.durable[path]} | self.later.get(path, set())


def count_fsyncs(log_path):
    try:
        with open(log_path) as f:
            return sum(1 for line in f if '"fsync"' in line)
    except FileNotFoundError:
        return 0


def observe(path):
    try:
        with open(path, 'rb') as f:
            return f.read()
    except FileNotFoundError:
        return None


def describe(state):
    return 'absent' if state == ABSENT else '%s[:%d]' % state


class CrashTest(unittest.TestCase):

    def test_sigkill_during_writes(self):
        os.umask(0o022)
        m = ckfs.Mount()
        try:
            m.start()
            self.rounds(m)
            m.unmount()
            r = ckfs.ckptctl(m.store, 'verify')
            self.assertEqual(r.returncode, 0, 'ckptctl verify after the last clean unmount: %s%s'
                             % (r.stdout, r.stderr))
        finally:
            m.close()

    def rounds(self, m):
        log_path = os.path.join(m.tmp, 'writer.log')
        model = Model()
        seen = {}                       # path -> bytes hash found after an earlier crash
        for rnd in range(ROUNDS):
            seed = SEED * 100 + rnd
            pid = os.fork()
            if pid == 0:
                try:
                    signal.signal(signal.SIGINT, signal.SIG_DFL)
                    writer(m.mnt, rnd, log_path, seed)
                finally:
                    os._exit(0)
            try:
                # let the writer get a few fsyncs done, then kill the daemon at a random moment
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    n = count_fsyncs(log_path)
                    if n >= 3 * (rnd + 1):
                        break
                    if os.waitpid(pid, os.WNOHANG) != (0, 0):
                        pid = None
                        break
                    time.sleep(0.02)
                if pid is None:
                    with open(log_path) as f:
                        self.fail('the writer stopped before the crash: %s' % f.read()[-2000:])
                time.sleep(random.Random(seed).uniform(0.05, 1.0))
                m.kill_daemon()
            finally:
                if pid is not None:
                    self.reap(pid)
            m.start()
            fsyncs, bugs = self.reload(model, log_path)
            self.assertEqual(bugs, [], 'writer bug:\n' + '\n'.join(bugs))
            self.check_round(m, model, seen, rnd)

    def reload(self, model, log_path):
        fresh = Model()
        res = fresh.load(log_path)
        model.__dict__.update(fresh.__dict__)
        return res

    def reap(self, pid):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        self.fail('the writer was still running 30 s after the daemon was killed')

    def check_round(self, m, model, seen, rnd):
        bad = []
        stats = {'absent': 0, 'last fsync': 0, 'complete': 0}
        for path in sorted(model.durable):
            got = observe(m.path(path))
            ok = None
            for st in model.acceptable(path):
                if st == ABSENT:
                    if got is None:
                        ok = 'absent'
                elif got is not None and len(got) == st[1] and got == content(st[0], st[1]):
                    ok = 'last fsync' if st == model.durable[path] else 'complete'
            if ok is None:
                if got is None:
                    found = 'absent'
                elif not got:
                    found = 'an empty file'
                else:
                    found = '%d bytes' % len(got)
                    for k, sz in model.sizes.items():
                        full = content(k, sz)
                        if full[:len(got)] == got and len(got) <= sz:
                            found += ' = %s[:%d] of %d' % (k, len(got), sz)
                            break
                    else:
                        found += ' matching no version'
                bad.append('%s: found %s; acceptable: %s' % (
                    path, found, ', '.join(sorted(describe(s) for s in model.acceptable(path)))))
            else:
                stats[ok] += 1
        # nothing else appeared in the writers' directories
        for dp, dn, fn in os.walk(m.mnt):
            for n in fn:
                rel = os.path.relpath(os.path.join(dp, n), m.mnt)
                if rel not in model.durable:
                    bad.append('%s: appeared, never written' % rel)
        # what an earlier round found is still there, unchanged
        for path, h in seen.items():
            got = observe(m.path(path))
            now = None if got is None else hashlib.sha1(got).hexdigest()
            if now != h and not path.startswith('r%d/' % rnd):
                bad.append('%s: changed after an earlier crash (%s -> %s)' % (path, h, now))
        self.assertEqual(bad[:20], [], 'round %d: %d files in a state the writer never made '
                         'durable' % (rnd, len(bad)))
        # the whole tree reads without errors
        nbytes = 0
        for dp, dn, fn in os.walk(m.mnt):
            for n in fn:
                with open(os.path.join(dp, n), 'rb') as f:
                    nbytes += len(f.read())
        for path in model.durable:
            got = observe(m.path(path))
            seen[path] = None if got is None else hashlib.sha1(got).hexdigest()
        r = m.ckptctl('verify')
        self.assertEqual(r.returncode, 0, 'round %d: ckptctl verify while mounted exited %d: %s%s'
                         % (rnd, r.returncode, r.stdout, r.stderr))
        sys.stderr.write('\n  [round %d: %d paths: %s; %d MB readable] ' %
                         (rnd, len(model.durable),
                          ', '.join('%s %d' % kv for kv in stats.items()), nbytes // MiB))



# A process that takes STORE/lock as a daemon does and holds it for argv[2] seconds. With
# argv[3] 'die' its main thread exits alone (the raw exit syscall, the GIL released by ctypes),
# so that the leader is a zombie while a second thread keeps the lock: the state a SIGKILLed
# daemon is in while its last thread tears down its memory. With 'live' it stays a live owner.
OWNER = r"""
import ctypes, fcntl, os, platform, sys, threading, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.pwrite(fd, b'%d\n' % os.getpid(), 0)
def hold():
    time.sleep(float(sys.argv[2]))
    os._exit(0)
threading.Thread(target=hold).start()
print('locked', flush=True)
if sys.argv[3] == 'die':
    ctypes.CDLL(None).syscall({'x86_64': 60, 'aarch64': 93}[platform.machine()], 0)
"""


class LockTest(unittest.TestCase):
    """A mount right after the previous owner of STORE died waits for the lock instead of
    refusing; a live owner is still refused at once."""

    HOLD = 2.0

    def test_mount_waits_for_an_exiting_owner(self):
        m = ckfs.Mount()
        try:
            m.start()
            with open(m.path('a'), 'wb') as f:
                f.write(b'kept')
            m.unmount()
            lock = os.path.join(m.store, 'lock')

            # the leader is a zombie, another thread holds the lock for HOLD s
            p = subprocess.Popen([sys.executable, '-c', OWNER, lock, str(self.HOLD), 'die'],
                                 stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual(p.stdout.readline().strip(), 'locked')
                deadline = time.monotonic() + 10
                while ckfs._task_state('/proc/%d/stat' % p.pid) != 'Z':
                    self.assertLess(time.monotonic(), deadline, 'the leader never exited')
                    time.sleep(0.01)
                self.assertTrue(ckfs.pid_alive(p.pid), 'a zombie leader with a live thread '
                                'is a process still alive')
                t0 = time.monotonic()
                m.start()
                waited = time.monotonic() - t0
                self.assertFalse(ckfs.pid_alive(p.pid))
                self.assertGreater(waited, self.HOLD / 2,
                                   'mounted while the old owner still held the lock')
                with open(m.path('a'), 'rb') as f:
                    self.assertEqual(f.read(), b'kept')
                m.unmount()
            finally:
                p.kill()
                p.wait()

            # a reader's shared lock (ckptctl while unmounted), the lock file naming a pid
            # that is gone: the mount waits until it is released
            fd = os.open(lock, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                threading.Timer(self.HOLD, fcntl.flock, (fd, fcntl.LOCK_UN)).start()
                t0 = time.monotonic()
                m.start()
                self.assertGreater(time.monotonic() - t0, self.HOLD / 2)
                m.unmount()
            finally:
                os.close(fd)

            # a live owner: refused at once, naming its pid
            p = subprocess.Popen([sys.executable, '-c', OWNER, lock, '60', 'live'],
                                 stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual(p.stdout.readline().strip(), 'locked')
                t0 = time.monotonic()
                with self.assertRaises(ckfs.MountError) as cm:
                    m.start()
                self.assertLess(time.monotonic() - t0, 10)
                self.assertIn('in use by another ckptfs (pid %d)' % p.pid, str(cm.exception))
            finally:
                p.kill()
                p.wait()
        finally:
            m.close()

    CYCLES = 5
    FILES = 6
    FILE_BYTES = 4 * MiB

    def test_mount_right_after_unmount(self):
        """`fusermount3 -u` returns while the daemon still makes the last writes durable (1-2 s
        for a few MiB on the CI machine); a mount at once, as a restarted job's would be, waits
        for it instead of calling the store in use, and reads back everything written."""
        m = ckfs.Mount()
        finishing = []
        try:
            m.start()
            for cycle in range(self.CYCLES):
                for i in range(self.FILES):
                    with open(m.path('c%d_f%d' % (cycle, i)), 'wb') as f:
                        f.write(content('c%d_f%d' % (cycle, i), self.FILE_BYTES))
                finishing.append(m.unmount(wait=False))
                try:
                    m.start()
                except ckfs.MountError as e:
                    self.fail('cycle %d: mount right after the unmount failed: %s' % (cycle, e))
                for c in range(cycle + 1):
                    for i in range(self.FILES):
                        with open(m.path('c%d_f%d' % (c, i)), 'rb') as f:
                            self.assertTrue(f.read() == content('c%d_f%d' % (c, i),
                                                                self.FILE_BYTES),
                                            'cycle %d: c%d_f%d changed' % (cycle, c, i))
            m.unmount()
            for pid in finishing:
                self.assertFalse(pid is not None and ckfs.pid_alive(pid),
                                 'daemon %d outlived the next mount' % pid)
            self.assertEqual(m.ckptctl('verify').returncode, 0)
        finally:
            for pid in finishing:
                if pid is not None:
                    ckfs.wait_pid_exit(pid, 60)
            m.close()

    def test_mount_waits_for_an_unmounted_daemon_not_yet_finishing(self):
        """`fusermount3 -u` can return before the daemon has seen it (its lock line still says
        mounted): held there with SIGSTOP, it is waited for all the same, while a daemon still
        mounted is refused at once."""
        m = ckfs.Mount()
        other = ckfs.Mount(store=m.store)
        try:
            m.start()
            with open(m.path('a'), 'wb') as f:
                f.write(content('a', 4 * MiB))
            t0 = time.monotonic()
            with self.assertRaises(ckfs.MountError) as cm:
                other.start()
            self.assertLess(time.monotonic() - t0, 10)
            self.assertIn('in use by another ckptfs (pid %d)' % m.pid, str(cm.exception))

            old = m.pid
            os.kill(old, signal.SIGSTOP)
            cont = threading.Timer(self.HOLD, os.kill, (old, signal.SIGCONT))
            try:
                m.unmount(wait=False)
                cont.start()
                t0 = time.monotonic()
                m.start()
                self.assertGreater(time.monotonic() - t0, self.HOLD / 2,
                                   'mounted while the old daemon still held the lock')
            finally:
                cont.cancel()
                os.kill(old, signal.SIGCONT)
            with open(m.path('a'), 'rb') as f:
                self.assertTrue(f.read() == content('a', 4 * MiB))
        finally:
            other.close()
            m.close()



STEP_WRITER = r"""
import os, sys, time
d = os.path.join(sys.argv[1], 'iter_0000004', 'mp_rank_00')
os.makedirs(d)
f = open(os.path.join(d, 'model_optim_rng.pt'), 'wb')
f.write(b'half of a step' * 4096)
f.flush()
print('ready', flush=True)
time.sleep(120)
"""


class CachedStepDirTest(unittest.TestCase):
    """The kernel keeps a step directory's name as long as any other (ATTR_TIMEOUT, 1 s, in
    fs/fuse/ops_int.h) instead of asking the daemon at every path walk. When the step engine
    moves or removes a step behind the kernel's back, it tells the kernel to forget the name at
    once (fs/steps/steps_tree.c steps_inval_queue, sent by the reaper): a process that walked into
    the step a moment before cannot reach it through its cached name afterwards. Checked well
    inside the entry timeout, so the name is gone because the kernel was told, not because it
    expired."""

    PROMPT = 0.5  # seconds: under the 1 s entry timeout

    TRACKER = 'latest_checkpointed_iteration.txt'

    def save(self, m, it, before_tracker=lambda: None):
        d = m.path('iter_%07d' % it, 'mp_rank_00')
        os.makedirs(d)
        with open(os.path.join(d, 'model_optim_rng.pt'), 'wb') as f:
            f.write(ckfs.content('cached-%d' % it, 64 * 1024 + it))
        before_tracker()
        with open(m.path(self.TRACKER), 'w') as f:
            f.write(str(it))

    def wait_gone(self, m, rel, since):
        """Seconds from since until rel no longer exists through the mount (10 s at most)."""
        path = m.path(rel)
        while os.path.exists(path):
            self.assertLess(time.monotonic() - since, 10, '%s never left the namespace: %s'
                            % (rel, m.log_tail()))
            time.sleep(0.005)
        return time.monotonic() - since

    def test_a_killed_writers_step_leaves_the_kernels_cache_at_once(self):
        m = ckfs.Mount()
        try:
            m.start()
            self.save(m, 2)
            p = subprocess.Popen([sys.executable, '-c', STEP_WRITER, m.mnt],
                                 stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual(p.stdout.readline().strip(), 'ready')
                inner = m.path('iter_0000004', 'mp_rank_00', 'model_optim_rng.pt')
                self.assertTrue(os.path.isfile(inner))  # the kernel caches the names now
                p.kill()
                t_kill = time.monotonic()
                p.wait()
            finally:
                p.kill()
                p.wait()
                p.stdout.close()
            took = self.wait_gone(m, 'iter_0000004', t_kill)
            self.assertLess(took, self.PROMPT, 'the torn step stayed reachable %.2f s after '
                            'its writer was killed: the kernel was not told' % took)
            with self.assertRaises(FileNotFoundError):
                open(inner, 'rb').close()
            self.assertEqual(ckfs.read_bytes(m.path(self.TRACKER)).strip(), b'2')
            q = os.listdir(m.path('.ckptfs', 'quarantine'))
            self.assertTrue(any('iter_0000004' in n for n in q), q)
        finally:
            m.close()

    def test_a_step_retention_removes_leaves_the_kernels_cache_at_once(self):
        m = ckfs.Mount(opts=('keep_checkpoint_max=1',))
        try:
            m.start()
            self.save(m, 2)
            old = m.path('iter_0000002', 'mp_rank_00', 'model_optim_rng.pt')
            # step 2's names cached by the kernel just before step 4 completes, upon which
            # retention removes step 2
            self.save(m, 4, lambda: self.assertTrue(os.path.isfile(old)))
            t0 = time.monotonic()
            self.assertEqual(ckfs.read_bytes(m.path(self.TRACKER)).strip(), b'4')
            took = self.wait_gone(m, 'iter_0000002', t0)
            self.assertLess(took, self.PROMPT, 'step 2 stayed reachable %.2f s after retention '
                            'removed it: the kernel was not told' % took)
            with self.assertRaises(FileNotFoundError):
                open(old, 'rb').close()
        finally:
            m.close()


    def test_a_step_restored_for_a_reader_replaces_the_cached_name(self):
        """The trainer's cleanup deletes a file of the newest complete step and dies: the step
        keeps a version of itself, and the resuming reader's tracker read brings it back under
        the name, the remains set aside (steps_retain.c). The reader walks the step right after:
        the kernel may still hold the name of the remains. The tracker read returns only once
        the kernel was told to forget it, even when the reaper took the name to send first
        (fs_flush_inval holds fs->fuse.inval_mu from the take to the send). The faults hold that
        order open: the reader's send waits 200 ms, the reaper's 600 ms once it holds the name."""
        m = ckfs.Mount()
        try:
            m.env['CKPTFS_FAULT'] = 'tracker-flush@200,inval-send@600'
            m.start()
            d = m.path('iter_0000002', 'mp_rank_00')
            os.makedirs(d)
            want = {}
            for name in ('model_optim_rng.pt', 'distrib_optim.pt'):
                want[name] = ckfs.content('restored-' + name, 64 * 1024)
                with open(os.path.join(d, name), 'wb') as f:
                    f.write(want[name])
            with open(m.path(self.TRACKER), 'w') as f:
                f.write('2')
            self.assertEqual(ckfs.read_bytes(m.path(self.TRACKER)).strip(), b'2')
            self.assertEqual(sorted(os.listdir(d)), sorted(want))  # names cached now
            os.remove(os.path.join(d, 'distrib_optim.pt'))  # the cleanup, cut short
            self.assertIn('kept as', m.log_tail())
            self.assertEqual(ckfs.read_bytes(m.path(self.TRACKER)).strip(), b'2')
            got = {n: ckfs.read_bytes(os.path.join(d, n)) for n in os.listdir(d)}
            self.assertEqual(sorted(got), sorted(want), m.log_tail())
            self.assertTrue(got == want, 'restored bytes differ')
            self.assertIn('restored', m.log_tail())
        finally:
            m.close()


# a Trainer's save into tmp-checkpoint-14/ (transformers 4.36), its process gone before the rename
SAVE_TMP = r"""
import json, os, sys
d = os.path.join(sys.argv[1], 'tmp-checkpoint-14')
os.mkdir(d)
open(os.path.join(d, 'model.safetensors'), 'wb').write(b'\x08' + bytes(7) + b'{}      ')
json.dump({'global_step': 14}, open(os.path.join(d, 'trainer_state.json'), 'w'))
"""


class StepDirMadeTest(unittest.TestCase):
    """A trainer's save begins with the mkdir of its step directory (Hugging Face: the
    `checkpoint-N/` that transformers' `get_last_checkpoint` picks at resume, the newest
    `checkpoint-N` in the listing, whatever it holds). The daemon is killed right after that
    mkdir is committed (CKPTFS_FAULT=top-dir-made, fs/fuse/ops_dir.c): the index must know the
    directory as a step from the same transaction, so recovery sets it aside as a step never
    sealed and the listing's newest `checkpoint-N` is the complete one. Found by the crash
    loop's `hf` round (a3bbc51): `checkpoint-12/` left with no step row stayed in the listing
    and the resumed trainer failed on its missing `model.safetensors`."""

    def save(self, m, n, tmp=False):
        """Step n as the Trainer writes it: the weights (safetensors: u64 LE header length,
        JSON header, the bytes), then trainer_state.json, its marker. tmp: into
        tmp-checkpoint-N/, then renamed to checkpoint-N/ (transformers 4.36-4.38); None:
        into tmp-checkpoint-N/, not renamed."""
        d = m.path(('tmp-checkpoint-%d' if tmp is not False else 'checkpoint-%d') % n)
        os.mkdir(d)
        w = ckfs.content('weights-%d' % n, 4096 + 8 * n)
        h = json.dumps({'w': {'dtype': 'U8', 'shape': [len(w)],
                              'data_offsets': [0, len(w)]}}).encode()
        h += b' ' * (-len(h) % 8)
        with open(os.path.join(d, 'model.safetensors'), 'wb') as f:
            f.write(struct.pack('<Q', len(h)) + h + w)
        with open(os.path.join(d, 'trainer_state.json'), 'w') as f:
            json.dump({'global_step': n}, f)
        if tmp:
            os.rename(d, m.path('checkpoint-%d' % n))

    def states(self, m):
        """{step directory name: state} from ckptctl steps --json (the newest row of each)."""
        r = m.ckptctl('steps', json_out=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return {s['name']: s['state'] for s in json.loads(r.stdout)['steps']}

    def wait_complete(self, m, name):
        """Wait (30 s at most) until `ckptctl steps` calls step name complete: the saving
        process lives on, so the step completes once it has been quiet (the reaper)."""
        deadline = time.monotonic() + 30
        while True:
            st = self.states(m)
            if st.get(name) == 'complete':
                return
            self.assertLess(time.monotonic(), deadline, 'step %s never completed: %s%s'
                            % (name, st, m.log_tail()))
            time.sleep(0.2)

    def mount_with_a_step(self, fault):
        """A started mount with CKPTFS_FAULT=fault, holding checkpoint-10, complete."""
        m = ckfs.Mount()
        try:
            m.env['CKPTFS_FAULT'] = fault
            m.start()
            self.save(m, 10)
            self.wait_complete(m, 'checkpoint-10')
        except BaseException:
            m.close()
            raise
        return m

    def killed_in(self, m, fn):
        """fn() fails, the daemon dying inside it at its fault point; then the daemon is
        started again without the fault (recovery runs)."""
        with self.assertRaises(OSError):
            fn()
        self.assertTrue(m.wait_daemon_death(), 'the fault did not kill the daemon: %s'
                        % m.log_tail())
        m.env = {}
        m.start()

    def test_a_step_dir_made_just_before_a_kill_is_set_aside(self):
        m = self.mount_with_a_step('top-dir-made:2')
        try:
            self.killed_in(m, lambda: os.mkdir(m.path('checkpoint-12')))
            names = sorted(os.listdir(m.mnt))
            self.assertNotIn('checkpoint-12', names, 'the step directory made before the kill '
                             'is listed, where a resume takes it for the newest step: %s'
                             % m.log_tail())
            self.assertIn('checkpoint-10', names)
            q = os.listdir(m.path('.ckptfs', 'quarantine'))
            self.assertTrue(any('checkpoint-12' in n for n in q), (q, m.log_tail()))
            st = self.states(m)
            self.assertEqual(st.get('checkpoint-10'), 'complete', st)
            # the save begun again after the restart completes under the same name
            self.save(m, 12)
            self.wait_complete(m, 'checkpoint-12')
        finally:
            m.close()

    def test_a_step_renamed_into_place_just_before_a_kill_stays(self):
        """The rename of tmp-checkpoint-N/ to checkpoint-N/ is the trainer's commit of the
        step (policy rule 1, LAYOUT_F_TMP). The daemon is killed right after that rename is
        committed (CKPTFS_FAULT=top-renamed): the step is complete under its name after the
        restart, as the trainer left it. On 32afc31 its row kept the tmp name, killed or not
        (only Orbax's rename renamed the row, in a second transaction), so `ckptctl steps` and
        a restore of the step named tmp-checkpoint-12."""
        m = self.mount_with_a_step('top-renamed:1')
        try:
            self.killed_in(m, lambda: self.save(m, 12, tmp=True))  # in its rename
            self.assertEqual(sorted(os.listdir(m.mnt)), ['checkpoint-10', 'checkpoint-12'],
                             m.log_tail())
            self.wait_complete(m, 'checkpoint-12')
        finally:
            m.close()

    def test_a_step_renamed_away_and_back_each_just_before_a_kill(self):
        """A complete step's directory renamed away by hand leaves the lineage, and renamed
        back is a new version of the step, sealed, in the rename's own transaction
        (steps_on_rename). The daemon is killed right after each rename is committed
        (CKPTFS_FAULT=top-renamed): after the first restart the directory stays where the
        user put it and no step row claims it; after the second the step is complete at its
        name again, not set aside as a save never sealed."""
        m = self.mount_with_a_step('top-renamed:1')
        try:
            self.save(m, 12)
            self.wait_complete(m, 'checkpoint-12')
            self.killed_in(m, lambda: os.rename(m.path('checkpoint-12'),
                                                m.path('checkpoint-12.spike')))
            self.assertEqual(sorted(os.listdir(m.mnt)), ['checkpoint-10', 'checkpoint-12.spike'],
                             m.log_tail())
            self.assertEqual(self.states(m).get('checkpoint-12'), 'pruned', m.log_tail())
            m.env['CKPTFS_FAULT'] = 'top-renamed:1'
            m.remount()
            self.killed_in(m, lambda: os.rename(m.path('checkpoint-12.spike'),
                                                m.path('checkpoint-12')))
            self.assertEqual(sorted(os.listdir(m.mnt)), ['checkpoint-10', 'checkpoint-12'],
                             m.log_tail())
            self.wait_complete(m, 'checkpoint-12')
            self.assertEqual(os.listdir(m.path('.ckptfs', 'quarantine')), [], m.log_tail())
        finally:
            m.close()

    def test_an_orbax_step_renamed_into_place_just_before_a_kill_is_complete(self):
        """Orbax on a local filesystem commits a step by renaming N.orbax-checkpoint-tmp/ to N/,
        with no commit file (orbax atomicity.py AtomicRenameTemporaryPath.finalize;
        tests/traces/orbax.md). Killed right after that rename is committed, the daemon must
        find N/ sealed at the restart, and complete it: on 32afc31 its seal was a second
        transaction, and the restart judged the committed step incomplete, under its tmp
        name."""
        m = ckfs.Mount()
        try:
            m.env['CKPTFS_FAULT'] = 'top-renamed:2'
            m.start()
            for n in (10, 12):
                tmp = m.path('%d.orbax-checkpoint-tmp' % n)
                os.mkdir(tmp)
                with zipfile.ZipFile(os.path.join(tmp, 'shard_0.pt'), 'w') as z:
                    z.writestr('archive/data.pkl', ckfs.content('shard-%d' % n, 4096))
                if n == 10:
                    os.rename(tmp, m.path('10'))
                    self.wait_complete(m, '10')
                else:
                    self.killed_in(m, lambda: os.rename(tmp, m.path('12')))
            self.assertEqual(sorted(os.listdir(m.mnt)), ['10', '12'], m.log_tail())
            self.wait_complete(m, '12')
        finally:
            m.close()


    def test_a_tmp_step_is_not_complete_before_its_rename(self):
        """transformers 4.36's Trainer saves into tmp-checkpoint-N/, trainer_state.json among
        the first files, and renames it to checkpoint-N/ last; get_last_checkpoint sees only
        checkpoint-N/. A step under its tmp name is sealed by that rename only (policy rule 1):
        on 8f652fa the marker sealed and completed it, and with keep_checkpoint_max=1 retention
        pruned checkpoint-10 then, before the rename, so a trainer killed before it left no
        checkpoint to resume from. Now checkpoint-10 stays until checkpoint-12 is renamed into
        place, and a tmp step whose writer died unrenamed is set aside."""
        m = ckfs.Mount(opts=('keep_checkpoint_max=1',))
        try:
            m.start()
            self.save(m, 10)
            self.wait_complete(m, 'checkpoint-10')
            d = m.path('tmp-checkpoint-12')
            self.save(m, 12, tmp=None)                      # written, not renamed yet
            time.sleep(1.5)
            st = self.states(m)
            self.assertEqual((st.get('checkpoint-10'), st.get('tmp-checkpoint-12')),
                             ('complete', 'writing'), m.log_tail())
            os.rename(d, m.path('checkpoint-12'))
            self.wait_complete(m, 'checkpoint-12')
            self.assertEqual(sorted(os.listdir(m.mnt)), ['checkpoint-12'], m.log_tail())
            # a save whose process died before its rename: set aside, checkpoint-12 kept
            r = subprocess.run([sys.executable, '-c', SAVE_TMP, m.mnt], timeout=60)
            self.assertEqual(r.returncode, 0)
            ckfs.wait_for('tmp-checkpoint-14 set aside', lambda: self.states(m).get(
                'tmp-checkpoint-14') == 'incomplete', extra=m.log_tail)
            self.assertEqual(sorted(os.listdir(m.mnt)), ['checkpoint-12'], m.log_tail())
            self.assertEqual(self.states(m).get('checkpoint-12'), 'complete')
        finally:
            m.close()


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
