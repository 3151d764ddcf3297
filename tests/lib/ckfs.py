"""ckfs.py - helpers for the ckptfs real-mount tests.

Mount(store=None, opts=()) runs the real daemon on a real temporary directory:

    with Mount(opts=('allow_other',)) as m:
        open(m.path('a'), 'wb').write(b'x')
        m.remount()
        m.kill_daemon()       # SIGKILL, then fusermount3 -uz
        m.remount()

Binaries come from CKPTFS_BIN / CKPTCTL_BIN (default: build/fs/ckptfs and build/tools/ckptctl
under the repository root). Temporary directories go under $CKPTFS_TEST_TMP (default /tmp) and are
removed at the end unless CKPTFS_KEEP=1.

Nothing here ever skips a test: a missing /dev/fuse, a missing fusermount3, a missing binary or a
failed mount raises MountError with the reason, because a skipped mount test hides exactly what a
user would hit. Every failure path unmounts and stops the daemon it started.
"""

import atexit
import errno
import hashlib
import json
import ctypes
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MOUNT_TIMEOUT = float(os.environ.get('CKPTFS_MOUNT_TIMEOUT', '30'))
EXIT_TIMEOUT = float(os.environ.get('CKPTFS_EXIT_TIMEOUT', '120'))


class MountError(Exception):
    """The mount could not be set up or torn down; the message says why."""


def _bin(env, rel):
    p = os.environ.get(env) or os.path.join(REPO_ROOT, rel)
    return os.path.abspath(p)


def ckptfs_bin():
    return _bin('CKPTFS_BIN', 'build/fs/ckptfs')


def ckptctl_bin():
    return _bin('CKPTCTL_BIN', 'build/tools/ckptctl')


def test_tmp_root():
    return os.environ.get('CKPTFS_TEST_TMP') or '/tmp'


def keep_tmp():
    return os.environ.get('CKPTFS_KEEP') == '1'


def check_fuse_usable():
    """Raise MountError unless FUSE can be used at all on this machine."""
    if not os.path.exists('/dev/fuse'):
        raise MountError('/dev/fuse is missing: FUSE cannot be used here '
                         '(load the fuse module or pass --device /dev/fuse to the container)')
    if not stat.S_ISCHR(os.stat('/dev/fuse').st_mode):
        raise MountError('/dev/fuse is not a character device')
    if shutil.which('fusermount3') is None:
        raise MountError('fusermount3 is not on PATH (install the fuse3 package)')
    b = ckptfs_bin()
    if not os.access(b, os.X_OK):
        raise MountError('ckptfs binary %r is missing or not executable '
                         '(build it with meson compile -C build, or set CKPTFS_BIN)' % b)


def fuse_mounts():
    """Mount points of fuse filesystems, from /proc/mounts (octal escapes decoded)."""
    res = {}
    with open('/proc/mounts') as f:
        for line in f:
            parts = line.split()
            if len(parts) < 3:
                continue
            mp = parts[1].encode().decode('unicode_escape')
            if parts[2] == 'fuse' or parts[2].startswith('fuse.') or parts[2] == 'fuseblk':
                res[mp] = parts[2]
    return res


def is_fuse_mounted(path):
    # realpath of the parent only: a stat of the mountpoint itself would wait for the daemon,
    # which answers nothing until its check of the newest step ends (fs/steps/steps.c)
    path = path.rstrip('/') or '/'
    real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    return real in fuse_mounts()


def _task_state(path):
    try:
        with open(path) as f:
            s = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # state is the field after the parenthesised command name
    return s[s.rfind(')') + 2:].split()[0]


def pid_alive(pid):
    """True while any thread of process pid exists and is not a zombie.

    A SIGKILLed multithreaded daemon's leader is a zombie at once, while its last thread still
    tears down the address space and only then closes its files (the store lock): 1-2 s on the
    CI machine. Looking at the leader alone let a test remount while the old daemon still held
    the lock."""
    state = _task_state('/proc/%d/stat' % pid)
    if state is None:
        return False
    if state not in ('Z', 'X'):
        return True
    try:
        tids = os.listdir('/proc/%d/task' % pid)
    except (FileNotFoundError, ProcessLookupError):
        return False
    return any(_task_state('/proc/%d/task/%s/stat' % (pid, t)) not in (None, 'Z', 'X')
               for t in tids)


def daemon_stacks(pid):
    """Every thread's stack of process pid, as gdb prints it (what a daemon that does not exit
    is waiting for), or why there is none: a hang in CI is then diagnosed from its log."""
    if not shutil.which('gdb'):
        return '(no gdb)'
    try:
        p = subprocess.run(['gdb', '-batch', '-nx', '-p', str(pid), '-ex', 'thread apply all bt'],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return '(gdb: %s)' % e
    return '\n'.join(ln for ln in p.stdout.splitlines() if ln.startswith(('#', 'Thread')))


def wait_pid_exit(pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    return not pid_alive(pid)


def store_daemon_pid(store):
    """The pid of the live daemon that owns STORE (the pid it writes into STORE/lock), or
    None when no live process does."""
    try:
        with open(os.path.join(store, 'lock')) as f:
            txt = f.read().strip()
        pid = int(txt.split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if pid_alive(pid) else None


def wait_store_released(store, timeout=60):
    """Wait until no live daemon owns STORE. An unmount returns before the daemon has exited
    (it still writes STORE/clean): removing the directory meanwhile leaves that file behind.
    Returns True when released in time."""
    pid = store_daemon_pid(store)
    return pid is None or wait_pid_exit(pid, timeout)


def run(argv, timeout=120, check=False, **kw):
    """subprocess.run with text capture; returns CompletedProcess.

    Output is decoded with surrogateescape, as Python decodes file names: ckptctl prints names
    as the bytes they are (fsck's "lost:" lines after a damaged index can hold any), and a strict
    decode would raise instead of letting the test look at them."""
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       errors='surrogateescape', timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise MountError('%s exited %d: %s%s' % (' '.join(argv), p.returncode, p.stdout,
                                                  p.stderr))
    return p


def ckptctl(store, *args, json_out=False, timeout=300):
    """Run ckptctl [--json] STORE args...; returns CompletedProcess (never raises on exit code)."""
    b = ckptctl_bin()
    if not os.access(b, os.X_OK):
        raise MountError('ckptctl binary %r is missing or not executable '
                         '(build it, or set CKPTCTL_BIN)' % b)
    argv = [b] + (['--json'] if json_out else []) + [store] + list(args)
    return run(argv, timeout=timeout)


class CkptctlCase:
    """Mixin for a unittest.TestCase whose self.m is a started Mount: ctl() runs ckptctl on its
    store and asserts the exit status."""

    def ctl(self, *args, json_out=False, rc=0):
        """ckptctl [--json] STORE args...: the parsed JSON with json_out, else the
        CompletedProcess; fails the test unless it exited rc."""
        r = self.m.ckptctl(*args, json_out=json_out)
        self.assertEqual(r.returncode, rc, 'ckptctl %s exited %d, wanted %d: %s%s' %
                         (' '.join(args), r.returncode, rc, r.stdout, r.stderr))
        return json.loads(r.stdout) if json_out else r


# `python3 -c TORCH_COMPARE a b` exits 0 when torch.load(a) equals torch.load(b) (dicts
# recursively, tensors by torch.equal, other values by ==), 3 otherwise
TORCH_COMPARE = r'''
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
def eq(x, y):
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(eq(x[k], y[k]) for k in x)
    if isinstance(x, torch.Tensor):
        return torch.equal(x, y)
    return x == y
sys.exit(0 if eq(a, b) else 3)
'''


def chunk_files(store):
    """{relative path: size} of every chunk file under STORE/chunks."""
    res = {}
    root = os.path.join(store, 'chunks')
    for dp, dn, fn in os.walk(root):
        for n in fn:
            p = os.path.join(dp, n)
            try:
                res[os.path.relpath(p, root)] = os.lstat(p).st_size
            except FileNotFoundError:
                pass
    return res


def chunk_bytes(store):
    return sum(chunk_files(store).values())

def ctl_escaped(name):
    """bytes: how ckptctl's text output shows the name `name` (bytes): tools/ckptctl/common.c
    ctl_escape, GNU ls -b style. \\a \\b \\t \\n \\v \\f \\r and backslash get a
    letter; other control bytes, DEL, bytes of invalid UTF-8 (overlong forms, surrogates) and C1
    controls (U+0080..U+009F) become \\xHH; valid UTF-8 is kept as it is."""
    letters = {0x07: b'a', 0x08: b'b', 0x09: b't', 0x0a: b'n', 0x0b: b'v', 0x0c: b'f',
               0x0d: b'r', 0x5c: b'\\'}
    out, i = b'', 0
    while i < len(name):
        c = name[i]
        if c in letters:
            out += b'\\' + letters[c]
            i += 1
            continue
        k = 0
        for n in (1, 2, 3, 4):
            try:
                ch = name[i:i + n].decode('utf-8')
            except UnicodeDecodeError:
                continue
            if len(ch) == 1:
                k = n
            break
        if k == 0 or c < 0x20 or c == 0x7f or (k == 2 and 0x80 <= ord(ch) <= 0x9f):
            out += b'\\x%02x' % c
            i += 1
        else:
            out += name[i:i + k]
            i += k
    return out



# fallocate(2) modes, <linux/falloc.h>
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10


def fallocate(fd, mode, off, length):
    """fallocate(2) with every mode (os.posix_fallocate has none); raises OSError."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def read_bytes(path):
    with open(path, 'rb') as f:
        return f.read()


def dir_link_errors(top):
    """Directories of the mount at top, /.ckptfs and what it holds included, whose link count
    is not 2 + their subdirectories, as 'path: nlink N, M subdirectories' strings; [] when all
    agree (POSIX: '.', the entry in the parent, each subdirectory's '..'). /.ckptfs is not
    listed in the root but is one of its subdirectories."""
    bad = []
    meta = os.path.join(top, '.ckptfs')
    for t in (top, meta):
        for dp, dns, _ in os.walk(t):
            n = os.lstat(dp).st_nlink
            subs = sum(1 for d in dns if not os.path.islink(os.path.join(dp, d)))
            if dp == top and '.ckptfs' not in dns:
                subs += 1
            if n != 2 + subs:
                bad.append('%s: nlink %d, %d subdirectories' % (dp, n, subs))
    return bad


def file_hash(path, bs=1 << 20):
    h = hashlib.sha1()
    with open(path, 'rb') as f:
        while True:
            b = f.read(bs)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def content(key, n):
    """Deterministic pseudo-random bytes for key (str), n bytes (SHAKE-128, ~250 MB/s)."""
    if n <= 0:
        return b''
    return hashlib.shake_128(key.encode()).digest(n)


_WRITE_AND_EXIT = ('import os, sys\n'
                   'os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)\n'
                   'with open(sys.argv[1], "wb") as f:\n'
                   '    f.write(sys.stdin.buffer.read()); f.flush(); os.fsync(f.fileno())\n')


def write_exiting(path, data):
    """Write data to path (its directory made as needed), fsynced, from a process of its own
    that exits after the write: a rank whose process ends with the job, or one of Megatron's
    forked async writers. The daemon then sees the file's writer gone."""
    subprocess.run([sys.executable, '-c', _WRITE_AND_EXIT, path], input=data, check=True,
                   timeout=60)


_live = set()


def tree_dump(root, small=512):
    """`ls -lR`-like text of a tree for a failure message: mode, size, mtime (ns) and name of
    every entry, and the contents of files up to `small` bytes (trackers, markers, meta.json)."""
    out = []
    for dp, dn, fn in os.walk(root):
        dn.sort()
        for n in sorted(dn) + sorted(fn):
            p = os.path.join(dp, n)
            try:
                st = os.lstat(p)
            except OSError as e:
                out.append('%s: %s' % (os.path.relpath(p, root), e.strerror))
                continue
            line = '%o %10d %d %s' % (st.st_mode, st.st_size, st.st_mtime_ns,
                                       os.path.relpath(p, root))
            if n in fn and st.st_size <= small:
                try:
                    with open(p, 'rb') as f:
                        line += '  = %r' % f.read()
                except OSError as e:
                    line += '  (%s)' % e.strerror
            out.append(line)
    return '\n'.join(out)


class Mount:
    """A ckptfs mount on temporary directories; see the module comment.

    store: STORE directory to use (default: a fresh one under the temp dir, created by the daemon).
    opts: extra -o options (default_permissions is the daemon's default).
    """

    def __init__(self, store=None, opts=(), mnt=None):
        check_fuse_usable()
        self.tmp = tempfile.mkdtemp(prefix='ckptfs-test-', dir=test_tmp_root())
        # other uids (the chmod/uid tests) must be able to reach the mountpoint
        os.chmod(self.tmp, 0o755)
        self.own_store = store is None
        self.store = store or os.path.join(self.tmp, 'store')
        self.mnt = mnt or os.path.join(self.tmp, 'mnt')
        os.makedirs(self.mnt, exist_ok=True)
        self.opts = tuple(opts)
        self.env = {}            # extra environment for the daemon (CKPTFS_FAULT, ...)
        self.pid = None
        self.mounted = False
        self.mount_count = 0
        self.start_stderr = ''   # what the last `ckptfs` command printed on stderr

    # -- paths -------------------------------------------------------------------------------

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self):
        """Run the daemon; return once MOUNTPOINT is a fuse mount. Raises MountError."""
        if self.mounted:
            raise MountError('already mounted')
        if is_fuse_mounted(self.mnt):
            raise MountError('%s is already a fuse mount' % self.mnt)
        argv = [ckptfs_bin()]
        if self.opts:
            argv += ['-o', ','.join(self.opts)]
        argv += [self.store, self.mnt]
        _live.add(self)
        # a daemon that already owns STORE (a test of the refusal) is not ours to stop
        self.foreign_pid = self._read_pid()
        try:
            p = run(argv, timeout=MOUNT_TIMEOUT, env=dict(os.environ, **self.env))
        except subprocess.TimeoutExpired:
            self._cleanup_after_failed_start()
            raise MountError('%s did not return within %.0f s' % (' '.join(argv),
                                                                   MOUNT_TIMEOUT))
        self.start_stderr = p.stderr
        if p.returncode != 0:
            self._cleanup_after_failed_start()
            raise MountError('%s exited %d: %s' % (' '.join(argv), p.returncode,
                                                   (p.stderr + p.stdout).strip()
                                                   or '(no message)'))
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not is_fuse_mounted(self.mnt):
            if time.monotonic() > deadline:
                self._cleanup_after_failed_start()
                raise MountError('ckptfs exited 0 but %s is not a fuse mount after %.0f s%s' %
                                 (self.mnt, MOUNT_TIMEOUT, self.log_tail()))
            time.sleep(0.02)
        self.mounted = True
        self.mount_count += 1
        self.pid = self._read_pid()
        if self.pid is None or self.pid == self.foreign_pid:
            self.pid = self._find_pid()
        if self.pid is None:
            self.stop()
            raise MountError('mounted, but cannot find the daemon pid (STORE/lock has none)')
        return self

    def _read_pid(self):
        return store_daemon_pid(self.store)

    def _find_pid(self):
        p = run(['pgrep', '-f', '--', self.store], timeout=10)
        pids = [int(x) for x in p.stdout.split() if x.strip().isdigit()]
        pids = [x for x in pids if x != os.getpid() and pid_alive(x)]
        return pids[0] if len(pids) == 1 else None

    def _cleanup_after_failed_start(self):
        pid = self._read_pid()
        if pid is not None and pid == getattr(self, 'foreign_pid', None):
            pid = None
        if is_fuse_mounted(self.mnt):
            run(['fusermount3', '-uz', self.mnt], timeout=30)
        if pid is not None and not wait_pid_exit(pid, 10):
            os.kill(pid, signal.SIGKILL)
            wait_pid_exit(pid, 10)
        self.mounted = False

    def log_tail(self, n=20):
        p = os.path.join(self.store, 'ckptfs.log')
        try:
            with open(p, errors='replace') as f:
                lines = f.readlines()[-n:]
        except OSError:
            return ''
        return '\n--- tail of %s ---\n%s' % (p, ''.join(lines))

    def unmount(self, timeout=EXIT_TIMEOUT, wait=True):
        """fusermount3 -u (retrying while busy, then -uz), then wait for the daemon to exit.
        Raises MountError if it needed the lazy unmount or the daemon did not exit.
        wait=False returns as soon as the unmount is done, as a scheduler restarting a job
        would, leaving the daemon to finish its commits; the caller then waits for the pid
        returned (None when not mounted)."""
        if not self.mounted:
            return None
        problems = []
        deadline = time.monotonic() + 15
        while True:
            p = run(['fusermount3', '-u', self.mnt], timeout=60)
            if p.returncode == 0 or not is_fuse_mounted(self.mnt):
                break
            if 'busy' not in (p.stderr + p.stdout).lower() or time.monotonic() > deadline:
                problems.append('fusermount3 -u failed: %s' % p.stderr.strip())
                run(['fusermount3', '-uz', self.mnt], timeout=60)
                break
            time.sleep(0.1)
        self.mounted = False
        pid, self.pid = self.pid, None
        if not wait:
            if problems:
                raise MountError('; '.join(problems) + self.log_tail())
            return pid
        if pid is not None and not wait_pid_exit(pid, timeout):
            stacks = daemon_stacks(pid)
            os.kill(pid, signal.SIGKILL)
            wait_pid_exit(pid, 10)
            problems.append('daemon %d did not exit within %.0f s of unmount (killed); its '
                            'threads were at:\n%s' % (pid, timeout, stacks))
        if is_fuse_mounted(self.mnt):
            run(['fusermount3', '-uz', self.mnt], timeout=60)
            problems.append('%s still mounted after unmount' % self.mnt)
        if problems:
            raise MountError('; '.join(problems) + self.log_tail())
        return None

    def kill_daemon(self, then=None):
        """SIGKILL the daemon, wait for it to die, call then() if given, clear the dead mount
        with fusermount3 -uz. then() must stop every process still working in the mount (a
        trainer killed with the daemon): once the mount is detached its paths reach the plain
        directory underneath, where a write "succeeds" and a save looks returned (the crash
        loop's round that resumed onto step 18 after a SAVED 20 written there)."""
        if not self.mounted:
            raise MountError('kill_daemon: not mounted')
        pid, self.pid = self.pid, None
        os.kill(pid, signal.SIGKILL)
        if not wait_pid_exit(pid, 30):
            raise MountError('daemon %d survived SIGKILL for 30 s' % pid)
        if then is not None:
            then()
        self._clear_dead_mount()

    def _clear_dead_mount(self):
        """The daemon is gone: detach its mount (fusermount3 -uz) and wait until it is."""
        run(['fusermount3', '-uz', self.mnt], timeout=60)
        deadline = time.monotonic() + 10
        while is_fuse_mounted(self.mnt) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.mounted = False
        if is_fuse_mounted(self.mnt):
            raise MountError('%s still mounted after fusermount3 -uz' % self.mnt)

    def wait_daemon_death(self, timeout=30):
        """The daemon is expected to die on its own (an injected fault): wait for it, clear the
        dead mount with fusermount3 -uz. Returns True if it died within timeout; else leaves
        everything as it was and returns False."""
        if not self.mounted:
            raise MountError('wait_daemon_death: not mounted')
        if not wait_pid_exit(self.pid, timeout):
            return False
        self.pid = None
        self._clear_dead_mount()
        return True

    def remount(self):
        self.unmount()
        return self.start()

    def stop(self):
        """Best-effort teardown used on every exit path; never raises."""
        try:
            self.unmount()
        except Exception as e:  # noqa: BLE001 - teardown must go on
            sys.stderr.write('ckfs: unmount of %s: %s\n' % (self.mnt, e))
        _live.discard(self)

    def remove_tmp(self):
        if keep_tmp():
            sys.stderr.write('ckfs: keeping %s\n' % self.tmp)
            return
        if is_fuse_mounted(self.mnt):
            return  # never rm -r through a live mount
        shutil.rmtree(self.tmp, ignore_errors=True)

    def close(self):
        self.stop()
        self.remove_tmp()

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, et, ev, tb):
        try:
            if et is None:
                self.unmount()      # raises if the unmount was not clean
            else:
                self.stop()         # do not mask the test's own exception
        finally:
            _live.discard(self)
            self.remove_tmp()
        return False

    # -- store inspection --------------------------------------------------------------------

    def chunk_bytes(self):
        return chunk_bytes(self.store)

    def ckptctl(self, *args, json_out=False, timeout=300):
        return ckptctl(self.store, *args, json_out=json_out, timeout=timeout)

    def settle(self):
        """Wait until every file closed so far is durable and in the index (close() returns
        before that, fs/write/commit.c; an open of .ckptfs/status waits for the committer), so that
        ckptctl, which reads the index, sees them."""
        with open(self.path('.ckptfs', 'status'), 'rb') as f:
            f.read()

    def read_text(self, *parts):
        """The text of the file at parts under the mount, stripped (a tracker's content), or
        None when it does not exist."""
        try:
            with open(self.path(*parts)) as f:
                return f.read().strip()
        except FileNotFoundError:
            return None

    def status_text(self):
        """The mount's .ckptfs/status, or why it cannot be read (for failure messages)."""
        try:
            with open(self.path('.ckptfs', 'status')) as f:
                return f.read()
        except OSError as e:
            return '(no status: %s)' % e

    def status_json(self):
        p = self.ckptctl('status', json_out=True)
        if p.returncode != 0:
            return None
        try:
            return json.loads(p.stdout)
        except ValueError:
            return None


class PlainDir:
    """Stand-in for Mount over a plain directory (harness self-tests): same paths API,
    remount() is a no-op."""

    def __init__(self, *a, **kw):
        self.tmp = tempfile.mkdtemp(prefix='ckptfs-plain-', dir=test_tmp_root())
        os.chmod(self.tmp, 0o755)
        self.mnt = os.path.join(self.tmp, 'mnt')
        os.mkdir(self.mnt)
        self.store = None
        self.mounted = True

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def start(self):
        return self

    def unmount(self):
        pass

    def remount(self):
        return self

    def stop(self):
        pass

    def close(self):
        if not keep_tmp():
            shutil.rmtree(self.tmp, ignore_errors=True)

    remove_tmp = close

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        self.close()
        return False


@atexit.register
def _atexit_cleanup():
    for m in list(_live):
        m.stop()


# -- running code as another user ---------------------------------------------------------------

# -- waiting on the daemon, reading what a trainer wrote --------------------------------------

TRACKER = 'latest_checkpointed_iteration.txt'   # Megatron's tracker file


def wait_for(what, fn, timeout=20.0, extra=lambda: ''):
    """Poll fn() every 0.1 s until it returns a true value, and return that value. After
    timeout seconds, raise AssertionError naming what was awaited, followed by extra()."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError('timed out after %.0f s waiting for %s%s' % (timeout, what,
                                                                             extra()))
        time.sleep(0.1)


def read_tracker(m, name=TRACKER, absent=OSError):
    """The content of tracker file `name` in mount (or PlainDir) m, or None when reading it
    raises `absent` (an exception class or tuple: by default any OSError, as when the daemon
    died under the reader; FileNotFoundError to let every other error through)."""
    try:
        with open(m.path(name)) as f:
            return f.read()
    except absent:
        return None


def sha256_file(path):
    """sha256 hex digest of a whole file (read in one piece: checkpoint-sized files only)."""
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_as(uid, gid, fn, *args):
    """Fork, drop to uid/gid (no supplementary groups), run fn(*args) and return its result.

    Returns ('ok', value) or ('err', errno, strerror); the value must be JSON-serialisable.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            try:
                res = ['ok', fn(*args)]
            except OSError as e:
                res = ['err', e.errno, e.strerror]
            data = json.dumps(res).encode()
        except BaseException as e:  # noqa: BLE001
            data = json.dumps(['exc', repr(e)]).encode()
        os.write(w, data)
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    os.waitpid(pid, 0)
    res = json.loads(b''.join(chunks).decode() or '["exc", "child died"]')
    if res[0] == 'exc':
        raise AssertionError('child as uid %d failed: %s' % (uid, res[1]))
    return tuple(res)


def in_child(fn, *args):
    """Fork, run fn(*args) in the child as the same user; return as run_as."""
    return run_as(os.getuid(), os.getgid(), fn, *args)


# -- many nodes over one remote (-o remote=DIR,node=,nodes=2; fs/node/) ----------------------

def megatron_rank_file(step, rank):
    """Megatron-LM's file of rank `rank` in the save of `step` (tests/traces/megatron.md)."""
    return os.path.join('iter_%07d' % step, 'mp_rank_%02d' % rank, 'model_optim_rng.pt')


def megatron_save_per_node(mounts, step, tag, size, writers=None, claim=True):
    """Megatron-LM's save of step with one rank per node: rank r writes its file through
    mounts[r] (when r is in writers; all when None), each file fsynced, then rank 0 writes the
    tracker through mounts[0] when claim (tests/traces/megatron.md). The bytes are
    content('TAG step N rank R', size). Returns {relative path: bytes}."""
    want = {}
    for r, m in enumerate(mounts):
        if writers is not None and r not in writers:
            continue
        rel = megatron_rank_file(step, r)
        p = m.path(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        data = content('%s step %d rank %d' % (tag, step, r), size)
        with open(p, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        want[rel] = data
    if claim:
        with open(mounts[0].path(TRACKER), 'w') as f:
            f.write(str(step))
    return want


def megatron_save_two_nodes(a, b, step, ranks=4, size=256 << 10, before_tracker=None):
    """Megatron-LM's save of step through two node mounts a and b of one remote, written by this
    process: node A makes iter_N, every rank writes its file (the first half of the ranks
    through A, the others through B, once the directory reached B through the remote), then
    (after before_tracker() when given) rank 0 writes the tracker through A after the barrier.
    Returns {relative path: bytes}."""
    os.mkdir(a.path('iter_%07d' % step))
    want = {}
    for r in range(ranks):
        m = a if r < ranks // 2 else b
        p = m.path(megatron_rank_file(step, r))
        wait_for('iter_%07d on node %s' % (step, 'ab'[m is b]),
                 lambda: os.path.isdir(os.path.dirname(os.path.dirname(p))), 30)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        data = content('step %d rank %d' % (step, r), size)
        with open(p, 'wb') as f:
            f.write(data)
        want[megatron_rank_file(step, r)] = data
    if before_tracker:
        before_tracker()
    with open(a.path(TRACKER), 'w') as f:
        f.write(str(step))
    return want


# The step in a manifest's key, zero-padded to this many digits (NODE_STEP_DIGITS, fs/node/
# node_int.h): 'manifests/KIND/STEP/NODE/VERSION.json'.
MANIFEST_STEP_DIGITS = 20


def manifest_step(step):
    """The step's component of a manifest's key, as a daemon publishes it."""
    return '%0*d' % (MANIFEST_STEP_DIGITS, step)


def put_remote_lease(remote, key, holder, host, age_ns, expiry_s, pid=4242):
    """A lease of the gc protocol (fs/node/lease.h's JSON) at key of the directory remote at
    remote, taken and last renewed age_ns ago, written whole (temp file, rename)."""
    t = time.time_ns() - age_ns
    p = os.path.join(remote, *key.split('/'))
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p + '.part', 'w') as f:
        json.dump({'format': 'ckptfs-lease/1', 'holder': holder, 'host': host, 'pid': pid,
                   'created_ns': t, 'renewed_ns': t, 'expiry_s': expiry_s}, f)
    os.rename(p + '.part', p)


def mount_tmpfs(case, size_mb):
    """A tmpfs of size_mb MiB mounted on a new directory, unmounted and removed at case's
    cleanup. Returns its path. Raises MountError when it cannot be mounted (needs root)."""
    top = tempfile.mkdtemp(prefix='ckptfs-test-full-', dir=test_tmp_root())
    case.addCleanup(shutil.rmtree, top, True)
    p = run(['mount', '-t', 'tmpfs', '-o', 'size=%dm' % size_mb, 'tmpfs', top])
    if p.returncode != 0:
        raise MountError('cannot mount a tmpfs for a full remote (needs root or '
                         'CAP_SYS_ADMIN): %s' % (p.stderr.strip() or p.returncode))
    case.addCleanup(run, ['umount', top])
    return top


def fill_filesystem(top):
    """Fill the filesystem at top with filler files until not one more page fits: writes of
    1 MiB, then of half as much each time one fails, down to a byte."""
    n, size = 0, 1 << 20
    while size:
        n += 1
        fd = os.open(os.path.join(top, 'filler-%d' % n), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b'\xa5' * size) == size:
                pass
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)
        size //= 2
