#!/usr/bin/python3
"""Scaling benchmark (issue 22; opt-in: scripts/bench.sh --scaling): what one operation costs
per entry as a store grows, through ckptfs, through libfuse's passthrough_ll example mounted over
the same disk (the FUSE floor: the same requests with nothing behind them but the disk; built
as tests/bench/bench_small.py builds it, 1 s timeouts as ckptfs's) and on the backing disk's
ext4, in the same run.

For N in --sizes (default 100 1000 10000), on a fresh mount and a fresh ext4 directory each:
  files in one step: one writer creates N files of 1 KiB in iter_0000001/mp_rank_00/
      (open(O_CREAT) + write + close each), then stat of each, then one listdir, then the
      tracker read (open + read + close) naming that step, averaged over 50 reads;
  steps in the root: N Megatron steps (mkdir iter_X/mp_rank_00, a 1 KiB
      model_optim_rng.pt, the tracker rewritten), written by one process; then `ls` of the root
      (listdir + stat of each entry) and the tracker read (open + read + close), averaged over
      200 reads.
Prints, per operation and N: microseconds per entry through ckptfs, passthrough_ll and ext4,
and the ratios ckptfs/ext4, passthrough_ll/ext4 (what FUSE itself costs over the disk: a
ratio ckptfs cannot go below with the same round trips) and ckptfs/passthrough_ll (what
ckptfs adds); the per-entry cost is flat when it does not grow with N. Each phase runs in a fresh process
(this file run with --worker) so the Python start-up is not
counted and the kernel's caches are what a new process sees.

Usage: /usr/bin/python3 tests/bench/bench_scaling.py [--sizes 100 1000 10000] [--dir DIR]
Environment: CKPTFS_BIN (default build/fs/ckptfs).
"""

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))
sys.path.insert(0, HERE)

import ckfs  # noqa: E402
from bench_small import build_passthrough, passthrough_mount  # noqa: E402

KIB = b'x' * 1024


def tracker_read(root, reps, want):
    """seconds per read of the tracker (open + read + close), averaged over reps reads, each of
    which must name step want"""
    t0 = time.perf_counter()
    for _ in range(reps):
        with open(os.path.join(root, 'latest_checkpointed_iteration.txt')) as f:
            got = f.read().strip()
        assert got == want, (got, want)
    return (time.perf_counter() - t0) / reps


def phase_files(root, n):
    d = os.path.join(root, 'iter_0000001', 'mp_rank_00')
    os.makedirs(d)
    t0 = time.perf_counter()
    for i in range(n):
        fd = os.open(os.path.join(d, 'f%06d' % i), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, KIB)
        os.close(fd)
    create = time.perf_counter() - t0
    with open(os.path.join(root, 'latest_checkpointed_iteration.txt'), 'w') as f:
        f.write('1')
    t0 = time.perf_counter()
    for i in range(n):
        os.stat(os.path.join(d, 'f%06d' % i))
    stat = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = len(os.listdir(d))
    listdir = time.perf_counter() - t0
    assert got == n, (got, n)
    return {'create': create / n, 'stat': stat / n, 'readdir': listdir / n,
            'tracker read, step of N files (per read)': tracker_read(root, 50, '1')}


def phase_steps(root, n):
    t0 = time.perf_counter()
    for i in range(1, n + 1):
        d = os.path.join(root, 'iter_%07d' % i, 'mp_rank_00')
        os.makedirs(d)
        with open(os.path.join(d, 'model_optim_rng.pt'), 'wb') as f:
            f.write(KIB)
        with open(os.path.join(root, 'latest_checkpointed_iteration.txt'), 'w') as f:
            f.write(str(i))
    save = time.perf_counter() - t0
    return {'save step': save / n}


def phase_read(root, n):
    t0 = time.perf_counter()
    names = os.listdir(root)
    for nm in names:
        os.lstat(os.path.join(root, nm))
    ls = time.perf_counter() - t0
    assert len(names) >= n, (len(names), n)
    return {'ls root': ls / n, 'tracker read (per read)': tracker_read(root, 200, str(n))}


PHASES = {'files': phase_files, 'steps': phase_steps, 'read': phase_read}


def worker(phase, root, n):
    print(json.dumps(PHASES[phase](root, n)))


OPS = {'files': ('create', 'stat', 'readdir', 'tracker read, step of N files (per read)'),
       'steps': ('save step',),
       'read': ('ls root', 'tracker read (per read)')}


def run_phase(phase, root, n, may_fail=False):
    """{'op': seconds per entry} of one phase in a fresh process. A failure ends the bench,
    unless may_fail: then its operations are NaN (the reason printed)."""
    p = subprocess.run([sys.executable, os.path.abspath(__file__), '--worker', phase, root,
                        str(n)], capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        msg = 'bench_scaling: %s %s n=%d failed:\n%s' % (phase, root, n, p.stderr)
        if not may_fail:
            sys.exit(msg)
        print(msg.rstrip().splitlines()[-1] + ' (%s n=%d: no figure)' % (phase, n), flush=True)
        return {op: float('nan') for op in OPS[phase]}
    return json.loads(p.stdout)


def raise_nofile():
    """the limit of open files raised to 2^18 (passthrough_ll keeps one per inode the kernel
    knows, 3 * 10^4 at 10^4 steps: the default soft limit, 1024, made it fail with EBADF), or
    to the hard limit when that cannot be (20,000 in this machine's container)"""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 18, 1 << 18))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def measure(root, n, target, pt=None):
    """{'op': seconds per entry} for one size on one target ('ckptfs', 'passthrough_ll' run
    from the binary pt, or 'ext4'). Each group of phases gets a new directory, and nothing is
    deleted before the run ends: ext4 without a journal skips the inodes deleted in the last
    30 s when it allocates one (fs/ext4/ialloc.c, recently_deleted), which made its own creates
    up to ten times slower after a cleanup."""
    out = {}
    for k, phases in enumerate((('files',), ('steps', 'read'))):
        d = os.path.join(root, 'n%d-%d' % (n, k))
        with contextlib.ExitStack() as stack:
            if target == 'ckptfs':
                m = ckfs.Mount(store=os.path.join(d, 'store'),
                               mnt=os.path.join(d, 'mnt')).start()
                stack.callback(m.close)
                dst = m.mnt
            elif target == 'passthrough_ll':
                dst = stack.enter_context(passthrough_mount(d, pt, preexec_fn=raise_nofile))
            else:
                dst = os.path.join(d, 'ext4')
                os.makedirs(dst)
            # passthrough_ll holds a descriptor for each inode the kernel knows, 3 per step:
            # at 10^4 steps it outruns this machine's limit (20,000, not raisable here)
            for ph in phases:
                out.update(run_phase(ph, dst, n, may_fail=target == 'passthrough_ll'))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--sizes', type=int, nargs='+', default=[100, 1000, 10000])
    ap.add_argument('--dir', default=None, help='scratch directory on the disk to measure '
                    '(default: a temporary directory beside the tests\')')
    ap.add_argument('--worker', nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], a.worker[1], int(a.worker[2]))
        return
    base = tempfile.mkdtemp(prefix='ckptfs-bench-scaling-', dir=a.dir)
    tools = tempfile.mkdtemp(prefix='ckptfs-bench-pt-')
    pt = build_passthrough(tools)
    rows = []
    try:
        for n in a.sizes:
            ck = measure(os.path.join(base, 'ck'), n, 'ckptfs')
            fl = measure(os.path.join(base, 'pt'), n, 'passthrough_ll', pt) if pt else None
            ex = measure(os.path.join(base, 'ex'), n, 'ext4')
            for op in ck:
                f = fl[op] if fl else float('nan')
                rows.append((op, n, ck[op], f, ex[op]))
                print('%-24s N=%-6d ckptfs %9.1f us  passthrough_ll %9.1f us  ext4 %8.1f us  '
                      'ckptfs/ext4 %6.1fx  passthrough_ll/ext4 %6.1fx' %
                      (op, n, ck[op] * 1e6, f * 1e6, ex[op] * 1e6, ck[op] / ex[op],
                       f / ex[op]), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(tools, ignore_errors=True)
    print('\n| operation | N | ckptfs us/entry | passthrough_ll us/entry | ext4 us/entry | '
          'ckptfs/ext4 | passthrough_ll/ext4 | ckptfs/passthrough_ll |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|')
    for op, n, c, f, e in sorted(rows, key=lambda r: (r[0], r[1])):
        print('| %s | %d | %.1f | %.1f | %.1f | %.1fx | %.1fx | %.2fx |' %
              (op, n, c * 1e6, f * 1e6, e * 1e6, c / e, f / e, c / f))


if __name__ == '__main__':
    main()
