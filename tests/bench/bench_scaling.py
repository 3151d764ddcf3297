#!/usr/bin/python3
"""Scaling benchmark (issue 22; opt-in: scripts/bench.sh --scaling): what one operation costs
per entry as a store grows, through ckptfs and on the backing disk's ext4 in the same run.

For N in --sizes (default 100 1000 10000), on a fresh mount and a fresh ext4 directory each:
  files in one step: one writer creates N files of 1 KiB in iter_0000001/mp_rank_00/
      (open(O_CREAT) + write + close each), then stat of each, then one listdir;
  steps in the root: N Megatron steps (mkdir iter_X/mp_rank_00, a 1 KiB
      model_optim_rng.pt, the tracker rewritten), written by one process; then `ls` of the root
      (listdir + stat of each entry) and the tracker read (open + read + close), averaged over
      200 reads.
Prints, per operation and N: microseconds per entry through ckptfs, on ext4, and the ratio;
the per-entry cost is flat when it does not grow with N. Each phase runs in a fresh process
(this file run with --worker) so the Python start-up is not
counted and the kernel's caches are what a new process sees.

Usage: /usr/bin/python3 tests/bench/bench_scaling.py [--sizes 100 1000 10000] [--dir DIR]
Environment: CKPTFS_BIN (default build/fs/ckptfs).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402

KIB = b'x' * 1024


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
    return {'create': create / n, 'stat': stat / n, 'readdir': listdir / n}


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
    reps = 200
    t0 = time.perf_counter()
    for _ in range(reps):
        with open(os.path.join(root, 'latest_checkpointed_iteration.txt')) as f:
            got = f.read().strip()
    tracker = time.perf_counter() - t0
    assert got == str(n), (got, n)
    return {'ls root': ls / n, 'tracker read (per read)': tracker / reps}


PHASES = {'files': phase_files, 'steps': phase_steps, 'read': phase_read}


def worker(phase, root, n):
    print(json.dumps(PHASES[phase](root, n)))


def run_phase(phase, root, n):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), '--worker', phase, root,
                        str(n)], capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit('bench_scaling: %s %s n=%d failed:\n%s' % (phase, root, n, p.stderr))
    return json.loads(p.stdout)


def measure(root, n, mount):
    """{'op': seconds per entry} for one size on one target. Each group of phases gets a new
    directory, and nothing is deleted before the run ends: ext4 without a journal skips the
    inodes deleted in the last 30 s when it allocates one (fs/ext4/ialloc.c,
    recently_deleted), which made its own creates up to ten times slower after a cleanup."""
    out = {}
    for k, phases in enumerate((('files',), ('steps', 'read'))):
        d = os.path.join(root, 'n%d-%d' % (n, k))
        m = None
        if mount:
            m = ckfs.Mount(store=os.path.join(d, 'store'), mnt=os.path.join(d, 'mnt')).start()
            target = m.mnt
        else:
            target = os.path.join(d, 'ext4')
            os.makedirs(target)
        try:
            for ph in phases:
                out.update(run_phase(ph, target, n))
        finally:
            if m:
                m.close()
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
    rows = []
    try:
        for n in a.sizes:
            ck = measure(os.path.join(base, 'ck'), n, True)
            ex = measure(os.path.join(base, 'ex'), n, False)
            for op in ck:
                rows.append((op, n, ck[op], ex[op]))
                print('%-24s N=%-6d ckptfs %9.1f us  ext4 %8.1f us  ratio %6.1fx' %
                      (op, n, ck[op] * 1e6, ex[op] * 1e6, ck[op] / ex[op]), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print('\n| operation | N | ckptfs us/entry | ext4 us/entry | ratio |')
    print('|---|---:|---:|---:|---:|')
    for op, n, c, e in sorted(rows, key=lambda r: (r[0], r[1])):
        print('| %s | %d | %.1f | %.1f | %.1fx |' % (op, n, c * 1e6, e * 1e6, c / e))


if __name__ == '__main__':
    main()
