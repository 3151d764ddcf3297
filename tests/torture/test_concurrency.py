#!/usr/bin/python3
"""Concurrency: many writers, readers, listers and ckptctl on one mount at the same time.

For CKPTFS_TORTURE_SECONDS (default 40) on one mount (layout detection on, as a user runs it):
  - CKPTFS_TORTURE_WRITERS (8) writer processes each create file after file under their own
    directory w<W>/d<N>/ (sizes log-uniform from 4 KiB to 8 MiB, write sizes from 1 byte to
    3 MiB): sequential writes, shuffled pwrites, wrong bytes first then overwritten, a tail
    written then cut off by ftruncate; fsync/fdatasync at random points; about a third are
    written under a temporary name and renamed into place, and w<W>/latest.bin is replaced by
    rename every few files; each writer keeps its 4 newest files, unlinks older ones and removes
    its emptied directories. Every file starts with a header naming (writer, generation, size)
    and its bytes derive from it, so anyone can check any file. Writers re-read a file while it
    is open (read-your-writes) and after closing it.
  - CKPTFS_TORTURE_READERS (3) reader processes open closed files (what the writers logged, and
    latest.bin) and read them whole (read with random sizes, pread in random order, or mmap):
    a file that vanished before the open is fine, a read error after it or a wrong byte is not.
  - a lister walks the tree (os.walk + lstat, `ls -lR`, .ckptfs/status) over and over; entries
    vanishing under it are fine, anything else is not.
  - a ckptctl loop runs `status`, `steps`, `ls /`, `ls /w<W>`, `ls FILE` and `verify` on the live
    store: each must exit 0 (`ls` of a file unlinked meanwhile: 2 with "does not exist"), and
    verify must find no damage.
  - every process reports each operation it starts to a shared heartbeat table; an operation
    (kernel call or subprocess) running longer than CKPTFS_TORTURE_HANG seconds (default 180) is
    a hang: the test fails naming it, with the kernel stacks (/proc/PID/task/*/stack, wchan) of
    the stuck process and of every daemon thread, and gdb's backtraces of the daemon if gdb is
    installed.
At the end: the daemon is alive, every writer's remaining files (and latest.bin) are bit-exact,
`ckptctl verify` is clean, and the same holds after a remount; the daemon's RSS is reported.
Prints `concurrency: W files written, R reads verified, 0 mismatches, L ls passes, C ckptctl calls
in Ns` and a second line with bytes, vanished opens and the daemon's RSS (now and peak).

Environment: CKPTFS_BIN, CKPTCTL_BIN (see ../lib/ckfs.py), CKPTFS_TORTURE_SECONDS (40),
CKPTFS_TORTURE_WRITERS (8), CKPTFS_TORTURE_READERS (3), CKPTFS_TORTURE_HANG (180 s),
CKPTFS_TORTURE_SEED (random; printed).
Run: /usr/bin/python3 tests/torture/test_concurrency.py [-v]
"""

import sys

sys.dont_write_bytecode = True

import errno  # noqa: E402
import faulthandler  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import mmap  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402

SECONDS = float(os.environ.get('CKPTFS_TORTURE_SECONDS', '40'))
WRITERS = int(os.environ.get('CKPTFS_TORTURE_WRITERS', '8'))
READERS = int(os.environ.get('CKPTFS_TORTURE_READERS', '3'))
HANG = float(os.environ.get('CKPTFS_TORTURE_HANG', '180'))
SEED = int(os.environ.get('CKPTFS_TORTURE_SEED') or random.SystemRandom().randrange(1 << 30))

KiB, MiB = 1 << 10, 1 << 20
MIN_SIZE, MAX_SIZE = 4 * KiB, 8 * MiB
KEEP = 4                   # newest files each writer keeps
PER_DIR = 16               # generations per writer subdirectory
HDR = struct.Struct('<8sIIQ')   # magic, writer, generation, size
MAGIC = b'CKTORTUR'
LATEST_GEN_BASE = 1 << 30  # latest.bin versions: generation LATEST_GEN_BASE + k

# -- the shared heartbeat table: one slot per worker ------------------------------------------
SLOT = 256                 # bytes: f64 start time of the current op (0: idle), i32 pid, text


class Board:
    """An anonymous shared mapping made before fork: byte 0 is the stop flag, then one slot per
    worker with the operation it is in and since when."""

    def __init__(self, nslots):
        self.n = nslots
        self.mm = mmap.mmap(-1, SLOT * (nslots + 1))

    def stop(self):
        self.mm[0] = 1

    def stopped(self):
        return self.mm[0] == 1

    def begin(self, slot, what):
        b = what.encode(errors='replace')[:SLOT - 16]
        off = SLOT * (slot + 1)
        self.mm[off + 12:off + SLOT] = b.ljust(SLOT - 12, b'\0')
        self.mm[off:off + 12] = struct.pack('<di', time.monotonic(), os.getpid())

    def end(self, slot):
        off = SLOT * (slot + 1)
        self.mm[off:off + 8] = struct.pack('<d', 0.0)

    def read(self, slot):
        off = SLOT * (slot + 1)
        t, pid = struct.unpack('<di', self.mm[off:off + 12])
        return t, pid, self.mm[off + 12:off + SLOT].rstrip(b'\0').decode(errors='replace')


class Op:
    """with Op(board, slot, 'write w3/g12 @4096+65536'): ... marks the op in the table."""

    def __init__(self, board, slot, what):
        self.board, self.slot, self.what = board, slot, what

    def __enter__(self):
        self.board.begin(self.slot, self.what)

    def __exit__(self, *a):
        self.board.end(self.slot)
        return False


# -- file contents ------------------------------------------------------------------------------

def expected(w, gen, size):
    """The bytes of writer w's generation gen: a header, then SHAKE-128 of (w, gen)."""
    return HDR.pack(MAGIC, w, gen, size) + ckfs.content('w%d-g%d' % (w, gen), size - HDR.size)


def check_bytes(data):
    """None if data is a whole, correct file; else a description of what is wrong."""
    if len(data) < HDR.size:
        return 'only %d bytes, shorter than the header' % len(data)
    magic, w, gen, size = HDR.unpack_from(data)
    if magic != MAGIC:
        return 'bad header %r' % data[:HDR.size]
    if size != len(data):
        return 'header says w%d g%d %d bytes, read %d' % (w, gen, size, len(data))
    want = expected(w, gen, size)
    if data == want:
        return None
    off = next(i for i in range(len(data)) if data[i] != want[i])
    return 'w%d g%d (%d bytes): first wrong byte at offset %d (got %r, want %r)' % (
        w, gen, size, off, data[off:off + 8], want[off:off + 8])


def read_all(fd, rnd):
    """Read fd whole, one of three ways; returns bytes."""
    size = os.fstat(fd).st_size
    how = rnd.random()
    if how < 0.2 and size > 0:
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mm:
            return bytes(mm)
    if how < 0.45:
        pieces = []
        off = 0
        while off < size:
            n = min(size - off, rnd.choice((4096, 65536, 131072, 1 << 20, rnd.randrange(1, 300000))))
            pieces.append((off, n))
            off += n
        rnd.shuffle(pieces)
        buf = bytearray(size)
        for off, n in pieces:
            b = os.pread(fd, n, off)
            if len(b) != n:
                raise OSError(errno.EIO, 'short pread: %d of %d bytes at %d' % (len(b), n, off))
            buf[off:off + n] = b
        if os.pread(fd, 1, size) != b'':
            raise OSError(errno.EIO, 'data past the size given by fstat')
        return bytes(buf)
    out = []
    while True:
        b = os.read(fd, rnd.choice((1, 4096, 65536, 131072, 1 << 20, 3 << 20,
                                    rnd.randrange(1, 2 << 20))))
        if not b:
            return b''.join(out)
        out.append(b)


# -- the workers (each runs in a forked child) ---------------------------------------------------

class Writer:
    def __init__(self, m, board, slot, w, manifest, rnd):
        self.m, self.board, self.slot, self.w, self.rnd = m, board, slot, w, rnd
        self.manifest = manifest
        self.top = m.path('w%d' % w)
        self.kept = []             # relative paths of own files, oldest first
        self.latest = None         # generation latest.bin holds
        self.stats = dict(files=0, bytes=0, fsyncs=0, renames=0, unlinks=0, rmdirs=0,
                          own_checks=0, latest=0)

    def op(self, what):
        return Op(self.board, self.slot, 'writer %d: %s' % (self.w, what))

    def rel(self, gen):
        return 'w%d/d%04d/g%06d.bin' % (self.w, gen // PER_DIR, gen)

    def write_file(self, path, data, label):
        """Write data to a new file at path in a random way, fsync at random, close."""
        rnd = self.rnd
        size = len(data)
        mode = rnd.choice(('seq', 'seq', 'pwrite', 'overwrite', 'tail'))
        flags = os.O_CREAT | os.O_EXCL | (os.O_RDWR if rnd.random() < 0.5 else os.O_WRONLY)
        with self.op('open %s (%s)' % (label, mode)):
            fd = os.open(path, flags, 0o644)
        try:
            pieces = []
            off = 0
            while off < size:
                n = min(size - off, rnd.choice((1, 100, 4096, 65536, 131072, 1 << 20, 3 << 20,
                                                rnd.randrange(1, 1 << 20))))
                pieces.append((off, n))
                off += n
            if mode == 'overwrite':
                # wrong bytes over a random part first, then the right ones everywhere
                junk = ckfs.content('junk-%s' % label, rnd.randrange(1, size + 1))
                at = rnd.randrange(0, size - len(junk) + 1)
                with self.op('pwrite junk %s @%d+%d' % (label, at, len(junk))):
                    os.pwrite(fd, junk, at)
            if mode == 'pwrite':
                rnd.shuffle(pieces)
            fsync_at = rnd.randrange(len(pieces)) if rnd.random() < 0.25 else -1
            mv = memoryview(data)
            for i, (off, n) in enumerate(pieces):
                with self.op('write %s @%d+%d' % (label, off, n)):
                    done = 0
                    while done < n:
                        done += os.pwrite(fd, mv[off + done:off + n], off + done)
                if i == fsync_at:
                    with self.op('fsync (middle) %s' % label):
                        os.fsync(fd)
                    self.stats['fsyncs'] += 1
            if mode == 'tail':
                tail = ckfs.content('tail-%s' % label, rnd.randrange(1, 1 << 20))
                with self.op('write tail %s @%d+%d' % (label, size, len(tail))):
                    os.pwrite(fd, tail, size)
                with self.op('ftruncate %s to %d' % (label, size)):
                    os.ftruncate(fd, size)
            if flags & os.O_RDWR and rnd.random() < 0.5:
                # read-your-writes on the open file
                at = rnd.randrange(size)
                n = min(size - at, rnd.randrange(1, 1 << 20))
                with self.op('pread own open %s @%d+%d' % (label, at, n)):
                    got = os.pread(fd, n, at)
                if got != data[at:at + n]:
                    raise AssertionError('writer %d: read-your-writes on open %s @%d+%d '
                                         'returned wrong bytes' % (self.w, label, at, n))
            if rnd.random() < 0.3:
                with self.op('fsync %s' % label):
                    (os.fdatasync if rnd.random() < 0.5 else os.fsync)(fd)
                self.stats['fsyncs'] += 1
        finally:
            with self.op('close %s' % label):
                os.close(fd)

    def check_own(self, rel):
        with self.op('re-read own %s' % rel):
            with open(self.m.path(rel), 'rb') as f:
                bad = check_bytes(f.read())
        if bad:
            raise AssertionError('writer %d: own file %s right after close: %s' %
                                 (self.w, rel, bad))
        self.stats['own_checks'] += 1

    def one(self, gen):
        rnd = self.rnd
        size = int(math.exp(rnd.uniform(math.log(MIN_SIZE), math.log(MAX_SIZE))))
        data = expected(self.w, gen, size)
        rel = self.rel(gen)
        path = self.m.path(rel)
        d = os.path.dirname(path)
        if not os.path.isdir(d):
            with self.op('mkdir %s' % d):
                os.mkdir(d)
        if rnd.random() < 0.35:
            tmp = os.path.join(d, '.tmp-g%06d' % gen)
            self.write_file(tmp, data, rel + '.tmp')
            with self.op('rename into place %s' % rel):
                os.rename(tmp, path)
            self.stats['renames'] += 1
        else:
            self.write_file(path, data, rel)
        self.stats['files'] += 1
        self.stats['bytes'] += size
        self.kept.append(rel)
        self.manifest.write(rel + '\n')
        self.manifest.flush()
        if rnd.random() < 0.2:
            self.check_own(rel)
        if rnd.random() < 0.25:
            # a new latest.bin, published by rename over the old one
            lg = LATEST_GEN_BASE + gen
            lsize = int(math.exp(rnd.uniform(math.log(MIN_SIZE), math.log(2 * MiB))))
            tmp = os.path.join(self.top, '.latest.tmp')
            self.write_file(tmp, expected(self.w, lg, lsize), 'w%d/latest.tmp' % self.w)
            with self.op('rename over latest.bin'):
                os.rename(tmp, os.path.join(self.top, 'latest.bin'))
            self.latest = lg
            self.stats['latest'] += 1
        while len(self.kept) > KEEP:
            old = self.kept.pop(0)
            with self.op('unlink %s' % old):
                os.unlink(self.m.path(old))
            self.stats['unlinks'] += 1
            od = os.path.dirname(self.m.path(old))
            if od != d and not any(os.path.dirname(self.m.path(k)) == od for k in self.kept):
                with self.op('rmdir %s' % od):
                    os.rmdir(od)
                self.stats['rmdirs'] += 1

    def run(self):
        with self.op('mkdir %s' % self.top):
            os.mkdir(self.top)
        gen = 0
        while not self.board.stopped():
            gen += 1
            self.one(gen)
        return dict(self.stats, kept=self.kept, latest_gen=self.latest)


def reader_main(m, board, slot, r, manifests, rnd):
    stats = dict(reads=0, bytes=0, vanished=0, mismatches=0, errors=[])
    offsets = [0] * len(manifests)
    known = [[] for _ in manifests]
    while not board.stopped():
        w = rnd.randrange(len(manifests))
        with open(manifests[w]) as f:
            f.seek(offsets[w])
            chunk = f.read()
        # only whole lines: a line is written with its newline in one write
        if '\n' in chunk:
            whole = chunk[:chunk.rindex('\n') + 1]
            offsets[w] += len(whole.encode())
            known[w].extend(whole.split())
        if rnd.random() < 0.3:
            rel = 'w%d/latest.bin' % w
        elif known[w]:
            rel = rnd.choice(known[w][-(KEEP + 2):])
        else:
            time.sleep(0.01)
            continue
        label = 'reader %d: ' % r
        try:
            with Op(board, slot, label + 'open %s' % rel):
                fd = os.open(m.path(rel), os.O_RDONLY)
        except FileNotFoundError:
            stats['vanished'] += 1
            continue
        try:
            with Op(board, slot, label + 'read %s' % rel):
                data = read_all(fd, rnd)
        except OSError as e:
            stats['mismatches'] += 1
            stats['errors'].append('%s: read after a successful open failed: %s' % (rel, e))
            continue
        finally:
            with Op(board, slot, label + 'close %s' % rel):
                os.close(fd)
        bad = check_bytes(data)
        if bad:
            stats['mismatches'] += 1
            stats['errors'].append('%s: %s' % (rel, bad))
        else:
            stats['reads'] += 1
            stats['bytes'] += len(data)
        del stats['errors'][20:]
    return stats


def lister_main(m, board, slot, rnd):
    stats = dict(passes=0, walks=0, ls_lr=0, entries=0, errors=[])
    while not board.stopped():
        how = stats['passes'] % 3
        if how == 0:
            n = 0

            def onerror(e):
                if not isinstance(e, FileNotFoundError):
                    raise e
            with Op(board, slot, 'lister: os.walk + lstat'):
                for dp, dn, fn in os.walk(m.mnt, onerror=onerror):
                    for x in dn + fn:
                        try:
                            os.lstat(os.path.join(dp, x))
                            n += 1
                        except FileNotFoundError:
                            pass
            stats['entries'] = max(stats['entries'], n)
            stats['walks'] += 1
        elif how == 1:
            with Op(board, slot, 'lister: ls -lR'):
                p = subprocess.run(['ls', '-lR', m.mnt], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, timeout=HANG + 60)
            # exit 1: an entry vanished between readdir and lstat ("No such file")
            lines = [x for x in p.stderr.splitlines() if 'No such file or directory' not in x]
            if p.returncode not in (0, 1) or lines:
                stats['errors'].append('ls -lR exited %d: %s' % (p.returncode, p.stderr[-500:]))
            stats['ls_lr'] += 1
        else:
            with Op(board, slot, 'lister: read .ckptfs/status'):
                with open(m.path('.ckptfs', 'status')) as f:
                    s = f.read()
            if 'store:' not in s:
                stats['errors'].append('.ckptfs/status: %r' % s[:200])
        stats['passes'] += 1
        del stats['errors'][20:]
    return stats


def ctl_main(m, board, slot, rnd, manifests):
    stats = dict(calls=0, verify=0, by_cmd={}, errors=[])
    cmds = (['status'], ['steps'], ['ls', '/'], ['ls', 'DIR'], ['ls', 'FILE'], ['verify'])
    i = 0
    while not board.stopped():
        args = list(cmds[i % len(cmds)])
        i += 1
        w = rnd.randrange(len(manifests))
        if args[-1] == 'DIR':
            args[-1] = '/w%d' % w
        if args[-1] == 'FILE':
            with open(manifests[w]) as f:
                lines = f.read().split()
            if not lines:
                continue
            args[-1] = '/' + rnd.choice(lines[-KEEP:])
        with Op(board, slot, 'ckptctl %s' % ' '.join(args)):
            try:
                p = m.ckptctl(*args, timeout=HANG + 60)
            except subprocess.TimeoutExpired:
                stats['errors'].append('ckptctl %s did not return within %.0f s' %
                                       (' '.join(args), HANG + 60))
                break
        stats['calls'] += 1
        stats['by_cmd'][args[0]] = stats['by_cmd'].get(args[0], 0) + 1
        ok = p.returncode == 0
        if args[0] == 'ls' and args[1] != '/' and p.returncode == 2 and \
                'does not exist' in p.stderr:
            ok = True       # documented: a path unlinked meanwhile
        if args[0] == 'verify':
            stats['verify'] += 1
            if ok and ', 0 damaged files' not in p.stdout:
                ok = False
        if not ok:
            stats['errors'].append('ckptctl %s exited %d: %s%s' % (' '.join(args), p.returncode,
                                                                    p.stdout[-800:],
                                                                    p.stderr[-800:]))
        del stats['errors'][20:]
    return stats


# -- process plumbing ----------------------------------------------------------------------------

class Child:
    def __init__(self, name, fn, *args):
        self.name = name
        r, w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(r)
            code = 0
            try:
                res = {'ok': fn(*args)}
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                res = {'exc': '%s: %s' % (name, ''.join(traceback.format_exception(e)))}
                code = 1
            try:
                data = json.dumps(res).encode()
                while data:
                    data = data[os.write(w, data):]
            finally:
                os._exit(code)
        os.close(w)
        self.fd = r
        self.buf = []
        self.result = None
        self.status = None
        os.set_blocking(r, False)

    def poll(self):
        """Drain the pipe; reap the child once it exited. True when it is done."""
        if self.status is not None:
            return True
        while True:
            try:
                b = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not b:
                break
            self.buf.append(b)
        pid, st = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return False
        self.status = st
        os.set_blocking(self.fd, True)
        while True:
            b = os.read(self.fd, 65536)
            if not b:
                break
            self.buf.append(b)
        os.close(self.fd)
        txt = b''.join(self.buf).decode(errors='replace')
        try:
            self.result = json.loads(txt) if txt else {'exc': '%s: died (status %d) with '
                                                       'no report' % (self.name, st)}
        except ValueError:
            self.result = {'exc': '%s: unreadable report %r' % (self.name, txt[:300])}
        return True

    def kill(self):
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def read_text(path, limit=20000):
    try:
        with open(path, errors='replace') as f:
            return f.read(limit).strip()
    except OSError as e:
        return '(%s)' % e.strerror


def dump_process(pid, title):
    """Kernel view of every thread of pid: state, wchan, stack."""
    out = ['=== %s (pid %d) ===' % (title, pid)]
    for t in sorted(glob.glob('/proc/%d/task/*' % pid), key=lambda x: int(x.rsplit('/', 1)[1])):
        comm = read_text(t + '/comm')
        st = read_text(t + '/stat')
        state = st[st.rfind(')') + 2:].split()[0] if ')' in st else '?'
        out.append('-- tid %s %s state %s wchan %s' % (t.rsplit('/', 1)[1], comm, state,
                                                        read_text(t + '/wchan')))
        out.append(read_text(t + '/stack'))
    return '\n'.join(out)


def gdb_backtrace(pid):
    if not shutil.which('gdb'):
        return '(gdb not installed: no user-space backtraces)'
    try:
        p = subprocess.run(['gdb', '-p', str(pid), '-batch', '-nx', '-ex', 'set pagination off',
                            '-ex', 'thread apply all bt'], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        return '=== gdb: thread apply all bt (daemon) ===\n' + p.stdout[-30000:]
    except subprocess.TimeoutExpired:
        return '(gdb did not return within 120 s)'


def rss_kib(pid):
    res = {}
    for line in read_text('/proc/%d/status' % pid).splitlines():
        k, _, v = line.partition(':')
        if k in ('VmRSS', 'VmHWM'):
            res[k] = int(v.split()[0])
    return res


class ConcurrencyTest(unittest.TestCase):

    def check_final(self, m, finals, when):
        """Every final file bit-exact; returns the number checked."""
        bad = []
        for rel, (w, gen) in sorted(finals.items()):
            try:
                with open(m.path(rel), 'rb') as f:
                    data = f.read()
            except OSError as e:
                bad.append('%s: %s' % (rel, e))
                continue
            _, hw, hg, size = HDR.unpack_from(data) if len(data) >= HDR.size else (0, -1, -1, 0)
            if (hw, hg) != (w, gen):
                bad.append('%s: holds w%d g%d, want w%d g%d' % (rel, hw, hg, w, gen))
                continue
            why = check_bytes(data)
            if why:
                bad.append('%s: %s' % (rel, why))
        self.assertEqual(bad, [], '%s: final files wrong:\n%s' % (when, '\n'.join(bad[:20])))
        # nothing else is left in the writers' directories
        found = set()
        for w in range(WRITERS):
            for dp, dn, fn in os.walk(m.path('w%d' % w)):
                found.update(os.path.relpath(os.path.join(dp, x), m.mnt) for x in fn)
        self.assertEqual(sorted(found - set(finals)), [],
                         '%s: files left behind that no writer kept' % when)
        return len(finals)

    def verify_clean(self, m, when):
        p = m.ckptctl('verify', timeout=HANG + 60)
        self.assertEqual(p.returncode, 0, '%s: ckptctl verify exited %d:\n%s%s' %
                         (when, p.returncode, p.stdout[-3000:], p.stderr[-2000:]))
        self.assertIn(', 0 damaged files', p.stdout, p.stdout)

    def test_concurrency(self):
        rnd = random.Random(SEED)
        print('\nconcurrency: seed %d (CKPTFS_TORTURE_SECONDS=%g, %d writers, %d readers)' %
              (SEED, SECONDS, WRITERS, READERS), flush=True)
        with ckfs.Mount() as m:
            mdir = os.path.join(m.tmp, 'manifests')
            os.mkdir(mdir)
            manifests = [os.path.join(mdir, 'w%d' % w) for w in range(WRITERS)]
            for p in manifests:
                open(p, 'w').close()
            nslots = WRITERS + READERS + 2
            board = Board(nslots)
            children = []
            t0 = time.monotonic()
            try:
                for w in range(WRITERS):
                    def wmain(w=w, seed=rnd.randrange(1 << 60)):
                        with open(manifests[w], 'a') as mf:
                            return Writer(m, board, w, w, mf, random.Random(seed)).run()
                    children.append(Child('writer %d' % w, wmain))
                for r in range(READERS):
                    children.append(Child('reader %d' % r, reader_main, m, board, WRITERS + r, r,
                                          manifests, random.Random(rnd.randrange(1 << 60))))
                children.append(Child('lister', lister_main, m, board, WRITERS + READERS,
                                      random.Random(rnd.randrange(1 << 60))))
                children.append(Child('ckptctl', ctl_main, m, board, WRITERS + READERS + 1,
                                      random.Random(rnd.randrange(1 << 60)), manifests))
                hang = self.supervise(m, board, children, t0)
            except BaseException:
                board.stop()
                for c in children:
                    c.kill()
                for c in children:
                    while not c.poll():
                        time.sleep(0.05)
                raise
            elapsed = time.monotonic() - t0
            if hang:
                for c in children:
                    c.kill()
                m.kill_daemon()      # aborts the stuck requests so the children can die
                for c in children:
                    deadline = time.monotonic() + 30
                    while not c.poll() and time.monotonic() < deadline:
                        time.sleep(0.05)
                self.fail(hang)

            res = {c.name: c.result for c in children}
            excs = [r['exc'] for r in res.values() if 'exc' in r]
            self.assertEqual(excs, [], 'workers failed:\n' + '\n'.join(excs))
            self.assertTrue(ckfs.pid_alive(m.pid), 'the daemon died' + m.log_tail())
            ws = [res['writer %d' % w]['ok'] for w in range(WRITERS)]
            rs = [res['reader %d' % r]['ok'] for r in range(READERS)]
            ls = res['lister']['ok']
            ctl = res['ckptctl']['ok']
            errors = [e for r in rs for e in r['errors']] + ls['errors'] + ctl['errors']
            files = sum(w['files'] + w['latest'] for w in ws)
            reads = sum(r['reads'] for r in rs) + sum(w['own_checks'] for w in ws)
            mism = sum(r['mismatches'] for r in rs)
            finals = {}
            for w, st in enumerate(ws):
                for rel in st['kept']:
                    finals[rel] = (w, int(rel.rsplit('/g', 1)[1].split('.')[0]))
                if st['latest_gen'] is not None:
                    finals['w%d/latest.bin' % w] = (w, st['latest_gen'])
            nfinal = self.check_final(m, finals, 'after the run')
            self.verify_clean(m, 'after the run')
            rss = rss_kib(m.pid)
            m.remount()
            self.check_final(m, finals, 'after a remount')
            self.verify_clean(m, 'after a remount')
            rss2 = rss_kib(m.pid)

            print('concurrency: %d files written, %d reads verified, %d mismatches, %d ls passes,'
                  ' %d ckptctl calls in %.0fs' % (files, reads, mism, ls['passes'], ctl['calls'],
                                                  elapsed), flush=True)
            print('concurrency: %.0f MiB written, %.0f MiB read back, %d opens found the file '
                  'gone, %d fsyncs, %d renames, %d unlinks, %d verify runs, %d final files '
                  'bit-exact (also after a remount); daemon RSS %d MiB (peak %d MiB), %d MiB after '
                  'the remount' % (sum(w['bytes'] for w in ws) / MiB,
                                   sum(r['bytes'] for r in rs) / MiB,
                                   sum(r['vanished'] for r in rs),
                                   sum(w['fsyncs'] for w in ws),
                                   sum(w['renames'] + w['latest'] for w in ws),
                                   sum(w['unlinks'] for w in ws), ctl['verify'], nfinal,
                                   rss.get('VmRSS', 0) // 1024, rss.get('VmHWM', 0) // 1024,
                                   rss2.get('VmRSS', 0) // 1024), flush=True)
            self.assertEqual(errors, [], '\n'.join(errors[:30]))
            self.assertEqual(mism, 0)
            for w, st in enumerate(ws):
                self.assertGreater(st['files'], 0, 'writer %d wrote nothing' % w)
            self.assertGreater(reads, 0)
            self.assertGreater(ctl['verify'], 0, 'verify never ran during the load')

    def supervise(self, m, board, children, t0):
        """Run until SECONDS pass, then stop the workers. Returns None, or a hang report."""
        stopping_since = None
        while True:
            now = time.monotonic()
            if stopping_since is None and now - t0 >= SECONDS:
                board.stop()
                stopping_since = now
            done = [c.poll() for c in children]
            if all(done):
                return None
            if stopping_since is None and any(c.status is not None and
                                              'exc' in (c.result or {}) for c in children):
                board.stop()           # a worker failed: stop the others, report it
                stopping_since = now
            if not ckfs.pid_alive(m.pid):
                board.stop()
                return 'the daemon died during the run' + m.log_tail(100)
            for slot in range(board.n):
                t, pid, what = board.read(slot)
                if t and now - t > HANG:
                    return self.hang_report(m, board, slot, pid, what, now - t)
            time.sleep(0.2)

    def hang_report(self, m, board, slot, pid, what, age):
        parts = ['HANG: "%s" (pid %d) has not returned after %.0f s (CKPTFS_TORTURE_HANG=%g)' %
                 (what, pid, age, HANG)]
        for s in range(board.n):
            t, p, w = board.read(s)
            if t:
                parts.append('  also in progress: "%s" for %.0f s' % (w, time.monotonic() - t))
        head = '\n'.join(parts)
        parts.append(dump_process(pid, 'stuck worker'))
        for c in glob.glob('/proc/%d/task/*/children' % pid):
            for cp in read_text(c).split():
                parts.append(dump_process(int(cp), 'its child %s' % read_text(
                    '/proc/%s/cmdline' % cp).replace('\0', ' ')))
        parts.append(dump_process(m.pid, 'daemon'))
        parts.append(gdb_backtrace(m.pid))
        parts.append(m.log_tail(40))
        sys.stderr.write('\n'.join(parts) + '\n')
        return head + '\n(kernel stacks, gdb backtraces and the daemon log: on stderr above)'


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT',
                                                         str(int(SECONDS) + 900))), exit=True)
    unittest.main(verbosity=2)
