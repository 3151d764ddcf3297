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
fresh process, alternating which goes first. A benchmark, not a test: it prints figures.

Run: scripts/bench.sh --restore [--size-mib 2048] [--reps 3]   (root: drops the page cache)
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
from bench_io import drop_caches  # noqa: E402

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
    p = subprocess.run([PY, '-c', WORKER, mode, root, str(mib), HERE], capture_output=True,
                       text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit('worker %s %s failed:\n%s' % (mode, root, p.stderr))
    return json.loads(p.stdout) if mode == 'resume' else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--size-mib', type=int, default=2048)
    ap.add_argument('--reps', type=int, default=3)
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit('bench_restore: run as root (it drops the page cache)')
    direct_root = tempfile.mkdtemp(prefix='ckptfs-bench-direct-', dir=ckfs.test_tmp_root())
    rows = {'remount_s': [], 'resume_s': [], 'direct_load_s': []}
    nbytes = 0
    try:
        worker('save', direct_root, a.size_mib)
        with ckfs.Mount() as m:
            worker('save', m.mnt, a.size_mib)
            for rep in range(a.reps):
                m.kill_daemon()  # SIGKILL: the next mount recovers
                drop_caches()
                t = time.perf_counter()
                m.start()
                rows['remount_s'].append(time.perf_counter() - t)
                order = ('direct', 'ckptfs') if rep % 2 == 0 else ('ckptfs', 'direct')
                for which in order:
                    drop_caches()
                    if which == 'direct':
                        r = worker('resume', direct_root, a.size_mib)
                        rows['direct_load_s'].append(r['resume_s'])
                    else:
                        r = worker('resume', m.mnt, a.size_mib)
                        rows['resume_s'].append(r['resume_s'])
                        nbytes = r['bytes']
                    if r['iteration'] != 100:
                        raise SystemExit('resumed onto iteration %d, not 100' % r['iteration'])
    finally:
        shutil.rmtree(direct_root, ignore_errors=True)
    print('restore after a crash: %d MiB of bf16 weights (%d tensor bytes), %d reps, '
          'median (min-max)' % (a.size_mib, nbytes, a.reps))
    print('| phase | seconds | GB/s of tensors |')
    print('|---|---:|---:|')
    for k, label in (('remount_s', 'remount after SIGKILL (recovery)'),
                     ('resume_s', 'tracker + torch.load through ckptfs, cold'),
                     ('direct_load_s', 'torch.load from the disk directly, cold')):
        v = rows[k]
        rate = '' if k == 'remount_s' else '%.2f' % (nbytes / statistics.median(v) / 1e9)
        print('| %s | %.2f (%.2f-%.2f) | %s |' % (label, statistics.median(v), min(v), max(v),
                                                 rate))
    total = statistics.median(rows['remount_s']) + statistics.median(rows['resume_s'])
    print('crash to weights in memory: %.2f s (remount + resume), direct load alone %.2f s'
          % (total, statistics.median(rows['direct_load_s'])))


if __name__ == '__main__':
    main()
