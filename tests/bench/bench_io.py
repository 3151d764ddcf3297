#!/usr/bin/python3
"""Benchmark (not a test): ckptfs against the backing disk written directly, same run, same disk.

Prints, for REPS repetitions each, medians and ckptfs/direct ratios of (issue 5's list):
  1. torch.save of a bf16 state dict of --size-mib (trainer-visible time, i.e. until close
     returns; ckptfs's close returns once the bytes are in the daemon, fs/write/commit.c) vs the
     direct write to the page cache;
  2. save-to-durable: the same ckptfs save until an fsync opened after the close returns (it
     waits for the commit the close started) vs direct torch.save + fsync;
  3. cold torch.load (page cache dropped) of that file;
  4. stored/logical bytes: the bf16 weights; fp32 Adam moments (exp_avg, exp_avg_sq); a 5-step
     LoRA-style run (95% frozen bf16 weights, 5% changing every step), from the store's growth
     (ckptctl status --json) over the logical bytes written, once the chunks stored raw while
     the workers were behind (-o defer_compress) are compressed; the bf16 figure also right
     after durable, and how long after durable the compression ended;
  5. fio sequential 1 MiB write (with end_fsync) and cold read;
  6. the daemon's peak RSS (VmHWM) vs its write buffer (-o write_buffer, printed);
  7. daemon CPU seconds (user+sys, /proc/PID/stat) per GB saved, deferred compression included.
Usage: scripts/bench.sh [--size-mib N] [--reps N] [--write-buffer SIZE]
                        [--defer-compress auto|never|always]
"""
import argparse, contextlib, json, os, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
import ckfs  # noqa: E402


def drop_caches():
    os.sync()
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3\n')


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def make_state(size_mib):
    import torch
    g = torch.Generator().manual_seed(0)
    n = size_mib * (1 << 20) // 2          # bf16: 2 bytes per element
    per = 16 << 20                          # 32 MiB tensors, like transformer layers
    sd, left, i = {}, n, 0
    while left > 0:
        k = min(per, left)
        sd[f'layers.{i}.weight'] = (torch.randn(k, generator=g) * 0.02).to(torch.bfloat16)
        left -= k
        i += 1
    return sd


def make_adam(size_mib):
    """fp32 Adam moments of a model: exp_avg ~ N(0, 1e-3), exp_avg_sq ~ exp_avg^2 + noise."""
    import torch
    g = torch.Generator().manual_seed(1)
    n = size_mib * (1 << 20) // 8          # two fp32 tensors per element
    per = 8 << 20
    sd, left, i = {}, n, 0
    while left > 0:
        k = min(per, left)
        m = torch.randn(k, generator=g) * 1e-3
        sd[f'state.{i}.exp_avg'] = m
        sd[f'state.{i}.exp_avg_sq'] = m * m + torch.rand(k, generator=g) * 1e-8
        left -= k
        i += 1
    return sd


def lora_steps(sd, steps=5, frac=0.05):
    """Yield `steps` state dicts: the tensors of the first 95% of the bytes stay frozen, the
    rest change at every step (as LoRA adapters or unfrozen layers do)."""
    import torch
    g = torch.Generator().manual_seed(2)
    keys = list(sd)
    total = sum(sd[k].numel() for k in keys)
    frozen, acc = [], 0
    for k in keys:
        if acc + sd[k].numel() > total * (1 - frac):
            break
        frozen.append(k)
        acc += sd[k].numel()
    cur = dict(sd)
    for s in range(steps):
        for k in keys[len(frozen):]:
            cur[k] = (torch.randn(sd[k].numel(), generator=g) * 0.02).to(torch.bfloat16)
        yield cur


def proc_cpu_s(pid):
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def proc_hwm_mib(pid):
    with open(f'/proc/{pid}/status') as f:
        for ln in f:
            if ln.startswith('VmHWM:'):
                return int(ln.split()[1]) / 1024
    return float('nan')


def stored_bytes(m):
    st = json.loads(subprocess.run([ckfs.ckptctl_bin(), '--json', m.store, 'status'],
                                   check=True, capture_output=True, text=True).stdout)
    return st['stored_bytes']


def deferred_chunks(m):
    """Chunks the daemon stored raw, to compress when idle (-o defer_compress), from status."""
    with open(m.path('.ckptfs', 'status')) as f:
        for ln in f:
            if ln.startswith('deferred chunks:'):
                return int(ln.split()[2])
    return 0


def wait_compressed(m, timeout=600):
    """Wait until no chunk is deferred; seconds waited (the daemon compresses them once its
    workers have been idle 1 s)."""
    t0 = time.perf_counter()
    while deferred_chunks(m):
        if time.perf_counter() - t0 > timeout:
            sys.exit('bench: deferred chunks still not compressed after %d s' % timeout)
        time.sleep(0.05)
    return time.perf_counter() - t0


@contextlib.contextmanager
def evidence_on_failure(m):
    """On an exception: print the daemon's log tail, the root as listed and as indexed, and keep
    the mount's directory (store, log) for a look afterwards."""
    try:
        yield
    except BaseException:
        os.environ['CKPTFS_KEEP'] = '1'
        sys.stderr.write('bench: failed; daemon log tail:\n%s\nroot: %s\n%s\n' % (
            m.log_tail(60), sorted(os.listdir(m.mnt)),
            subprocess.run([ckfs.ckptctl_bin(), m.store, 'ls'], capture_output=True,
                           text=True).stdout))
        raise


def torch_save(sd, path, fsync):
    import torch
    with open(path, 'wb') as f:
        torch.save(sd, f)
        f.flush()
        if fsync:
            os.fsync(f.fileno())


def torch_load(path):
    import torch
    torch.load(path)


def fio(path, rw, size_mib):
    out = subprocess.run(['fio', '--name=seq', f'--filename={path}', f'--rw={rw}', '--bs=1M',
                          f'--size={size_mib}M', '--ioengine=psync', '--end_fsync=1',
                          '--output-format=json'], check=True, capture_output=True, text=True)
    job = json.loads(out.stdout)['jobs'][0]
    side = job['write'] if rw == 'write' else job['read']
    return side['bw_bytes'] / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--size-mib', type=int, default=2048)  # issue 5: a ~2 GiB state
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--write-buffer', default=None, help='-o write_buffer for the mount')
    ap.add_argument('--defer-compress', default=None, choices=('auto', 'never', 'always'),
                    help='-o defer_compress for the mounts (default: the daemon\'s, auto)')
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit('bench: run as root (it drops the page cache between runs)')
    base = os.environ.get('CKPTFS_BENCH_DIR', os.path.join(os.getcwd(), 'output', 'bench'))
    os.makedirs(base, exist_ok=True)
    direct = tempfile.mkdtemp(prefix='direct-', dir=base)
    sd = make_state(a.size_mib)
    rows = {}

    def add(name, v):
        rows.setdefault(name, []).append(v)

    os.environ['CKPTFS_TEST_TMP'] = base
    opts = ((f'write_buffer={a.write_buffer}',) if a.write_buffer else ()) + \
        ((f'defer_compress={a.defer_compress}',) if a.defer_compress else ())
    with ckfs.Mount(opts=opts) as m, evidence_on_failure(m):
        cpu_s, saved_b = 0.0, 0
        for r in range(a.reps):
            pd, pm = os.path.join(direct, 'model.pt'), os.path.join(m.mnt, f'model{r}.pt')
            drop_caches()
            add('torch.save s (direct, to page cache)', timed(lambda: torch_save(sd, pd, False)))
            os.unlink(pd)
            drop_caches()
            add('torch.save s (direct, +fsync: durable)', timed(lambda: torch_save(sd, pd, True)))
            drop_caches()
            c0, b0 = proc_cpu_s(m.pid), stored_bytes(m) if r == 0 else 0
            t0 = time.perf_counter()
            torch_save(sd, pm, False)
            t1 = time.perf_counter()
            fd = os.open(pm, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            t2 = time.perf_counter()
            add('torch.save s (ckptfs, close returned)', t1 - t0)
            add('torch.save s (ckptfs, then fsync: durable)', t2 - t0)
            if r == 0:
                add('bf16 stored/logical right after durable',
                    (stored_bytes(m) - b0) / os.path.getsize(pm))
            # chunks stored raw while the workers were behind are compressed once they are
            # idle: wait for that before the loads, and count its CPU
            add('compressed s after durable (deferred chunks)', wait_compressed(m))
            cpu_s += proc_cpu_s(m.pid) - c0
            saved_b += os.path.getsize(pm)
            drop_caches()
            add('torch.load s (direct, cold)', timed(lambda: torch_load(pd)))
            drop_caches()
            add('torch.load s (ckptfs, cold)', timed(lambda: torch_load(pm)))
            os.unlink(pd)
            if r == 0:
                add('bf16 stored/logical', (stored_bytes(m) - b0) / os.path.getsize(pm))
                # fp32 Adam moments and the LoRA-style run, each in a store of its own (no
                # dedup against the files above, no space freed by unlinks counted)
                with ckfs.Mount(opts=opts) as m2:
                    pa = os.path.join(m2.mnt, 'adam.pt')
                    torch_save(make_adam(max(1, a.size_mib // 2)), pa, True)  # durable: counted
                    wait_compressed(m2)
                    add('fp32 Adam stored/logical', stored_bytes(m2) / os.path.getsize(pa))
                with ckfs.Mount(opts=opts) as m3:
                    logical = 0
                    for s, lsd in enumerate(lora_steps(sd)):
                        pl = os.path.join(m3.mnt, f'lora_step{s}.pt')
                        torch_save(lsd, pl, True)
                        logical += os.path.getsize(pl)
                    wait_compressed(m3)
                    add('LoRA 5-step stored/logical', stored_bytes(m3) / logical)
            os.unlink(pm)
            fd_, fm_ = os.path.join(direct, 'fio.dat'), os.path.join(m.mnt, 'fio.dat')
            drop_caches()
            add('fio write MB/s (direct)', fio(fd_, 'write', a.size_mib))
            drop_caches()
            add('fio write MB/s (ckptfs)', fio(fm_, 'write', a.size_mib))
            drop_caches()
            add('fio read MB/s (direct, cold)', fio(fd_, 'read', a.size_mib))
            drop_caches()
            add('fio read MB/s (ckptfs, cold)', fio(fm_, 'read', a.size_mib))
            os.unlink(fd_)
            os.unlink(fm_)
        add('daemon peak RSS MiB (VmHWM)', proc_hwm_mib(m.pid))
        add('daemon CPU s per GB saved', cpu_s / (saved_b / 1e9))
        wbuf = None
        try:
            with open(m.path('.ckptfs', 'status')) as f:
                for ln in f:
                    if 'write buffer' in ln:
                        wbuf = ln.strip()
        except OSError:
            pass
    shutil.rmtree(direct, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f'\nckptfs benchmark: {a.size_mib} MiB, {a.reps} reps, medians (min-max), store and '
          f'direct dir on the same disk ({base})')
    for k, v in med.items():
        spread = f'({min(rows[k]):.3f}-{max(rows[k]):.3f})' if len(rows[k]) > 1 else ''
        print(f'  {k:45s} {v:10.3f}  {spread}')
    print('ratios (ckptfs / direct), of the medians, then per rep (direct and ckptfs run back to '
          'back in each rep):')
    r = lambda x, y: med[x] / med[y]

    def per_rep(x, y):
        return ' '.join(f'{cx / cy:.2f}' for cx, cy in zip(rows[x], rows[y]))

    for label, x, y in (
            ('save, trainer-visible vs direct page cache',
             'torch.save s (ckptfs, close returned)', 'torch.save s (direct, to page cache)'),
            ('save-to-durable vs direct save+fsync',
             'torch.save s (ckptfs, then fsync: durable)', 'torch.save s (direct, +fsync: durable)'),
            ('cold torch.load', 'torch.load s (ckptfs, cold)', 'torch.load s (direct, cold)')):
        print(f'  {label:43s} {r(x, y):6.2f}x   per rep: {per_rep(x, y)}')
    print(f'  fio write throughput                        {r("fio write MB/s (ckptfs)", "fio write MB/s (direct)"):6.2f}x')
    print(f'  fio cold read throughput                    {r("fio read MB/s (ckptfs, cold)", "fio read MB/s (direct, cold)"):6.2f}x')
    print('targets (issue 5): save <= 1.1x, durable <= 0.9x, cold load <= 1.0x, bf16 <= 0.72, '
          'Adam <= 0.92, LoRA <= 0.25, RSS <= write buffer + 64 MiB')
    if wbuf:
        print(f'  {wbuf}')


if __name__ == '__main__':
    main()
