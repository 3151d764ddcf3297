#!/usr/bin/python3
"""Benchmark (not a test): ckptfs against the backing disk written directly, same run, same disk,
each ckptfs figure also as a fraction of what the disk physically allows.

What is measured, and how (issue 5's list, made trustworthy):
  0. the disk itself, at the start and again at the end of the run (both printed, their mean
     used): fio sequential 1 MiB buffered write of --size-mib with end_fsync=1 (the fsync is in
     fio's time) and a cold sequential 1 MiB read of that file (page cache dropped first), in
     the same directory tree, so on the same filesystem, as the direct files and the store;
     and, the same way, how fast a fresh process fills fresh memory (memset of a new 4 KiB-page
     mapping, right after a page-cache drop, as a load would). Rates in decimal MB/s (10^6
     bytes per second).
  1. torch.save of a seeded bf16 state dict of --size-mib (32 MiB tensors of randn*0.02) until
     close returns (trainer-visible; ckptfs's close returns once the bytes are in the daemon,
     fs/write/commit.c), ckptfs vs the direct write to the page cache;
  2. save-to-durable: the same save until an fsync on a descriptor opened after the close
     returns (on ckptfs it waits for the commit the close started; on ext4 it writes the dirty
     pages, as an fsync before the close would), ckptfs vs direct;
  3. cold torch.load of that file: page cache dropped, and for ckptfs the mount unmounted and
     mounted again first, so that the daemon's chunk cache is cold too; then the reader's warm
     ceiling: the same load of the direct file again, from the page cache its cold load filled
     (no disk, no file system code but the page cache's: what no file system can beat), and
     each cold load also as a fraction of it (its time over the cold load's); and the daemon's
     CPU per GiB of a cold load (from the remount to the end of the load; nothing else runs in
     it: these files are in no step, so the mount checks none);
  3b. safetensors' mmap load, cold, the same way: the state (of a seed of its own) written as a
     safetensors file, then mapped and copied into zeroed parameters as safetensors +
     load_state_dict do on torch < 2.0 (safetensors_mmap_load); its pages are read by page
     faults on the mapping, not by read(2);
  4. fio through the mount: the same sequential write (end_fsync) and, after a remount and a
     page-cache drop, the cold read, as MB/s and as a fraction of the disk's rates;
  5. stored/logical bytes: the bf16 state of 1-3 (each rep; right after durable and once the
     chunks stored raw while the workers were behind, -o defer_compress, are compressed, and
     how long after durable that ended); fp32 Adam moments (exp_avg, exp_avg_sq); a 5-step
     LoRA-style run (95% frozen bf16 weights, 5% changing every step); from the store's growth
     (ckptctl status --json) over the logical bytes written;
  6. the daemon's peak RSS (VmHWM, the maximum over its lifetimes: it is remounted for every
     cold read) vs its write buffer (-o write_buffer, printed);
  7. daemon CPU seconds (user+sys, /proc/PID/stat) per GB saved, deferred compression included,
     and passthrough_ll's for its saves (8): what FUSE itself costs the daemon per GB;
  8. the FUSE floor: the saves and cold loads of 1-3b also through libfuse's passthrough_ll
     example (compiled from libfuse3-dev's copy, bench_small.build_passthrough) mounted over a
     directory of the same disk, with -o default_permissions and a 4 MiB read-ahead, as ckptfs
     mounts itself (FS_READ_AHEAD_KB, fs/fuse/fuse_int.h). It does nothing but pass each
     request to the disk, so what it takes over the direct path is what FUSE itself costs on
     this machine, and each ckptfs figure is printed also as a ratio to it. Skipped (said) when
     passthrough_ll cannot be built.

How the timings are kept honest:
  - every torch.save and torch.load runs in a fresh process (this file with --worker): it
    imports torch and builds its state (seeded, not timed), says "ready", the parent drops the
    page cache (and has remounted ckptfs, for a cold read), says "go", and the worker times
    only the save or the load itself and prints the times as JSON;
  - within each rep the direct path, ckptfs and passthrough_ll take turns going first (rep 0
    direct first, rep 1 ckptfs first, rep 2 passthrough_ll first, ...), for the saves and for
    the loads;
  - each rep saves a state of its own seed (the same for direct and ckptfs), so that no save
    is stored as duplicates of an earlier rep's chunks; nothing is deleted from the store
    before the end, so the store's growth during a save is that save's;
  - every figure is reported as median (min-max) over the reps, as ckptfs/direct, and as a
    fraction of the physical limit: for a cold load, logical bytes/s over the disk's read rate
    divided by the stored/logical ratio of the bf16 state measured in this run (the disk reads
    stored bytes); for save-to-durable, logical bytes/s over the disk's write rate. The direct
    path's own fraction is printed too, and a direct baseline more than 20% away from the
    disk's rate (cold load vs fio read, save+fsync vs fio write) is flagged with a WARNING:
    a ratio to such a baseline says more about the baseline than about ckptfs.

Why this bench replaced the old one's direct loads (5.7-8.4 s for 2 GiB, where a fresh process
loads the same file in 1.7-1.9 s on this disk). The suspicion was the old bench's process: it
loaded in the long-lived process that also held the state dicts it had saved. Measured on
2026-11-26 with --size-mib 1024 --inprocess-load (and the same workers run by hand, each pair
in the same minutes), that is not it: a 1 GiB direct cold load took 5.43, 5.84 and 6.44 s in
the process that had built and saved the state, 8.04, 5.44 and 6.19 s in a fresh process. RAM
was not short either (24 GiB, under 5 GiB in use). What the time is: the kernel filling the
loaded tensors with fresh pages. The load's system time was nearly all of it (7.92 s of
8.04 s), with 262,220 minor page faults, one per 4 KiB of the tensors. With the file already
in the page cache, so no disk I/O at all, the load still took 4.03-4.14 s (system time
3.98-4.09 s). A memset of 1 GiB of fresh anonymous memory ran at 92-277 MB/s that day (15-45
us per 4 KiB page), while fio read the disk cold at 600-2700 MB/s. This VM is a
Firecracker guest under PVM (dmesg: "Hypervisor detected: PVM"; page_reporting returns its
free memory to the host), and there the first touch of a page goes through the hypervisor. A
2 GiB load faults 524,288 pages: at 11-16 us each that is the old 5.7-8.4 s, a fresh process
or not. The 1.7-1.9 s needs about 2 us per fault, a fast phase of the VM: none came that day.
So a direct baseline far from the disk's rate measures the VM's memory, not the disk. This
bench measures fresh memory in the same run (the "touch" worker) next to the disk. For each
cold load it prints the kernel time and page faults, and it flags such a baseline. The same
cost probably weighs on the direct saves too (the first 256 MiB save in a process spent 1.3 s
in the kernel, a second one after a drop 0.04 s), less on ckptfs's, whose daemon reuses buffers
it has already touched: in such a phase the ckptfs/direct ratios can flatter ckptfs, and the
fractions of the disk's rates are the figures to quote.

Usage: scripts/bench.sh [--size-mib N] [--reps N] [--write-buffer SIZE]
                        [--defer-compress auto|never|always] [--inprocess-load]
   or: CKPTFS_BIN=build/fs/ckptfs CKPTCTL_BIN=build/tools/ckptctl \\
       /usr/bin/python3 tests/bench/bench_io.py [same options]
At the end a markdown table (machine, command, disk rates, every metric) to paste into
tests/bench/RESULTS.md.
"""
import argparse, contextlib, json, os, platform, resource, shutil, statistics, subprocess, \
    sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
import ckfs  # noqa: E402

STRAY = 0.20           # a direct baseline further than this from the disk's rate is flagged
FLOOR = 'passthrough_ll'


def drop_caches():
    os.sync()
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3\n')


PAGE_REPORTING = '/sys/module/page_reporting/parameters/page_reporting_order'
_reporting_was = []


def page_reporting_off():
    """Stop the VM's free page reporting until this process exits; return what was done.

    A guest whose virtio-balloon has VIRTIO_BALLOON_F_REPORTING hands every free block of
    2^order pages back to the host (Linux mm/page_reporting.c; the order defaults to
    pageblock_order, 9 on x86-64), and a process later given those pages pays the host's fault
    on first touch. On this VM that made one cold load of the same 1 GiB file take 0.56-1.80 s,
    direct or through ckptfs alike (RESULTS.md, "Issue 45's bars on a quiet machine"). An order
    above the buddy allocator's largest block (10 on x86-64) reports nothing, and the kernel
    reads the parameter at each pass. A machine without the module (bare metal, a GPU node) has
    no such cost; nothing is changed there. CKPTFS_BENCH_PAGE_REPORTING=keep measures the VM as
    it runs. The old order is put back at exit (atexit: a normal exit, an exception, ^C; not
    SIGKILL, after which `echo 9 > ` the file puts it back). Root only; idempotent.
    Returns one line for the bench's report.
    """
    import atexit
    try:
        with open(PAGE_REPORTING) as f:
            was = f.read().strip()
    except OSError:
        return 'page reporting: none on this machine'
    if _reporting_was:
        return 'page reporting: off for the bench (order %s -> 11)' % _reporting_was[0]
    if os.environ.get('CKPTFS_BENCH_PAGE_REPORTING') == 'keep':
        return 'page reporting: left on (order %s; CKPTFS_BENCH_PAGE_REPORTING=keep)' % was
    if was == '11':
        return 'page reporting: already off (order 11)'
    try:
        with open(PAGE_REPORTING, 'w') as f:
            f.write('11\n')
    except OSError as e:
        return 'page reporting: on (order %s), could not turn off: %s' % (was, e)
    _reporting_was.append(was)

    def restore():
        with open(PAGE_REPORTING, 'w') as f:
            f.write(was + '\n')
    atexit.register(restore)
    return 'page reporting: off for the bench (order %s -> 11, put back at exit)' % was


# -- the states saved -------------------------------------------------------------------------

def make_state(size_mib, seed=0):
    """bf16 weights of --size-mib in 32 MiB tensors (like transformer layers), randn*0.02. The
    fp32 draws go through one reused buffer: only the state itself is fresh memory, which this
    VM is slow to touch (see above). Same values as (randn(k) * 0.02).to(bfloat16)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    n = size_mib * (1 << 20) // 2          # bf16: 2 bytes per element
    per = 16 << 20                          # 32 MiB tensors
    buf = torch.empty(min(per, n))
    sd, left, i = {}, n, 0
    while left > 0:
        k = min(per, left)
        x = torch.randn(k, generator=g, out=buf[:k])
        sd[f'layers.{i}.weight'] = x.mul_(0.02).to(torch.bfloat16)
        left -= k
        i += 1
    return sd


def make_adam(size_mib):
    """fp32 Adam moments of a model: exp_avg ~ N(0, 1e-3), exp_avg_sq ~ exp_avg^2 + noise."""
    import torch
    g = torch.Generator().manual_seed(1)
    n = size_mib * (1 << 20) // 8          # two fp32 tensors per element
    per = 8 << 20
    tmp = torch.empty(min(per, n))
    sd, left, i = {}, n, 0
    while left > 0:
        k = min(per, left)
        m = torch.randn(k, generator=g).mul_(1e-3)
        sq = torch.rand(k, generator=g).mul_(1e-8)
        sd[f'state.{i}.exp_avg'] = m
        sd[f'state.{i}.exp_avg_sq'] = sq.add_(torch.mul(m, m, out=tmp[:k]))
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


def torch_save(sd, path, fsync):
    import torch
    with open(path, 'wb') as f:
        torch.save(sd, f)
        f.flush()
        if fsync:
            os.fsync(f.fileno())


ST_DTYPES = {'BF16': 'bfloat16', 'F32': 'float32', 'F16': 'float16'}


def safetensors_save(sd, path):
    """Write sd in the safetensors format (huggingface/safetensors safetensors/src/tensor.rs
    `serialize_to_file`: an 8-byte little-endian header length, the JSON header of
    {name: {dtype, shape, data_offsets}} padded with spaces to 8 bytes, then the tensors'
    bytes in header order), with an fsync. Debian 12 has no safetensors package; the format
    is all a loader reads."""
    import struct
    import torch
    names = {v: k for k, v in ST_DTYPES.items()}
    hdr, off = {}, 0
    for k, t in sd.items():
        n = t.numel() * t.element_size()
        hdr[k] = {'dtype': names[str(t.dtype).split('.')[1]], 'shape': list(t.shape),
                  'data_offsets': [off, off + n]}
        off += n
    h = json.dumps(hdr, separators=(',', ':')).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)))
        f.write(h)
        for t in sd.values():
            f.write(memoryview(t.contiguous().view(torch.uint8).numpy()))
        f.flush()
        os.fsync(f.fileno())


def safetensors_header(path):
    """(data start, {name: header entry}) of a safetensors file."""
    import struct
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        return 8 + n, json.loads(f.read(n))


def safetensors_mmap_load(path, start, hdr, dst):
    """What safetensors' `safe_open(path, framework="pt")` + `get_tensor` do on torch < 2.0
    (huggingface/safetensors bindings/python/src/lib.rs at 000a16f, `Open::new` and
    `Open::get_tensor`): the whole file mapped private by `torch.ByteStorage.from_file(path,
    shared=False, size=size)`, each tensor `torch.asarray(storage[a:b], dtype=uint8)
    .view(dtype).reshape(shape)`, a view of the mapping; then, as `model.load_state_dict`
    does, each copied into the model's parameters (dst, memory already touched), which is
    when the mapping's pages are read."""
    import torch
    st = torch.ByteStorage.from_file(path, shared=False, size=os.path.getsize(path)).untyped()
    for k, v in hdr.items():
        a, b = v['data_offsets']
        t = torch.asarray(st[start + a:start + b], dtype=torch.uint8)
        dst[k].copy_(t.view(dtype=getattr(torch, ST_DTYPES[v['dtype']])).reshape(v['shape']))


# -- the worker: one save or one load in a fresh process --------------------------------------

def steal_s():
    """CPU time the hypervisor took from this VM so far (all CPUs; /proc/stat's steal)."""
    with open('/proc/stat') as f:
        return int(f.readline().split()[8]) / os.sysconf('SC_CLK_TCK')


def rusage_now():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt, r.ru_majflt, steal_s()


def rusage_delta(a, b):
    """user and sys CPU seconds, page faults (minor: a fresh page; major: read from disk) of
    this process, and the VM's steal time (all CPUs) between two rusage_now()."""
    return {'user_s': b[0] - a[0], 'sys_s': b[1] - a[1], 'minflt': b[2] - a[2],
            'majflt': b[3] - a[3], 'steal_s': b[4] - a[4]}


def touch_fresh(size_mib):
    """memset a fresh anonymous mapping of size_mib (one thread): seconds. What every load
    pays for its destination memory, and a cold read for its page-cache pages."""
    import ctypes, mmap
    n = size_mib << 20
    mm = mmap.mmap(-1, n)
    c = ctypes.c_char.from_buffer(mm)
    t0 = time.perf_counter()
    ctypes.memset(ctypes.addressof(c), 1, n)
    t = time.perf_counter() - t0
    del c
    mm.close()
    return t


def worker(mode, path, size_mib, seed):
    """Run in a fresh process (main's --worker). Prepares untimed, prints "ready", waits for
    "go" on stdin (the parent drops the page cache in between), does the timed part and prints
    one JSON line of times in seconds.

    save: build the state (seed), then time open + torch.save + close (close_s) and an fsync
          on a descriptor opened after the close (durable_s, from the same open).
    load: time torch.load only (load_s; the result is freed after the clock stops).
    Both also give end_mono, CLOCK_MONOTONIC (the same in every process) when their timed
    part ended, for a parent that times several workers at once (bench_writers.py).
    inproc_load: the old bench's way, to measure what it measured: build the state, save it
          to path with fsync in this process, keep it, then (after "go") time torch.load of it
          here, result dropped inside the timing as the old bench did (load_s), and the
          freeing alone (free_s).
    stsave: build the state (seed) and write it as a safetensors file, fsync'd (not timed).
    mmload: read the file's header and build the model's parameters (zeroed), then time
          safetensors' mmap load of it into them (load_s)."""
    import torch
    t = time.perf_counter()
    if mode in ('save', 'stsave'):
        sd = make_state(size_mib, seed)
    elif mode == 'mmload':
        start, hdr = safetensors_header(path)
        dst = {k: torch.zeros(v['shape'], dtype=getattr(torch, ST_DTYPES[v['dtype']]))
               for k, v in hdr.items()}
    elif mode == 'inproc_load':
        sd = make_state(size_mib, seed)
        torch_save(sd, path, True)
    elif mode not in ('load', 'touch'):
        sys.exit(f'bench worker: unknown mode {mode}')
    prep_s = time.perf_counter() - t
    print('ready', flush=True)
    if sys.stdin.readline().strip() != 'go':
        sys.exit('bench worker: no go')
    res = {'prep_s': prep_s}
    ru0 = rusage_now()
    if mode == 'save':
        t0 = time.perf_counter()
        with open(path, 'wb') as f:
            torch.save(sd, f)
        t1 = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        t2 = time.perf_counter()
        res.update(close_s=t1 - t0, durable_s=t2 - t0, end_mono=time.monotonic())
    elif mode == 'touch':
        res['touch_s'] = touch_fresh(size_mib)
    elif mode == 'stsave':
        safetensors_save(sd, path)
    elif mode == 'mmload':
        t0 = time.perf_counter()
        safetensors_mmap_load(path, start, hdr, dst)
        res['load_s'] = time.perf_counter() - t0
    else:
        t0 = time.perf_counter()
        out = torch.load(path)
        t1 = time.perf_counter()
        res['end_mono'] = time.monotonic()
        n = len(out)
        del out
        t2 = time.perf_counter()
        res.update(load_s=t1 - t0, free_s=t2 - t1, tensors=n)
        if mode == 'inproc_load':
            res['load_s'] = t2 - t0      # the old bench's timed() included the freeing
    res.update(rusage_delta(ru0, rusage_now()))
    print(json.dumps(res), flush=True)


def run_worker(mode, path, size_mib, seed=0, before_go=drop_caches):
    """Start a fresh worker process, wait until it is ready, call before_go (by default: drop
    the page cache), let it go; return its JSON result."""
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), '--worker', mode, path,
                          '--size-mib', str(size_mib), '--seed', str(seed)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if p.stdout.readline().strip() != 'ready':
            raise RuntimeError(f'bench worker {mode} {path} exited {p.wait()} before ready')
        before_go()
        p.stdin.write('go\n')
        p.stdin.flush()
        out = p.stdout.read()
        if p.wait() != 0:
            raise RuntimeError(f'bench worker {mode} {path} exited {p.returncode}')
        return json.loads(out.strip().splitlines()[-1])
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# -- the daemon and its store ----------------------------------------------------------------

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
            m.log_tail(60), sorted(os.listdir(m.mnt)) if m.mounted else '(not mounted)',
            subprocess.run([ckfs.ckptctl_bin(), m.store, 'ls'], capture_output=True,
                           text=True).stdout))
        raise


# -- fio --------------------------------------------------------------------------------------

def fio(path, rw, size_mib, seed=0):
    """fio sequential 1 MiB psync (buffered) write (with end_fsync: fio's time includes the
    fsync) or read of path; MB/s (10^6 bytes/s). seed: fio's data for the write (distinct per
    file on ckptfs, so that no file is stored as duplicates of an earlier one)."""
    argv = ['fio', '--name=seq', f'--filename={path}', f'--rw={rw}', '--bs=1M',
            f'--size={size_mib}M', '--ioengine=psync', f'--randseed={1000 + seed}',
            '--output-format=json']
    if rw == 'write':
        argv.append('--end_fsync=1')
    out = subprocess.run(argv, check=True, capture_output=True, text=True)
    job = json.loads(out.stdout)['jobs'][0]
    return job['write' if rw == 'write' else 'read']['bw_bytes'] / 1e6


def disk_rates(d, size_mib):
    """The disk's own rates, fio in directory d, and the rate at which a fresh process fills
    fresh memory right after a page-cache drop (as a load does): (write MB/s, cold read MB/s,
    fresh memory MB/s)."""
    p = os.path.join(d, 'fio-disk.dat')
    drop_caches()
    w = fio(p, 'write', size_mib)
    drop_caches()
    r = fio(p, 'read', size_mib)
    os.unlink(p)
    mem = (size_mib << 20) / run_worker('touch', p, size_mib)['touch_s'] / 1e6
    return w, r, mem


def print_rates(when, d):
    print(f'{when}: disk (fio) write {d[0]:.0f} MB/s, cold read {d[1]:.0f} MB/s; fresh memory '
          f'{d[2]:.0f} MB/s (decimal MB)', flush=True)


# -- reporting --------------------------------------------------------------------------------

def machine_line(base):
    mem = 0
    with open('/proc/meminfo') as f:
        for ln in f:
            if ln.startswith('MemTotal:'):
                mem = int(ln.split()[1]) * 1024
    df = subprocess.run(['df', '-T', base], capture_output=True, text=True).stdout.split('\n')
    dev, fstype = (df[1].split()[:2] if len(df) > 1 and df[1] else ('?', '?'))
    try:
        with open(PAGE_REPORTING) as f:
            rep = 'free page reporting order ' + f.read().strip()
    except OSError:
        rep = 'no free page reporting'
    return (f'{os.cpu_count()} CPUs, {mem / (1 << 30):.1f} GiB RAM, kernel '
            f'{platform.release()}, {rep}, bench dir {base} on {dev} ({fstype})')


def fmt(v, unit):
    if unit == 's':
        return f'{v:.2f}'
    if unit in ('MB/s', 'MiB'):
        return f'{v:.0f}'
    return f'{v:.3f}'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--size-mib', type=int, default=2048)  # issue 5: a ~2 GiB state
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--write-buffer', default=None, help='-o write_buffer for the mount')
    ap.add_argument('--defer-compress', default=None, choices=('auto', 'never', 'always'),
                    help='-o defer_compress for the mounts (default: the daemon\'s, auto)')
    ap.add_argument('--inprocess-load', action='store_true',
                    help='also time the old bench\'s direct load: in the process that built '
                    'and saved the state (see the module docstring)')
    ap.add_argument('--worker', nargs=2, metavar=('MODE', 'PATH'), help=argparse.SUPPRESS)
    ap.add_argument('--seed', type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker[0], a.worker[1], a.size_mib, a.seed)
    if os.geteuid() != 0:
        sys.exit('bench: run as root (it drops the page cache between runs)')
    print(page_reporting_off())
    t_start = time.perf_counter()
    base = os.environ.get('CKPTFS_BENCH_DIR', os.path.join(os.getcwd(), 'output', 'bench'))
    os.makedirs(base, exist_ok=True)
    base = os.path.realpath(base)
    direct = tempfile.mkdtemp(prefix='direct-', dir=base)
    pt_dir = tempfile.mkdtemp(prefix='passthrough-', dir=base)
    rows = {}          # metric -> list over reps

    def add(name, v):
        rows.setdefault(name, []).append(v)

    try:
        disk0 = disk_rates(direct, a.size_mib)
        print_rates('at the start', disk0)
        os.environ['CKPTFS_TEST_TMP'] = base
        opts = ((f'write_buffer={a.write_buffer}',) if a.write_buffer else ()) + \
            ((f'defer_compress={a.defer_compress}',) if a.defer_compress else ())
        # here: bench_small imports this module
        from bench_small import floor_mount, mount_daemon_pid
        with ckfs.Mount(opts=opts) as m, evidence_on_failure(m), floor_mount(pt_dir) as pt_mnt:
            cpu_s, saved_b, hwm = 0.0, 0, 0.0
            pt_cpu_s, pt_saved_b = 0.0, 0
            sides = ('direct', 'ckptfs') + ((FLOOR,) if pt_mnt else ())
            pt_pid = mount_daemon_pid(pt_mnt) if pt_mnt else None

            def remount():
                nonlocal hwm
                hwm = max(hwm, proc_hwm_mib(m.pid))    # VmHWM is per daemon lifetime
                m.remount()
                # the mount's check of its newest step (RESULTS "Mount") runs after the mount
                # returns and every access waits for it: a mount cost, not the read's
                os.stat(m.mnt)

            for r in range(a.reps):
                pd, pm = os.path.join(direct, 'model.pt'), m.path(f'model{r}.pt')
                pp = os.path.join(pt_mnt, 'model.pt') if pt_mnt else None
                order = sides[r % len(sides):] + sides[:r % len(sides)]
                for side in order:                      # saves
                    if side == 'direct':
                        res = run_worker('save', pd, a.size_mib, r)
                    elif side == FLOOR:
                        c0 = proc_cpu_s(pt_pid) if pt_pid else 0.0
                        res = run_worker('save', pp, a.size_mib, r)
                        if pt_pid:
                            pt_cpu_s += proc_cpu_s(pt_pid) - c0
                            pt_saved_b += os.path.getsize(pp)
                    else:
                        c0, b0 = proc_cpu_s(m.pid), stored_bytes(m)
                        res = run_worker('save', pm, a.size_mib, r)
                        logical = os.path.getsize(pm)
                        add('bf16 stored/logical right after durable',
                            (stored_bytes(m) - b0) / logical)
                        # chunks stored raw while the workers were behind are compressed once
                        # they are idle: wait for that (before anything else is timed) and
                        # count its CPU
                        add('compressed s after durable (deferred chunks)', wait_compressed(m))
                        add('bf16 stored/logical', (stored_bytes(m) - b0) / logical)
                        cpu_s += proc_cpu_s(m.pid) - c0
                        saved_b += logical
                    add(f'save:close:{side}', res['close_s'])
                    add(f'save:durable:{side}', res['durable_s'])
                    add(f'save:sys:{side}', res['sys_s'])
                add('logical bytes', os.path.getsize(pd))
                for side in order:                      # cold loads
                    if side == 'direct':
                        res = run_worker('load', pd, a.size_mib)
                    elif side == FLOOR:
                        res = run_worker('load', pp, a.size_mib)
                    else:
                        remount()                       # the daemon's chunk cache cold too
                        c0 = proc_cpu_s(m.pid)
                        res = run_worker('load', pm, a.size_mib)
                    add(f'load:cold:{side}', res['load_s'])
                    add(f'load:sys:{side}', res['sys_s'])
                    add(f'load:minflt:{side}', res['minflt'])
                    if side == 'ckptfs':
                        add('daemon CPU s per GiB restored (cold torch.load)',
                            (proc_cpu_s(m.pid) - c0) / (os.path.getsize(pm) / 2**30))
                # the warm ceiling: the direct file again, all of it in the page cache first
                with open(pd, 'rb') as f:
                    while f.read(8 << 20):
                        pass
                add('load:warm:direct',
                    run_worker('load', pd, a.size_mib, before_go=lambda: None)['load_s'])
                # safetensors' mmap load: a file of its own seed (its chunks not the
                # torch.save's), written untimed, then loaded cold the same way
                st = {'direct': os.path.join(direct, 'model.safetensors'),
                      'ckptfs': m.path(f'model{r}.safetensors'),
                      FLOOR: pt_mnt and os.path.join(pt_mnt, 'model.safetensors')}
                for side in order:
                    run_worker('stsave', st[side], a.size_mib, 1000 + r, before_go=lambda: None)
                wait_compressed(m)
                for side in order:
                    if side == 'ckptfs':
                        remount()
                    res = run_worker('mmload', st[side], a.size_mib)
                    add(f'mmload:cold:{side}', res['load_s'])
                os.unlink(st['direct'])
                if pt_mnt:
                    os.unlink(st[FLOOR])
                    os.unlink(pp)
                if a.inprocess_load:
                    # the old way: load in the process that built and saved the state
                    res = run_worker('inproc_load', pd, a.size_mib, r)
                    add('load:inproc:direct', res['load_s'])
                    add('inproc free s', res['free_s'])
                os.unlink(pd)
                # fio through the mount; its own file per rep (own data: no dedup)
                pf = m.path(f'fio{r}.dat')
                drop_caches()
                add('fio:write:ckptfs', fio(pf, 'write', a.size_mib, seed=r))
                # its deferred chunks compressed now, not during the next rep's save (the
                # store would shrink while that save's growth is measured)
                wait_compressed(m)
                remount()
                drop_caches()
                add('fio:read:ckptfs', fio(pf, 'read', a.size_mib, seed=r))
                wait_compressed(m)
                print(f'rep {r} done ({order[0]} first), {time.perf_counter() - t_start:.0f} s',
                      flush=True)
            hwm = max(hwm, proc_hwm_mib(m.pid))
            add('daemon peak RSS MiB (VmHWM)', hwm)
            add('daemon CPU s per GB saved', cpu_s / (saved_b / 1e9))
            if pt_saved_b:  # the FUSE floor's own: two copies of every byte, no chunking
                add(f'daemon CPU s per GB saved, {FLOOR}', pt_cpu_s / (pt_saved_b / 1e9))
            wbuf = None
            try:
                with open(m.path('.ckptfs', 'status')) as f:
                    for ln in f:
                        if 'write buffer' in ln:
                            wbuf = ' '.join(ln.split())
            except OSError:
                pass
        disk1 = disk_rates(direct, a.size_mib)
        print_rates('at the end', disk1)
        # fp32 Adam moments and the LoRA-style run, each in a store of its own (no dedup
        # against the files above), in this process: only their sizes count
        with ckfs.Mount(opts=opts) as m2, evidence_on_failure(m2):
            pa = m2.path('adam.pt')
            torch_save(make_adam(max(1, a.size_mib // 2)), pa, True)  # durable: counted
            wait_compressed(m2)
            add('fp32 Adam stored/logical', stored_bytes(m2) / os.path.getsize(pa))
        with ckfs.Mount(opts=opts) as m3, evidence_on_failure(m3):
            logical = 0
            for s, lsd in enumerate(lora_steps(make_state(a.size_mib, 0))):
                pl = m3.path(f'lora_step{s}.pt')
                torch_save(lsd, pl, True)
                logical += os.path.getsize(pl)
            wait_compressed(m3)
            add('LoRA 5-step stored/logical', stored_bytes(m3) / logical)
    finally:
        if not ckfs.keep_tmp():
            shutil.rmtree(direct, ignore_errors=True)
            shutil.rmtree(pt_dir, ignore_errors=True)

    report(a, base, rows, disk0, disk1, wbuf, time.perf_counter() - t_start)


def report(a, base, rows, disk0, disk1, wbuf, elapsed):
    from bench_small import FLOOR_READ_AHEAD_KB  # here: bench_small imports this module
    med = {k: statistics.median(v) for k, v in rows.items()}
    disk_w, disk_r, mem = ((x + y) / 2 for x, y in zip(disk0, disk1))
    logical = med['logical bytes']
    s_over_l = med['bf16 stored/logical']
    # physical limits in logical MB/s: a durable save writes at most at the disk's rate; a
    # cold load reads the stored bytes at the disk's read rate
    lim_load = {'direct': disk_r, 'ckptfs': disk_r / s_over_l, FLOOR: disk_r}
    sides = ('direct', 'ckptfs') + ((FLOOR,) if f'load:cold:{FLOOR}' in rows else ())

    # (label, key, unit, key of the direct figure for the ratio, physical limit or None)
    table = []
    for label, kind in (('torch.save, close returned', 'save:close'),
                        ('torch.save to durable (+fsync)', 'save:durable'),
                        ('torch.load, cold', 'load:cold'),
                        ('safetensors mmap load, cold', 'mmload:cold')):
        for side in sides:
            lim = (lim_load[side] if kind in ('load:cold', 'mmload:cold') else
                   disk_w if kind == 'save:durable' else None)
            table.append((f'{label} ({side})', f'{kind}:{side}', 's', f'{kind}:direct', lim))
    if 'load:inproc:direct' in rows:
        table.append(('torch.load, cold, in the process that built and saved the state (the '
                      'old bench\'s way, direct)', 'load:inproc:direct', 's', 'load:cold:direct',
                      lim_load['direct']))
    table.append(('torch.load, warm (direct, from the page cache: the reader\'s ceiling)',
                  'load:warm:direct', 's', 'load:cold:direct', None))
    table += [('fio seq write, end_fsync (ckptfs)', 'fio:write:ckptfs', 'MB/s', None, disk_w),
              ('fio seq read, cold (ckptfs)', 'fio:read:ckptfs', 'MB/s', None, disk_r)]
    for k in ('bf16 stored/logical right after durable', 'bf16 stored/logical',
              'compressed s after durable (deferred chunks)', 'fp32 Adam stored/logical',
              'LoRA 5-step stored/logical', 'daemon peak RSS MiB (VmHWM)',
              'daemon CPU s per GB saved', f'daemon CPU s per GB saved, {FLOOR}',
              'daemon CPU s per GiB restored (cold torch.load)'):
        if k in med:
            table.append((k, k, 'MiB' if 'MiB' in k else '', None, None))

    def fraction(key, unit, lim):
        """The median as a fraction of the physical limit (rates in logical MB/s)."""
        if lim is None:
            return None
        rate = med[key] if unit == 'MB/s' else logical / med[key] / 1e6
        return rate / lim

    def ratio(key, dkey):
        return med[key] / med[dkey] if dkey and key != dkey else None

    def floor_ratio(key):
        """A ckptfs figure over passthrough_ll's, the FUSE floor (None: not a ckptfs figure of
        the four, or no floor in this run)."""
        fk = key.replace(':ckptfs', f':{FLOOR}')
        return med[key] / med[fk] if key.endswith(':ckptfs') and fk in med else None

    # -- plain listing ------------------------------------------------------------------------
    print(f'\nckptfs benchmark: {a.size_mib} MiB bf16 state ({logical / 1e6:.0f} MB as saved), '
          f'{a.reps} reps, medians (min-max); store and direct dir on the same disk ({base}); '
          f'{elapsed / 60:.1f} min')
    print(f'disk (fio, 1 MiB sequential, decimal MB/s): write+end_fsync {disk0[0]:.0f} at the '
          f'start, {disk1[0]:.0f} at the end, mean {disk_w:.0f}; cold read {disk0[1]:.0f}, '
          f'{disk1[1]:.0f}, mean {disk_r:.0f}')
    print(f'fresh memory (memset of a fresh mapping after a cache drop, one thread): '
          f'{disk0[2]:.0f}, {disk1[2]:.0f}, mean {mem:.0f} MB/s')
    print(f'physical limits (logical MB/s): durable save {disk_w:.0f}; cold load direct '
          f'{disk_r:.0f}, ckptfs {lim_load["ckptfs"]:.0f} (disk read / bf16 stored/logical '
          f'{s_over_l:.3f})')
    for label, key, unit, dkey, lim in table:
        v, extra = rows[key], ''
        if ratio(key, dkey) is not None:
            extra += f'  {ratio(key, dkey):.2f}x direct (per rep: ' + ' '.join(
                f'{x / y:.2f}' for x, y in zip(v, rows[dkey])) + ')'
        if lim is not None:
            extra += f'  {fraction(key, unit, lim):.2f} of physical limit'
        if floor_ratio(key) is not None:
            extra += f'  {floor_ratio(key):.2f}x {FLOOR}'
        spread = f'({min(v):.3f}-{max(v):.3f})' if len(v) > 1 else ''
        print(f'  {label:62s} {med[key]:9.3f} {spread}{extra}')
    warm = med['load:warm:direct']
    of_warm = ', '.join(f'{side} {warm / med[f"load:cold:{side}"]:.2f}' for side in sides)
    print(f'  cold torch.load as a fraction of the reader\'s warm ceiling (warm s / cold s): '
          f'{of_warm}')
    # where a load's time goes: the kernel filling fresh pages (one minor fault per 4 KiB)
    for side in sides:
        t, st, f = (med[f'load:{x}:{side}'] for x in ('cold', 'sys', 'minflt'))
        print(f'  cold load ({side}): {st:.2f} s of its {t:.2f} s in the kernel, '
              f'{f:.0f} page faults ({st / f * 1e6:.1f} us of kernel time per fault)')

    # -- the direct baselines checked against the disk ------------------------------------------
    warnings = []
    for what, key, disk_rate, fio_name in (
            ('cold torch.load', 'load:cold:direct', disk_r, 'fio cold read'),
            ('torch.save+fsync', 'save:durable:direct', disk_w, 'fio write+end_fsync')):
        off = [logical / v / 1e6 / disk_rate - 1 for v in rows[key]]
        rate = logical / med[key] / 1e6
        bad = [f'rep {i} {o:+.0%}' for i, o in enumerate(off) if abs(o) > STRAY]
        if abs(rate / disk_rate - 1) > STRAY or bad:
            warnings.append(
                f'WARNING: direct baseline {what} ({rate:.0f} MB/s, median) strays '
                f'{abs(rate / disk_rate - 1):.0%} from the disk\'s rate ({fio_name} '
                f'{disk_rate:.0f} MB/s)' + (f'; reps off by more than {STRAY:.0%}: '
                                            f'{", ".join(bad)}' if bad else ''))
    # a load fills fresh pages as fast as it reads; memory less than twice the disk's rate is
    # the likely reason for a straying baseline (module docstring)
    if warnings and mem < 2 * max(disk_r, disk_w):
        warnings.append(
            f'(fresh memory ran at {mem:.0f} MB/s in this run: a torch.load writes every byte '
            f'into fresh pages, one page fault per 4 KiB; with memory this slow the direct '
            f'baseline measures the VM, not the disk. See the module docstring of '
            f'tests/bench/bench_io.py.)')
    for w in warnings:
        print(w)
    if not warnings:
        print(f'direct baselines within {STRAY:.0%} of the disk\'s rates')
    print('targets (issue 5): save <= 1.1x, durable <= 0.9x, cold load <= 1.0x, bf16 <= 0.72, '
          'Adam <= 0.92, LoRA <= 0.25, RSS <= write buffer + 64 MiB')
    print('targets (issue 45): durable <= 1.0x, cold load <= 1.0x and >= 0.8 of the warm '
          'ceiling, safetensors mmap <= 1.2x direct; daemon CPU <= 1.5 s per GB saved')
    if wbuf:
        print(f'  {wbuf}')

    # -- markdown, for tests/bench/RESULTS.md ------------------------------------------------
    cmd = ' '.join(['scripts/bench.sh'] + sys.argv[1:])
    print('\n---- markdown (tests/bench/RESULTS.md) ----\n')
    print(f'`{cmd}`, {time.strftime("%Y-%m-%d")}, {machine_line(base)}; {a.size_mib} MiB bf16 '
          f'state ({logical / 1e6:.0f} MB saved), {a.reps} reps, {elapsed / 60:.1f} min. Every '
          f'save and load in a fresh process, {", ".join(sides)} taking turns going first, '
          f'the page cache dropped before every cold read and ckptfs remounted for it.')
    print(f'Disk (fio, 1 MiB sequential, decimal MB/s): write with end_fsync {disk0[0]:.0f} '
          f'(start) / {disk1[0]:.0f} (end), mean {disk_w:.0f}; cold read {disk0[1]:.0f} / '
          f'{disk1[1]:.0f}, mean {disk_r:.0f}. Fresh memory (memset, one thread) '
          f'{disk0[2]:.0f} / {disk1[2]:.0f} MB/s. Physical limits in logical MB/s: durable save '
          f'{disk_w:.0f}; cold load {disk_r:.0f} direct, {lim_load["ckptfs"]:.0f} ckptfs (disk '
          f'read / stored/logical {s_over_l:.3f}). Cold loads: ' + '; '.join(
              f'{side} {med[f"load:sys:{side}"]:.2f} s of {med[f"load:cold:{side}"]:.2f} s in '
              f'the kernel, {med[f"load:minflt:{side}"]:.0f} page faults'
              for side in sides) + '. Cold torch.load as a fraction of the warm ceiling (warm '
          f's / cold s): {of_warm}.' + (f' {wbuf}.' if wbuf else '') +
          (f' {FLOOR}: libfuse\'s example over the same disk, -o default_permissions, read-ahead '
           f'{FLOOR_READ_AHEAD_KB} KiB (the FUSE floor).' if FLOOR in sides else
           f' No {FLOOR} floor in this run (it could not be built).'))
    print()
    print(f'| metric | median | range | ratio to direct | of physical limit | ratio to {FLOOR} |')
    print('|---|---:|---:|---:|---:|---:|')
    for label, key, unit, dkey, lim in table:
        v = rows[key]
        u = f' {unit}' if unit else ''
        r = f'{fmt(min(v), unit)}-{fmt(max(v), unit)}' if len(v) > 1 else ''
        rt = '' if ratio(key, dkey) is None else f'{ratio(key, dkey):.2f}x'
        fr = '' if lim is None else f'{fraction(key, unit, lim):.2f}'
        fl = '' if floor_ratio(key) is None else f'{floor_ratio(key):.2f}x'
        print(f'| {label} | {fmt(med[key], unit)}{u} | {r} | {rt} | {fr} | {fl} |')
    for w in warnings:
        print(f'\n{w}')


if __name__ == '__main__':
    main()
