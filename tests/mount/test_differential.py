#!/usr/bin/python3
"""Differential random-operation test: the same seeded sequence of operations is applied to a
plain temporary directory and to a ckptfs mount; every result and errno must match, and the two
trees must be identical byte for byte (read() and mmap), before and after a remount.

A second run (test_io_modes_and_holes, CKPTFS_IO_OPS ops, default 1500) writes through every
I/O interface a trainer may use, chosen per write: pwrite, a MAP_SHARED mapping, O_DIRECT
(4 KiB-aligned), Linux AIO and io_uring (tests/mount/iomode.c, IOMODE_BIN), and adds holes and
huge offsets (issue 19): fallocate PUNCH_HOLE and ZERO_RANGE, writes at 2, 16 and 256 GiB. A
file past BIG bytes is compared on windows (its first and last 8 MiB and 8 MiB around each far
offset), where the ops that write into such a file land.

Environment: CKPTFS_SEED (default 1234), CKPTFS_OPS (default 3000), CKPTFS_IO_OPS (1500),
CKPTFS_DIFF_SELFTEST=1 runs both sides on plain directories (checks the harness itself).

Run: /usr/bin/python3 tests/mount/test_differential.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import hashlib  # noqa: E402
import mmap  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from posixbase import ename  # noqa: E402

SEED = int(os.environ.get('CKPTFS_SEED', '1234'))
OPS = int(os.environ.get('CKPTFS_OPS', '3000'))
IO_OPS = int(os.environ.get('CKPTFS_IO_OPS', '1500'))
SELFTEST = os.environ.get('CKPTFS_DIFF_SELFTEST') == '1'
MiB = 1 << 20

NAMES = ['a', 'b', 'c', 'd', 'ckpt.pt', 'x.tmp', 'iter_0000001', 'latest']
FILE_MODES = [0o644, 0o600, 0o400, 0o755, 0o444, 0o640]
DIR_MODES = [0o755, 0o700, 0o555, 0o750]

# op name -> weight
WEIGHTS = {
    'create': 12, 'write': 16, 'append': 6, 'truncate': 5, 'rename': 9, 'unlink': 5,
    'mkdir': 7, 'rmdir': 4, 'symlink': 3, 'chmod': 4, 'open_unlink_read': 3, 'mmap_read': 4,
    'read': 6, 'stat': 4, 'readdir': 3, 'readlink': 1, 'fsync': 2, 'write_open_rename': 3,
    'replace_by_rename': 3,
}


def sha(b):
    return hashlib.sha1(b).hexdigest()[:16]


# files past BIG bytes (grown by a far write) are read on windows, not whole
BIG = 64 * MiB
WIN = 8 * MiB
FAR = [1 << 31, 1 << 34, 1 << 38]


def windows(size):
    """[(start, end)] of a file of size bytes to read: all of it, or for a file past BIG its
    first and last WIN bytes and WIN around each FAR offset below size, merged."""
    if size <= BIG:
        return [(0, size)] if size else []
    w = sorted([(0, WIN), (size - WIN, size)] +
               [(b - WIN // 2, min(size, b + WIN // 2)) for b in FAR if b < size])
    out = []
    for a, b in w:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def read_all_fd(fd):
    out = []
    w = windows(os.fstat(fd).st_size)
    if not w:
        os.pread(fd, 1, 0)      # an empty file reads b''; a directory raises EISDIR
    for a, b in w:
        off = a
        while off < b:
            chunk = os.pread(fd, min(MiB, b - off), off)
            if not chunk:
                break
            out.append(chunk)
            off += len(chunk)
        if b < a or off < b:
            break
    return b''.join(out)


def mmap_all_fd(fd):
    out = []
    for a, b in windows(os.fstat(fd).st_size):
        base = a - a % mmap.ALLOCATIONGRANULARITY
        m = mmap.mmap(fd, b - base, mmap.MAP_SHARED, mmap.PROT_READ, offset=base)
        try:
            out.append(m[a - base:])
        finally:
            m.close()
    return b''.join(out)


FALLOC_FL_KEEP_SIZE = ckfs.FALLOC_FL_KEEP_SIZE
FALLOC_FL_PUNCH_HOLE = ckfs.FALLOC_FL_PUNCH_HOLE
FALLOC_FL_ZERO_RANGE = ckfs.FALLOC_FL_ZERO_RANGE
fallocate = ckfs.fallocate


def iomode_bin():
    b = os.environ.get('IOMODE_BIN') or os.path.join(
        os.path.dirname(ckfs.ckptfs_bin()), '..', 'tests', 'mount', 'iomode')
    if not os.access(b, os.X_OK):
        raise ckfs.MountError('iomode helper %r is missing (build it, or set IOMODE_BIN)' % b)
    return b


def write_mode(path, fd, data, off, mode):
    """Write data at off of the open file fd (path) through mode; returns the size after."""
    if mode == 'mmap' and data:
        end = off + len(data)
        if os.fstat(fd).st_size < end:
            os.ftruncate(fd, end)       # a mapping cannot grow the file
        base = off - off % mmap.ALLOCATIONGRANULARITY
        m = mmap.mmap(fd, end - base, mmap.MAP_SHARED, offset=base)
        try:
            m[off - base:end - base] = data
            m.flush()
        finally:
            m.close()
    elif mode == 'odirect' and len(data) >= 4096:
        # O_DIRECT wants offset, length and buffer aligned: 4 KiB, the data cut to whole blocks
        off -= off % 4096
        n = len(data) - len(data) % 4096
        buf = mmap.mmap(-1, n)          # page-aligned
        buf[:] = data[:n]
        dfd = os.open(path, os.O_WRONLY | os.O_DIRECT)
        try:
            done = 0
            while done < n:
                done += os.pwrite(dfd, memoryview(buf)[done:], off + done)
        finally:
            os.close(dfd)
            buf.close()
    elif mode in ('aio', 'uring'):
        r = subprocess.run([iomode_bin(), mode, path, str(off)], input=data,
                           stdout=subprocess.PIPE, timeout=60)
        word, val = r.stdout.decode().split()
        if word == 'err':
            raise OSError(int(val), os.strerror(int(val)))
    else:
        write_all(fd, data, off)
    return os.fstat(fd).st_size


def write_all(fd, data, off=None):
    mv = memoryview(data)
    while mv:
        n = os.write(fd, mv) if off is None else os.pwrite(fd, mv, off)
        if off is not None:
            off += n
        mv = mv[n:]


# -- applying one op to one root ----------------------------------------------------------------

def apply(root, op):
    """Apply op (a tuple) under root; return a comparable result: ('ok', value) / ('err', name)."""
    kind = op[0]

    def P(rel):
        return os.path.join(root, rel)

    try:
        if kind == 'create':
            _, rel, flags, mode, data = op
            fd = os.open(P(rel), os.O_CREAT | os.O_WRONLY | flags, mode)
            try:
                write_all(fd, data)
                return ('ok', os.fstat(fd).st_size)
            finally:
                os.close(fd)
        if kind == 'write':
            _, rel, where, data = op[:4]
            mode = op[4] if len(op) > 4 else 'pwrite'
            fd = os.open(P(rel), os.O_RDWR)
            try:
                size = os.fstat(fd).st_size
                off = {'start': 0, 'end': size}.get(where[0])
                if off is None and where[0] == 'far':
                    off = where[1]
                elif off is None and where[0] == 'inside':
                    # inside a file past BIG: in its first window, where it is compared
                    off = int(where[1] * (size if size <= BIG else WIN - len(data)))
                elif off is None:
                    off = size + where[1]
                return ('ok', write_mode(P(rel), fd, data, max(off, 0), mode))
            finally:
                os.close(fd)
        if kind in ('punch', 'zero_range'):
            _, rel, frac, length, keep = op
            fd = os.open(P(rel), os.O_RDWR)
            try:
                size = os.fstat(fd).st_size
                off = int(frac * min(size, WIN))
                mode = (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE if kind == 'punch' else
                        FALLOC_FL_ZERO_RANGE | (FALLOC_FL_KEEP_SIZE if keep else 0))
                fallocate(fd, mode, off, length)
                return ('ok', os.fstat(fd).st_size)
            finally:
                os.close(fd)
        if kind == 'append':
            _, rel, data = op
            fd = os.open(P(rel), os.O_WRONLY | os.O_APPEND)
            try:
                write_all(fd, data)
                return ('ok', os.fstat(fd).st_size)
            finally:
                os.close(fd)
        if kind == 'truncate':
            _, rel, how, n = op
            size = os.stat(P(rel)).st_size
            new = {'zero': 0, 'shrink': int(size * n), 'grow': size + int(n)}[how]
            os.truncate(P(rel), new)
            return ('ok', os.stat(P(rel)).st_size)
        if kind == 'rename':
            _, src, dst = op
            os.rename(P(src), P(dst))
            return ('ok', None)
        if kind == 'unlink':
            os.unlink(P(op[1]))
            return ('ok', None)
        if kind == 'mkdir':
            os.mkdir(P(op[1]), op[2])
            return ('ok', stat.S_IMODE(os.stat(P(op[1])).st_mode))
        if kind == 'rmdir':
            os.rmdir(P(op[1]))
            return ('ok', None)
        if kind == 'symlink':
            os.symlink(op[2], P(op[1]))
            return ('ok', os.readlink(P(op[1])))
        if kind == 'chmod':
            os.chmod(P(op[1]), op[2])
            return ('ok', stat.S_IMODE(os.stat(P(op[1])).st_mode))
        if kind == 'open_unlink_read':
            fd = os.open(P(op[1]), os.O_RDONLY)
            try:
                os.unlink(P(op[1]))
                a = read_all_fd(fd)
                b = mmap_all_fd(fd)
                return ('ok', (len(a), sha(a), sha(b), os.path.lexists(P(op[1]))))
            finally:
                os.close(fd)
        if kind == 'mmap_read':
            fd = os.open(P(op[1]), os.O_RDONLY)
            try:
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    return ('ok', 'a directory')    # its st_size is the filesystem's choice
                b = mmap_all_fd(fd)
                return ('ok', (len(b), sha(b)))
            finally:
                os.close(fd)
        if kind == 'read':
            fd = os.open(P(op[1]), os.O_RDONLY)
            try:
                b = read_all_fd(fd)
                return ('ok', (len(b), sha(b)))
            finally:
                os.close(fd)
        if kind == 'stat':
            st = os.lstat(P(op[1]))
            isdir = stat.S_ISDIR(st.st_mode)
            return ('ok', (st.st_mode, None if isdir else st.st_size,
                           None if isdir else st.st_nlink))
        if kind == 'readdir':
            return ('ok', sorted(os.listdir(P(op[1]))))
        if kind == 'readlink':
            return ('ok', os.readlink(P(op[1])))
        if kind == 'fsync':
            fd = os.open(P(op[1]), os.O_RDONLY)
            try:
                os.fsync(fd)
                return ('ok', None)
            finally:
                os.close(fd)
        if kind == 'write_open_rename':
            _, src, dst, data = op
            fd = os.open(P(src), os.O_WRONLY | os.O_APPEND)
            try:
                try:
                    os.rename(P(src), P(dst))
                    r = 'renamed'
                except OSError as e:
                    r = ename(e.errno)
                write_all(fd, data)
                return ('ok', (r, os.fstat(fd).st_size))
            finally:
                os.close(fd)
        if kind == 'replace_by_rename':
            _, tmp, dst, data = op
            fd = os.open(P(tmp), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(P(tmp), P(dst))
            return ('ok', None)
        raise AssertionError('unknown op %r' % (kind,))
    except OSError as e:
        return ('err', ename(e.errno))


# -- generating ops from the plain side's state -------------------------------------------------

def scan(root):
    """[(relpath, 'f'|'d'|'l')] under root, depth-first."""
    out = []
    for dp, dn, fn in os.walk(root):
        for n in dn + fn:
            q = os.path.join(dp, n)
            st = os.lstat(q)
            t = 'd' if stat.S_ISDIR(st.st_mode) else 'l' if stat.S_ISLNK(st.st_mode) else 'f'
            out.append((os.path.relpath(q, root), t))
    return out


IO_MODES = ['pwrite', 'mmap', 'odirect', 'aio', 'uring']
IO_WEIGHTS = dict(WEIGHTS, punch=4, zero_range=3, far_write=2)


class Gen:
    def __init__(self, seed, io=False):
        self.r = random.Random(seed)
        self.n = 0
        self.io = io            # I/O modes per write, holes and far offsets

    def data(self):
        r = self.r
        self.n += 1
        x = r.random()
        if x < 0.06:
            n = 0
        elif x < 0.70:
            n = r.randrange(1, 8192)
        elif x < 0.95:
            n = r.randrange(8192, 256 * 1024)
        else:
            n = r.randrange(MiB, 5 * MiB // 2)
        kind = r.random()
        if kind < 0.6:
            return ckfs.content('%d-%d' % (SEED, self.n), n)
        if kind < 0.8:
            return bytes(n)
        blk = ckfs.content('blk-%d' % r.randrange(4), r.choice([1, 7, 4096, 65536]))
        return (blk * (n // len(blk) + 1))[:n]

    def rand_path(self, ents):
        r = self.r
        dirs = [p for p, t in ents if t == 'd']
        if dirs and r.random() < 0.6:
            return os.path.join(r.choice(dirs), r.choice(NAMES))
        depth = r.choice([1, 1, 2, 3])
        return os.path.join(*[r.choice(NAMES) for _ in range(depth)])

    def pick(self, ents, types, p_random=0.1):
        """An existing entry of one of types, or (sometimes / if none) a random path."""
        c = [p for p, t in ents if t in types]
        if not c or self.r.random() < p_random:
            return self.rand_path(ents)
        return self.r.choice(c)

    def any_path(self, ents):
        return self.pick(ents, 'fdl', 0.3)

    def next(self, ents):
        r = self.r
        w = IO_WEIGHTS if self.io else WEIGHTS
        kind = r.choices(list(w), weights=list(w.values()))[0]
        if kind == 'far_write':
            d = ckfs.content('far-%d' % r.randrange(1 << 20), r.randrange(1, 64 * 1024))
            return ('write', self.pick(ents, 'f'), ('far', r.choice(FAR) + r.randrange(MiB)),
                    d, r.choice(IO_MODES))
        if kind in ('punch', 'zero_range'):
            return (kind, self.pick(ents, 'f'), r.random(), r.randrange(1, 3 * MiB),
                    r.random() < 0.5)
        if kind == 'create':
            flags = 0
            for f, pr in ((os.O_TRUNC, 0.5), (os.O_EXCL, 0.15), (os.O_APPEND, 0.15)):
                if r.random() < pr:
                    flags |= f
            return (kind, self.pick(ents, 'f', 0.5), flags, r.choice(FILE_MODES), self.data())
        if kind == 'write':
            where = r.choice([('start',), ('end',), ('inside', r.random()), ('inside', r.random()),
                              ('beyond', r.randrange(1, 3 * MiB))])
            if self.io:
                return (kind, self.pick(ents, 'f'), where, self.data(), r.choice(IO_MODES))
            return (kind, self.pick(ents, 'f'), where, self.data())
        if kind == 'append':
            return (kind, self.pick(ents, 'f'), self.data())
        if kind == 'truncate':
            how = r.choice(['zero', 'shrink', 'grow'])
            n = r.random() if how == 'shrink' else r.randrange(0, 3 * MiB)
            return (kind, self.pick(ents, 'f'), how, n)
        if kind == 'rename':
            src = self.any_path(ents)
            dst = self.any_path(ents) if r.random() < 0.4 else self.rand_path(ents)
            return (kind, src, dst)
        if kind == 'unlink':
            return (kind, self.pick(ents, 'fl', 0.2))
        if kind == 'mkdir':
            return (kind, self.rand_path(ents), r.choice(DIR_MODES))
        if kind == 'rmdir':
            return (kind, self.pick(ents, 'd', 0.2))
        if kind == 'symlink':
            # targets stay inside the tree (never '..') or are absolute and dangling
            tgt = r.choice([r.choice(NAMES), self.any_path(ents), '/nonexistent/' + r.choice(NAMES),
                            os.path.join(r.choice(NAMES), r.choice(NAMES))])
            return (kind, self.rand_path(ents), tgt)
        if kind == 'chmod':
            path = self.pick(ents, 'fd', 0.1)
            isdir = any(p == path and t == 'd' for p, t in ents)
            return (kind, path, r.choice(DIR_MODES if isdir else FILE_MODES))
        if kind in ('open_unlink_read', 'mmap_read', 'read', 'fsync'):
            return (kind, self.pick(ents, 'f'))
        if kind == 'stat':
            return (kind, self.any_path(ents))
        if kind == 'readdir':
            return (kind, self.pick(ents, 'd', 0.2))
        if kind == 'readlink':
            return (kind, self.pick(ents, 'l', 0.2))
        if kind == 'write_open_rename':
            return (kind, self.pick(ents, 'f'), self.rand_path(ents), self.data())
        if kind == 'replace_by_rename':
            dst = self.pick(ents, 'f', 0.3)
            return (kind, dst + '.tmp', dst, self.data())
        raise AssertionError(kind)


def show(op):
    """op for messages: data as (len, sha)."""
    return tuple(('<%d bytes %s>' % (len(x), sha(x))) if isinstance(x, (bytes, bytearray)) else x
                 for x in op)


# -- comparing trees ----------------------------------------------------------------------------

def tree(root):
    """{relpath: description} of everything under root; file content by read() and by mmap."""
    out = {}
    for rel, t in scan(root):
        q = os.path.join(root, rel)
        st = os.lstat(q)
        if t == 'd':
            out[rel] = ('dir', st.st_mode, st.st_uid, st.st_gid)
        elif t == 'l':
            out[rel] = ('symlink', os.readlink(q), st.st_size, st.st_uid, st.st_gid)
        else:
            fd = os.open(q, os.O_RDONLY)
            try:
                a = read_all_fd(fd)
                b = mmap_all_fd(fd)
            finally:
                os.close(fd)
            out[rel] = ('file', st.st_mode, st.st_size, st.st_nlink, st.st_uid, st.st_gid,
                        'read:' + sha(a), 'mmap:' + sha(b))
    return out


def tree_diff(a, b):
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append('%s: plain %r, ckptfs %r' % (k, a.get(k), b.get(k)))
    return out


class DifferentialTest(unittest.TestCase):

    def test_random_ops_match_plain_directory(self):
        self.differential(OPS, io=False)

    def test_io_modes_and_holes(self):
        self.differential(IO_OPS, io=True)

    def differential(self, ops, io):
        os.umask(0o022)
        plain = ckfs.PlainDir()
        side = ckfs.PlainDir() if SELFTEST else ckfs.Mount(opts=('layout=none',))
        try:
            if not SELFTEST:
                side.start()
            self.run_ops(plain, side, ops, io)
            # unmount, remount, compare again
            side.remount()
            self.compare(plain.path('t'), side.path('t'), 'after the final remount')
            side.unmount()
        finally:
            side.close()
            plain.close()

    def compare(self, a, b, when):
        d = tree_diff(tree(a), tree(b))
        self.assertEqual(d[:20], [], 'trees differ %s (%d differences, seed %d)' %
                         (when, len(d), SEED))

    def run_ops(self, plain, side, ops, io):
        a, b = plain.path('t'), side.path('t')
        os.mkdir(a)
        os.mkdir(b)
        g = Gen(SEED, io)
        hist = []
        counts = {}
        t0 = time.monotonic()
        for i in range(ops):
            op = g.next(scan(a))
            ra = apply(a, op)
            rb = apply(b, op)
            hist.append('%5d %r -> %r' % (i, show(op), ra))
            counts[op[0]] = counts.get(op[0], 0) + (ra[0] == 'ok')
            if op[0] == 'write' and len(op) > 4 and ra[0] == 'ok':
                key = 'far write' if op[2][0] == 'far' else 'write via ' + op[4]
                counts[key] = counts.get(key, 0) + 1
            if ra != rb:
                self.fail('op %d (seed %d) differs:\n  op     %r\n  plain  %r\n  ckptfs %r\n'
                          'last ops:\n%s' % (i, SEED, show(op), ra, rb, '\n'.join(hist[-25:])))
            if i == ops // 2:
                self.compare(a, b, 'after %d ops' % (i + 1))
                side.remount()
                self.compare(a, b, 'after %d ops and a remount' % (i + 1))
        self.compare(a, b, 'after %d ops' % ops)
        if io:
            # the run did what it is for: every interface wrote, and far writes made huge files
            for key in ['write via ' + m for m in IO_MODES] + ['far write', 'punch',
                                                               'zero_range']:
                self.assertGreater(counts.get(key, 0), 0, '%s never succeeded' % key)
        n = len(scan(a))
        sys.stderr.write('\n  [seed %d: %d ops in %.1f s, %d entries at the end; successful: %s] ' %
                         (SEED, ops, time.monotonic() - t0, n,
                          ', '.join('%s %d' % kv for kv in sorted(counts.items()))))


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
