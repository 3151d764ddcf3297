#!/usr/bin/python3
"""What a user waits for after a crash (issue 22): a Megatron step of --size-mib of bf16 weights
is saved through ckptfs and made durable, the daemon is killed (SIGKILL: no clean unmount), and
then, timed separately:

  1. remount: `ckptfs STORE MNT` until the mount is ready (recovery of the killed mount runs
     before it returns);
  2. resume: in a fresh /usr/bin/python3 with the page cache dropped, read the tracker
     `latest_checkpointed_iteration.txt` and torch.load the step it names (what Megatron's
     load_checkpoint does: read_metadata, then torch.load);
and the same torch.load of the same bytes written directly to the backing disk, cold, in a
fresh process, alternating which goes first. Also end to end, what the user waits for: from the
remount's start until the resuming process (started as soon as the mount returns) has exited
with the weights loaded, its interpreter's start and `import torch` included, against the
direct process's own start to exit. The mount's check of the newest step runs while that
process starts (fs/steps/steps.c start_checker). Also what the daemon read from the disk from
its start to the resume's end (/proc/PID/io read_bytes) over the step's stored size: 1 when the
check and the resume share each chunk's read (issue 45), 2 when each reads it. And the FUSE
floor, the same way: libfuse's passthrough_ll example (bench_small.build_passthrough) mounted
over the directory of the direct files, -o default_permissions and a 4 MiB read-ahead as ckptfs
mounts itself, and the same fresh resuming process reading through it, from the mount's start
to the process's exit: what a restart through a file system that does nothing but pass reads to
the disk costs here. The three take turns going first. A benchmark, not a test: it prints
figures.

Before each cold phase the whole page cache is dropped: a restart on a fresh node. With
--same-node only the checkpoint's bytes are evicted (the direct file and the store's chunk
files, POSIX_FADV_DONTNEED) and the interpreter and torch's libraries stay cached, as when a
crashed job restarts on the nodes it ran on.

Run: scripts/bench.sh --restore [--size-mib 2048] [--reps 3] [--same-node]
(root: drops the page cache)
"""

import sys

sys.dont_write_bytecode = True

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from bench_io import drop_caches, page_reporting_off  # noqa: E402
from bench_small import (FLOOR_READ_AHEAD_KB, build_passthrough,  # noqa: E402
                         passthrough_mount)

PY = '/usr/bin/python3'
TRACKER = 'latest_checkpointed_iteration.txt'

# Runs in a fresh process: save (bench_io.make_state's bf16 32 MiB tensors, seed 0, then
# fsync) or resume.
WORKER = r'''
import json, os, sys, time, torch
sys.path.insert(0, sys.argv[4])
from bench_io import make_state
mode, root, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == 'save':
    sd = make_state(mib)
    d = os.path.join(root, 'iter_0000100', 'mp_rank_00')
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'model_optim_rng.pt'), 'wb') as f:
        torch.save({'model': sd, 'iteration': 100}, f)
        f.flush()
        os.fsync(f.fileno())
    with open(os.path.join(root, 'latest_checkpointed_iteration.txt'), 'w') as f:
        f.write('100')
        f.flush()
        os.fsync(f.fileno())
else:
    t0 = time.perf_counter()
    with open(os.path.join(root, 'latest_checkpointed_iteration.txt')) as f:
        it = int(f.read().strip())
    sd = torch.load(os.path.join(root, 'iter_%07d' % it, 'mp_rank_00', 'model_optim_rng.pt'))
    t1 = time.perf_counter()
    assert sd['iteration'] == it, sd['iteration']
    print(json.dumps({'resume_s': t1 - t0, 'iteration': it,
                      'bytes': sum(t.numel() * t.element_size() for t in sd['model'].values())}))
'''


def worker(mode, root, mib):
    """Run WORKER in a fresh process; for a resume, its JSON with 'wall_s' (start to exit)."""
    t = time.perf_counter()
    p = subprocess.run([PY, '-c', WORKER, mode, root, str(mib), HERE], capture_output=True,
                       text=True, timeout=1800)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit('worker %s %s failed:\n%s' % (mode, root, p.stderr))
    if mode != 'resume':
        return None
    r = json.loads(p.stdout)
    r['wall_s'] = wall
    return r


def daemon_read_bytes(pid):
    """What process pid had the block layer read, bytes (/proc/PID/io read_bytes)."""
    with open('/proc/%d/io' % pid) as f:
        for line in f:
            if line.startswith('read_bytes:'):
                return int(line.split()[1])
    raise SystemExit('no read_bytes in /proc/%d/io' % pid)


def evict(paths):
    """Drop the page cache of each file in paths (written back first)."""
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except FileNotFoundError:
            continue  # a chunk file removed meanwhile
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def make_cold(same_node, direct_root, store):
    if not same_node:
        drop_caches()
        return
    files = [os.path.join(dp, n) for top in (direct_root, os.path.join(store, 'chunks'))
             for dp, _, fn in os.walk(top) for n in fn]
    evict(files)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--size-mib', type=int, default=2048)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--same-node', action='store_true',
                    help='evict only the checkpoint\'s bytes, not the libraries\'')
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit('bench_restore: run as root (it drops the page cache)')
    print(page_reporting_off())
    pt_base = tempfile.mkdtemp(prefix='ckptfs-bench-direct-', dir=ckfs.test_tmp_root())
    direct_root = os.path.join(pt_base, 'src')     # passthrough_ll serves this directory
    os.makedirs(direct_root)
    rows = {'remount_s': [], 'resume_s': [], 'direct_load_s': [], 'end_to_end_s': [],
            'direct_wall_s': [], 'read_ratio': [], 'pt_resume_s': [], 'pt_end_to_end_s': []}
    nbytes = 0
    try:
        pt = build_passthrough(pt_base)
        worker('save', direct_root, a.size_mib)
        with ckfs.Mount() as m:
            worker('save', m.mnt, a.size_mib)
            sides = ('direct', 'ckptfs') + (('passthrough_ll',) if pt else ())
            for rep in range(a.reps):
                order = sides[rep % len(sides):] + sides[:rep % len(sides)]
                for which in order:
                    make_cold(a.same_node, direct_root, m.store)
                    if which == 'passthrough_ll':
                        t = time.perf_counter()
                        with passthrough_mount(pt_base, pt, opts=('default_permissions',),
                                               read_ahead_kb=FLOOR_READ_AHEAD_KB) as pt_mnt:
                            r = worker('resume', pt_mnt, a.size_mib)
                            rows['pt_end_to_end_s'].append(time.perf_counter() - t)
                            rows['pt_resume_s'].append(r['resume_s'])
                    elif which == 'direct':
                        r = worker('resume', direct_root, a.size_mib)
                        rows['direct_load_s'].append(r['resume_s'])
                        rows['direct_wall_s'].append(r['wall_s'])
                    else:
                        m.kill_daemon()  # SIGKILL: the next mount recovers
                        make_cold(a.same_node, direct_root, m.store)
                        t = time.perf_counter()
                        m.start()
                        rows['remount_s'].append(time.perf_counter() - t)
                        r = worker('resume', m.mnt, a.size_mib)  # at once, as a restart does
                        rows['end_to_end_s'].append(time.perf_counter() - t)
                        rows['resume_s'].append(r['resume_s'])
                        rows['read_ratio'].append(daemon_read_bytes(m.pid) /
                                                  ckfs.chunk_bytes(m.store))
                        nbytes = r['bytes']
                    if r['iteration'] != 100:
                        raise SystemExit('resumed onto iteration %d, not 100' % r['iteration'])
    finally:
        shutil.rmtree(pt_base, ignore_errors=True)
    print('restore after a crash: %d MiB of bf16 weights (%d tensor bytes), %d reps, '
          'median (min-max), %s' % (a.size_mib, nbytes, a.reps,
                                    'same node: only the checkpoint evicted' if a.same_node
                                    else 'fresh node: page cache dropped'))
    print('| phase | seconds | GB/s of tensors |')
    print('|---|---:|---:|')
    for k, label in (('remount_s', 'remount after SIGKILL (recovery)'),
                     ('resume_s', 'tracker + torch.load through ckptfs, cold'),
                     ('direct_load_s', 'torch.load from the disk directly, cold'),
                     ('pt_resume_s', 'tracker + torch.load through passthrough_ll, cold'),
                     ('end_to_end_s', 'end to end: remount, then a fresh resuming process'),
                     ('direct_wall_s', 'end to end: a fresh process loading directly'),
                     ('pt_end_to_end_s', 'end to end: passthrough_ll mounted, then a fresh '
                      'resuming process')):
        v = rows[k]
        if not v:
            continue
        rate = '%.2f' % (nbytes / statistics.median(v) / 1e9) if k in (
            'resume_s', 'direct_load_s', 'pt_resume_s') else ''
        print('| %s | %.2f (%.2f-%.2f) | %s |' % (label, statistics.median(v), min(v), max(v),
                                                 rate))
    total = statistics.median(rows['remount_s']) + statistics.median(rows['resume_s'])
    print('crash to weights in memory: %.2f s (remount + resume), direct load alone %.2f s'
          % (total, statistics.median(rows['direct_load_s'])))
    print('crash to weights, end to end (the process\'s start and import torch included): '
          '%.2f s through ckptfs, %.2f s direct' % (statistics.median(rows['end_to_end_s']),
                                                   statistics.median(rows['direct_wall_s'])))
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    print('whole restore, ckptfs / direct: %.2fx (bar 1.1x)' % (med['end_to_end_s'] /
                                                               med['direct_wall_s']))
    if 'pt_end_to_end_s' in med:
        print('whole restore, passthrough_ll / direct: %.2fx (the FUSE floor); ckptfs / '
              'passthrough_ll: %.2fx; the load alone, ckptfs / passthrough_ll: %.2fx'
              % (med['pt_end_to_end_s'] / med['direct_wall_s'],
                 med['end_to_end_s'] / med['pt_end_to_end_s'],
                 med['resume_s'] / med['pt_resume_s']))
    print('daemon read_bytes from its start to the resume\'s end / stored bytes: %s' %
          ', '.join('%.2f' % x for x in rows['read_ratio']))


if __name__ == '__main__':
    main()
