#!/usr/bin/python3
"""Small-files benchmark (issue 22; opt-in: scripts/bench.sh --small-files): how fast one writer
creates small files through ckptfs, against the disk's ext4 and against libfuse's own
passthrough_ll example mounted over the same disk, in the same run.

passthrough_ll is the FUSE baseline: the fewest round trips a FUSE filesystem makes for a
create (lookup, create, write, flush, release) with nothing behind them but the disk, so its
rate is the ceiling for any FUSE filesystem on this machine. It is compiled from the copy
Debian's libfuse3-dev ships (/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c) with its
defaults (`-o cache=auto`, 1 s timeouts, as ckptfs's). It runs twice: as shipped, and with
`-o default_permissions` (passthrough_ll+dp), as ckptfs always runs (the kernel enforces
modes): then each create costs one more round trip, the parent's GETATTR (a CREATE reply marks
the parent's attributes stale, fs/fuse/dir.c `fuse_dir_changed`, and the next walk's
permission check fetches them, `fuse_permission` -> `fuse_perm_getattr`). passthrough_ll+dp
is the ceiling for a FUSE filesystem whose modes the kernel enforces.

Nothing is deleted until the end: ext4 without a journal (this disk) will not reuse an inode
deleted in the last 60 s, or 300 s while its inode table block is dirty (fs/ext4/ialloc.c,
recently_deleted: RECENTCY_MIN and RECENTCY_DIRTY, Theodore Ts'o's "ext4: increase wait time
needed before reuse of deleted inode numbers", 2020), and scanning past them made its own
creates ten times slower (3,448-3,736 files/s after a rep's cleanup, 30,905 before). Run the
bench 5 minutes after anything else deleted many files (75 s was not enough, RESULTS.md).

Each rep, in alternating order, on a new directory or a new mount and store: one fresh
/usr/bin/python3 process creates N files of 1 KiB of random bytes (a new os.urandom each, so
nothing dedups) in iter_0000001/mp_rank_00/, a Megatron step directory: os.open(O_CREAT |
O_WRONLY | O_TRUNC), os.write, os.close, each timed. Prints files/s and microseconds per
open/write/close, median (min-max); for ckptfs also the daemon's CPU per file (/proc/PID/stat)
and, after the writer, the time until every file is committed (the committer drained, read
from the tracker: a tracker read waits for the closes before it).

Usage: /usr/bin/python3 tests/bench/bench_small.py [--files 3000] [--reps 3] [--dir DIR]
Environment: CKPTFS_BIN (default build/fs/ckptfs).
"""

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))
sys.path.insert(0, HERE)

import ckfs  # noqa: E402
from bench_io import machine_line, page_reporting_off, proc_cpu_s  # noqa: E402

PT_SRC = '/usr/share/doc/libfuse3-dev/examples'
NAMES = ('ckptfs', 'passthrough_ll+dp', 'passthrough_ll', 'ext4')   # the table's rows


def worker(d, n):
    os.makedirs(d, exist_ok=True)
    t_open = t_write = t_close = 0.0
    t0 = time.perf_counter()
    for i in range(n):
        a = time.perf_counter()
        fd = os.open(os.path.join(d, 'f%06d' % i), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        b = time.perf_counter()
        os.write(fd, os.urandom(1024))
        c = time.perf_counter()
        os.close(fd)
        e = time.perf_counter()
        t_open += b - a
        t_write += c - b
        t_close += e - c
    total = time.perf_counter() - t0
    print(json.dumps({'files/s': n / total, 'open us': t_open / n * 1e6,
                      'write us': t_write / n * 1e6, 'close us': t_close / n * 1e6}))


def run_worker(root, n):
    d = os.path.join(root, 'iter_0000001', 'mp_rank_00')
    p = subprocess.run(['/usr/bin/python3', os.path.abspath(__file__), '--worker', d, str(n)],
                       capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit('bench_small: the writer failed in %s:\n%s' % (root, p.stderr))
    return json.loads(p.stdout)


def build_passthrough(dst, defines=()):
    """passthrough_ll compiled into dst, or None (with the reason printed) when it cannot be.
    defines: -D flags of libfuse's config.h to add (none for the benchmarks; scripts/xfstests.sh
    adds -DHAVE_FALLOCATE -DHAVE_COPY_FILE_RANGE, as libfuse's own build on Linux does)."""
    src = os.path.join(PT_SRC, 'passthrough_ll.c')
    if not os.path.exists(src):
        print('passthrough_ll: %s is missing (apt-get install libfuse3-dev): no FUSE baseline'
              % src)
        return None
    for f in ('passthrough_ll.c', 'passthrough_helpers.h'):
        shutil.copy(os.path.join(PT_SRC, f), dst)
    cflags = subprocess.run(['pkg-config', '--cflags', '--libs', 'fuse3'], capture_output=True,
                            text=True, check=True).stdout.split()
    out = os.path.join(dst, 'passthrough_ll')
    p = subprocess.run(['cc', '-O2'] + list(defines) +
                       [os.path.join(dst, 'passthrough_ll.c'), '-o', out] + cflags,
                       capture_output=True, text=True)
    if p.returncode != 0:
        print('passthrough_ll: does not compile, no FUSE baseline:\n' + p.stderr)
        return None
    return out


def rep_ext4(base, n):
    return run_worker(os.path.join(base, 'ext4'), n)


@contextlib.contextmanager
def passthrough_mount(base, binary, preexec_fn=None, opts=(), read_ahead_kb=None):
    """binary (build_passthrough's) mounted at base/mnt over base/src, both made, with the
    -o options opts besides source= (e.g. ('default_permissions',)); yields the mount point,
    unmounted on exit. preexec_fn runs in the daemon before it starts. read_ahead_kb: the
    mount's read-ahead (its bdi's read_ahead_kb; the kernel's default, 128 KiB, when None), e.g.
    ckptfs's own 4096 (FS_READ_AHEAD_KB, fs/fuse/fuse_int.h) to compare like with like."""
    src, mnt = os.path.join(base, 'src'), os.path.join(base, 'mnt')
    os.makedirs(src, exist_ok=True)    # may hold the files to serve already
    os.makedirs(mnt, exist_ok=True)
    subprocess.run([binary, '-o', ','.join(('source=' + src,) + tuple(opts)), mnt],
                   check=True, timeout=30, preexec_fn=preexec_fn)
    try:
        if read_ahead_kb:
            st_dev = os.stat(mnt).st_dev
            with open('/sys/class/bdi/%d:%d/read_ahead_kb'
                      % (os.major(st_dev), os.minor(st_dev)), 'w') as f:
                f.write('%d\n' % read_ahead_kb)
        yield mnt
    finally:
        subprocess.run(['fusermount3', '-u', mnt], timeout=60)


def mount_daemon_pid(mnt):
    """the pid of the FUSE daemon serving mnt (the process whose command line names mnt, as
    passthrough_mount starts it), or None"""
    want = os.fsencode(os.path.abspath(mnt))
    for pid in os.listdir('/proc'):
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as f:
                args = f.read().split(b'\0')
        except OSError:
            continue
        if pid.isdigit() and want in args and int(pid) != os.getpid():
            return int(pid)
    return None


FLOOR_READ_AHEAD_KB = 4096  # ckptfs's own mount's (FS_READ_AHEAD_KB, fs/fuse/fuse_int.h)


@contextlib.contextmanager
def floor_mount(base):
    """The FUSE floor of a bench: passthrough_ll built into base and mounted at base/mnt over
    base/src as ckptfs mounts itself (-o default_permissions, its 4 MiB read-ahead); yields the
    mount point, or None when passthrough_ll cannot be built (build_passthrough says why)."""
    binary = build_passthrough(base)
    if not binary:
        yield None
        return
    with passthrough_mount(base, binary, opts=('default_permissions',),
                           read_ahead_kb=FLOOR_READ_AHEAD_KB) as mnt:
        yield mnt


def rep_passthrough(base, n, binary, opts=()):
    with passthrough_mount(base, binary, opts=opts) as mnt:
        return run_worker(mnt, n)


def rep_ckptfs(base, n):
    m = ckfs.Mount(store=os.path.join(base, 'store'), mnt=os.path.join(base, 'mnt')).start()
    try:
        cpu0 = proc_cpu_s(m.pid)
        r = run_worker(m.mnt, n)
        with open(os.path.join(m.mnt, 'latest_checkpointed_iteration.txt'), 'w') as f:
            f.write('1')
        t0 = time.perf_counter()
        with open(os.path.join(m.mnt, 'latest_checkpointed_iteration.txt')) as f:
            got = f.read()
        r['drain s'] = time.perf_counter() - t0
        r['daemon cpu us/file'] = (proc_cpu_s(m.pid) - cpu0) / n * 1e6
        if got != '1':
            sys.exit('bench_small: the step of %d files did not complete (tracker %r)'
                     % (n, got))
        return r
    finally:
        m.close()


def summary(vals):
    return '%.0f (%.0f-%.0f)' % (statistics.median(vals), min(vals), max(vals))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--files', type=int, default=3000)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--dir', default=None, help='scratch directory on the disk to measure')
    ap.add_argument('--worker', nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], int(a.worker[1]))
        return
    base = tempfile.mkdtemp(prefix='ckptfs-bench-small-', dir=a.dir)
    tools = tempfile.mkdtemp(prefix='ckptfs-bench-pt-')
    print(page_reporting_off())
    print(machine_line(base))
    print('%d files of 1 KiB, one writer, %d reps, alternating order' % (a.files, a.reps))
    pt = build_passthrough(tools)
    runs = {name: [] for name in NAMES}
    targets = [('ckptfs', rep_ckptfs), ('ext4', rep_ext4)]
    if pt:
        targets.append(('passthrough_ll', lambda d, n: rep_passthrough(d, n, pt)))
        targets.append(('passthrough_ll+dp',
                        lambda d, n: rep_passthrough(d, n, pt, ('default_permissions',))))
    try:
        for rep in range(a.reps):
            order = targets if rep % 2 == 0 else targets[::-1]
            for name, fn in order:
                d = os.path.join(base, '%s-%d' % (name, rep))
                os.makedirs(d)
                r = fn(d, a.files)
                runs[name].append(r)
                print('rep %d %-15s %s' % (rep + 1, name,
                      '  '.join('%s %.1f' % (k, v) for k, v in r.items())), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(tools, ignore_errors=True)
    print('\n| target | files/s | open us | write us | close us | daemon CPU us/file |')
    print('|---|---:|---:|---:|---:|---:|')
    for name in NAMES:
        rs = runs[name]
        if not rs:
            continue
        cols = [summary([r[k] for r in rs]) for k in ('files/s', 'open us', 'write us',
                                                        'close us')]
        cpu = summary([r['daemon cpu us/file'] for r in rs]) if name == 'ckptfs' else ''
        print('| %s | %s | %s |' % (name, ' | '.join(cols), cpu))
    ck = statistics.median(r['files/s'] for r in runs['ckptfs'])
    for name in NAMES[1:]:
        if runs[name]:
            print('ckptfs / %s: %.2f' % (name, ck / statistics.median(
                r['files/s'] for r in runs[name])))
    print('ckptfs: every file committed %.2f s (median) after the writer\'s last close'
          % statistics.median(r['drain s'] for r in runs['ckptfs']))


if __name__ == '__main__':
    main()
