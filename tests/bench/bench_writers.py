#!/usr/bin/python3
"""Benchmark (not a test; issue 45): several ranks of one node saving and loading at once, as a
node's 8 ranks do, through ckptfs and on the backing disk written directly, in the same run.

For W in --procs (default 1 2 4 8), with --total-mib split evenly over W processes (so every
W moves the same bytes and the figures differ only by concurrency):
  save to durable: W fresh processes (tests/bench/bench_io.py's save worker: torch.save of a
      seeded bf16 state of total/W MiB, each its own seed, into one file each, then an fsync on
      a descriptor opened after the close); timed from the moment all W are told to go (page
      cache dropped first) until the last one's fsync returned;
  cold load: W fresh processes each torch.load one of those files, page cache dropped and, for
      ckptfs, the store remounted first (the mount's check of the newest step is waited for
      before the clock starts: a mount's cost, measured by bench_restore.py), timed the same
      way.
The same saves and loads also through libfuse's passthrough_ll example over a directory of the
same disk (-o default_permissions, 4 MiB read-ahead, as ckptfs mounts itself; built as
bench_small.build_passthrough does, skipped when it cannot be): the FUSE floor, what a file
system that only passes each request to the disk costs W writers here.
Direct, ckptfs and passthrough_ll take turns going first. Printed per W: the seconds,
ckptfs/direct, passthrough_ll/direct, ckptfs/passthrough_ll, logical GB/s, and the daemon's CPU
seconds (user+sys, /proc/PID/stat) per GiB saved (deferred compression included: the bench
waits for it) and per GiB loaded.
The ckptfs files of each W go into a step directory of their own (iter_000000W/, Megatron's
naming) and the tracker then names it, so the step engine sees what a real save looks like.

Usage: scripts/bench.sh --writers [--total-mib 1024] [--procs 1 2 4 8] [--reps 1]
   or: CKPTFS_BIN=build/fs/ckptfs CKPTCTL_BIN=build/tools/ckptctl \\
       /usr/bin/python3 tests/bench/bench_writers.py [same options]
Root is needed (the page cache is dropped). At the end a markdown table for RESULTS.md.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import json

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))
sys.path.insert(0, HERE)
import ckfs      # noqa: E402
import bench_io  # noqa: E402
from bench_small import FLOOR_READ_AHEAD_KB, floor_mount  # noqa: E402

FLOOR = 'passthrough_ll'


def run_many(mode, paths, mib, seeds):
    """Start one bench_io worker per path, wait until every one is ready, drop the page cache,
    tell them all to go; return (wall seconds from go to the end of the last one's timed part,
    [results]). The end is the one each worker stamps (end_mono: its save's fsync or its load
    returned), not its exit: reading the workers' output to the end included each one freeing
    its tensors and tearing the interpreter down (0.43-0.53 s after a save or a load of 1 GiB,
    RESULTS.md "W writers timed to the end of their work, not their exit")."""
    procs = [subprocess.Popen([sys.executable, bench_io.__file__, '--worker', mode, p,
                               '--size-mib', str(mib), '--seed', str(s)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for p, s in zip(paths, seeds)]
    try:
        for p in procs:
            if p.stdout.readline().strip() != 'ready':
                raise RuntimeError(f'bench worker {mode} exited {p.wait()} before ready')
        bench_io.drop_caches()
        t0 = time.monotonic()
        for p in procs:
            p.stdin.write('go\n')
            p.stdin.flush()
        outs = [p.stdout.read() for p in procs]
        for p in procs:
            if p.wait() != 0:
                raise RuntimeError(f'bench worker {mode} exited {p.returncode}')
        res = [json.loads(o.strip().splitlines()[-1]) for o in outs]
        return max(r['end_mono'] for r in res) - t0, res
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--total-mib', type=int, default=1024)
    ap.add_argument('--procs', type=int, nargs='+', default=[1, 2, 4, 8])
    ap.add_argument('--reps', type=int, default=1)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit('bench: run as root (it drops the page cache between runs)')
    print(bench_io.page_reporting_off())
    t_start = time.perf_counter()
    base = os.path.realpath(os.environ.get('CKPTFS_BENCH_DIR',
                                           os.path.join(os.getcwd(), 'output', 'bench')))
    os.makedirs(base, exist_ok=True)
    direct = tempfile.mkdtemp(prefix='direct-', dir=base)
    pt_dir = tempfile.mkdtemp(prefix='passthrough-', dir=base)
    os.environ['CKPTFS_TEST_TMP'] = base
    rows = {}    # (W, metric) -> [values over reps]

    def add(w, name, v):
        rows.setdefault((w, name), []).append(v)

    try:
        disk = bench_io.disk_rates(direct, a.total_mib)
        bench_io.print_rates('disk', disk)
        with ckfs.Mount() as m, bench_io.evidence_on_failure(m), floor_mount(pt_dir) as pt_mnt:
            sides = ('direct', 'ckptfs') + ((FLOOR,) if pt_mnt else ())
            for r in range(a.reps):
                for w in a.procs:
                    mib = max(1, a.total_mib // w)
                    step = r * 100 + w
                    sd = os.path.join(m.mnt, f'iter_{step:07d}')
                    os.makedirs(sd)
                    pm = [os.path.join(sd, f'mp_rank_{i:02d}_model_states.pt') for i in range(w)]
                    pd = [os.path.join(direct, f'w{w}-r{i}.pt') for i in range(w)]
                    pp = [os.path.join(pt_mnt, f'w{w}-r{i}.pt') for i in range(w)] if pt_mnt \
                        else []
                    seeds = [1000 * step + i for i in range(w)]
                    k = (a.procs.index(w) + r) % len(sides)
                    order = sides[k:] + sides[:k]
                    logical = 0
                    for side in order:
                        if side in ('direct', FLOOR):
                            t, _ = run_many('save', pd if side == 'direct' else pp, mib, seeds)
                        else:
                            c0 = bench_io.proc_cpu_s(m.pid)
                            t, _ = run_many('save', pm, mib, seeds)
                            # the claim, as Megatron's rank 0 writes it after the save: the
                            # step is then complete, not a save cut short, at the remount
                            with open(m.path('latest_checkpointed_iteration.txt'), 'w') as f:
                                f.write(str(step))
                            bench_io.wait_compressed(m)
                            logical = sum(os.path.getsize(p) for p in pm)
                            add(w, 'cpu_save', (bench_io.proc_cpu_s(m.pid) - c0) /
                                (logical / (1 << 30)))
                        add(w, f'save:{side}', t)
                    for side in order:
                        if side in ('direct', FLOOR):
                            t, _ = run_many('load', pd if side == 'direct' else pp, mib, seeds)
                        else:
                            m.remount()
                            os.stat(m.mnt)     # the mount's check done before the clock
                            c0 = bench_io.proc_cpu_s(m.pid)
                            t, _ = run_many('load', pm, mib, seeds)
                            add(w, 'cpu_load', (bench_io.proc_cpu_s(m.pid) - c0) /
                                (logical / (1 << 30)))
                        add(w, f'load:{side}', t)
                    add(w, 'logical', logical)
                    for p in pd + pp:
                        os.unlink(p)
                    print(f'W={w} rep {r}: ' + '; '.join(
                        f'{side} save {rows[(w, "save:" + side)][-1]:.2f} s, cold load '
                        f'{rows[(w, "load:" + side)][-1]:.2f} s' for side in sides), flush=True)
    finally:
        if not ckfs.keep_tmp():
            shutil.rmtree(direct, ignore_errors=True)
            shutil.rmtree(pt_dir, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in rows.items()}
    print('\n---- markdown (tests/bench/RESULTS.md) ----\n')
    print(f'`scripts/bench.sh --writers --total-mib {a.total_mib} --procs '
          f'{" ".join(map(str, a.procs))} --reps {a.reps}`, {time.strftime("%Y-%m-%d")}, '
          f'{bench_io.machine_line(base)}; {time.perf_counter() - t_start:.0f} s. Disk (fio, '
          f'1 MiB sequential): write with end_fsync {disk[0]:.0f} MB/s, cold read '
          f'{disk[1]:.0f} MB/s; fresh memory {disk[2]:.0f} MB/s. Medians of {a.reps} rep(s); '
          f'W processes each save or load total/W MiB, all at once. '
          + (f'{FLOOR}: libfuse\'s example over the same disk, -o default_permissions, '
             f'read-ahead {FLOOR_READ_AHEAD_KB} KiB (the FUSE floor); pt in the table.\n'
             if (a.procs[0], f'save:{FLOOR}') in med else f'No {FLOOR} in this run.\n'))
    print('| W | save+fsync direct | ckptfs | ckptfs/direct | pt/direct | ckptfs/pt | '
          'cold load direct | ckptfs | ckptfs/direct | pt/direct | ckptfs/pt | '
          'daemon CPU s/GiB saved | /GiB loaded |')
    print('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')

    def floor_cols(w, kind, c, d):
        f = med.get((w, f'{kind}:{FLOOR}'))
        return f'{f / d:.2f}x | {c / f:.2f}x' if f else ' | '

    for w in a.procs:
        g = med[(w, 'logical')] / 1e9
        sd, sc = med[(w, 'save:direct')], med[(w, 'save:ckptfs')]
        ld, lc = med[(w, 'load:direct')], med[(w, 'load:ckptfs')]
        print(f'| {w} | {sd:.2f} s ({g / sd:.2f} GB/s) | {sc:.2f} s | {sc / sd:.2f}x | '
              f'{floor_cols(w, "save", sc, sd)} | {ld:.2f} s | {lc:.2f} s | {lc / ld:.2f}x | '
              f'{floor_cols(w, "load", lc, ld)} | {med[(w, "cpu_save")]:.2f} | '
              f'{med[(w, "cpu_load")]:.2f} |')


if __name__ == '__main__':
    main()
