#!/usr/bin/python3
"""Node-count and step-count scaling of one node (issue 41 item 8, "costs grow faster than the
job"; opt-in, not a test): what one real ckptfs node costs as the job it belongs to grows, on a
SYNTHETIC remote in a plain shared directory (-o remote=DIR).

For every point N nodes x S steps of the grid (default --nodes 64 256 --steps 100 1000), the
remote holds what a job of N nodes that saved S Megatron steps would have published: for every
step s in 1..S and node n0..n{N-1} one manifest, manifests/<kind>/<s>/<node>/<version>.json,
s zero-padded to 20 digits (fs/node/node_int.h NODE_STEP_DIGITS, fs/node/manifest.c), kind 2 (LAYOUT_MEGATRON, fs/policy/layout.h), name
iter_%07d, "nodes": N on every part, "sealed": true on node n1's part (n0's when N is 1), and
"files": [] (a node that wrote nothing of the step: the manifest's own cost, not its chunks').
The version is the XXH3-128 of "[]", the compact key-sorted "files", as ckptfs computes it
(libxxhash through ctypes; when that library is missing, any 32 hex digits: fs/node/node.c
learn() checks only that the key's version equals the content's). N x S files, written once per
point (256,000 at 256 x 1000) and reused by every measure of the point.

One node, n0, is mounted on an empty store (-o remote=DIR,node=n0,nodes=N,keep_checkpoint_max=2:
it shows the 2 newest global steps, so the cost measured is the remote's, not the shown files';
remote_gc=off: its gc would remove all but those steps' manifests, the job the point stands for).
Measured, on a fresh store each point:
  mount      from starting ckptfs to a read of latest_checkpointed_iteration.txt naming S (the
             daemon learns every manifest before the mount answers: node_prime);
  tracker    median of 50 reads of the tracker (open + read + close) while mounted;
  idle       the daemon's CPU seconds per wall second over --tick-seconds (10) with nothing
             changing (utime + stime of /proc/PID/stat, every thread: the node thread alone
             gives at most 1.0);
  publish    the same while a fake node publishes step S+1, S+2, ... one a second (the N
             manifests of the step, each put as the directory backend puts a key: a temporary
             name, then rename);
  new step   then one more step published (its N manifests), until the tracker names it;
  listed     manifests per listing of the remote, over the idle and publish windows, from the
             counters of .ckptfs/status ("listing:"): after = the listings that start at the
             newest global step (remote_list_after), whole = the whole listings (at mount, then
             every 60 s), which list every manifest as every listing did before; a node that
             saves lists once a tick, an idle one every 25 ticks.
A mount or a new step that passes --cap seconds (default 300) is given up and printed as
"> cap"; a mount given up has its daemon killed (its pid from STORE/lock), and the measures after
it are not taken.

Then, for each measure and each point against the smallest one, the ratio of the figures beside
the ratio of the manifests, and the exponent k = log(figure ratio) / log(manifest ratio): a cost
that grows as manifests^k is flat at k = 0, linear at 1, quadratic at 2; and the same k along each
axis between neighbouring points (nodes at fixed steps, steps at fixed nodes).

Usage: /usr/bin/python3 tests/bench/bench_nodes_scaling.py [--nodes 64 256] [--steps 100 1000]
           [--cap 300] [--tick-seconds 10] [--cache DIR]
--cache DIR keeps the generated remotes in DIR (DIR/<N>x<S>/remote) for a later run; without it
they go into a temporary directory under /tmp, removed at the end.
Environment: CKPTFS_BIN (default build/fs/ckptfs), CKPTFS_TEST_TMP (where stores go, /tmp).
"""

import sys

sys.dont_write_bytecode = True

import argparse  # noqa: E402
import ctypes  # noqa: E402
import ctypes.util  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402

KIND_MEGATRON = 2            # fs/policy/layout.h, enum layout_kind
MANIFEST_FORMAT = 'ckptfs-manifest/1'   # fs/node/node_int.h, NODE_MANIFEST_FORMAT
CREATED_NS = 1_700_000_000 * 10 ** 9    # the parts' "created_ns", + the step (seconds)
TRACKER = ckfs.TRACKER
NODE = 'n0'                  # the node mounted


class OverCap(Exception):
    """A measure passed the time cap."""


def xxh3_128_hex(data):
    """XXH3-128 of data (bytes) as ckptfs prints it (store/hash.c: the canonical, big-endian
    form), or None when libxxhash cannot be loaded."""
    class XXH128(ctypes.Structure):
        _fields_ = [('low64', ctypes.c_uint64), ('high64', ctypes.c_uint64)]
    name = ctypes.util.find_library('xxhash') or 'libxxhash.so.0'
    try:
        lib = ctypes.CDLL(name)
        fn = lib.XXH3_128bits
    except (OSError, AttributeError):
        return None
    fn.restype = XXH128
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    h = fn(data, len(data))
    return '%016x%016x' % (h.high64, h.low64)


# the version of a part with no files: XXH3-128 of json.dumps([]) compact, key-sorted
VERSION = xxh3_128_hex(b'[]') or hashlib.md5(b'[]').hexdigest()


def sealer(nodes):
    return 'n1' if nodes > 1 else 'n0'


def manifest(node, nodes, step):
    """(key, bytes) of node's part of step, as fs/node/manifest.c writes it (compact JSON)."""
    m = {'format': MANIFEST_FORMAT, 'node': node, 'nodes': nodes, 'kind': KIND_MEGATRON,
         'layout': 'megatron', 'step': step, 'name': 'iter_%07d' % step,
         'sealed': node == sealer(nodes), 'created_ns': CREATED_NS + step * 10 ** 9,
         'version': VERSION, 'dirs': [], 'files': []}
    key = 'manifests/%d/%s/%s/%s.json' % (KIND_MEGATRON, ckfs.manifest_step(step), node,
                                          VERSION)
    return key, json.dumps(m, separators=(',', ':')).encode()


def publish_step(remote, nodes, step):
    """Every node's part of step into remote, each as store/remote/remote_dir.c puts a key (a
    temporary ".tmp-" name, never listed, then rename), so the daemon never reads half a file."""
    for i in range(nodes):
        key, text = manifest('n%d' % i, nodes, step)
        path = os.path.join(remote, key)
        d = os.path.dirname(path)
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, '.tmp-bench%d' % os.getpid())
        with open(tmp, 'wb') as f:
            f.write(text)
        os.rename(tmp, path)


def generate(remote, nodes, steps):
    """Write the remote of a job of nodes x steps (module comment). Returns seconds taken."""
    t0 = time.monotonic()
    for s in range(1, steps + 1):
        top = os.path.join(remote, 'manifests', str(KIND_MEGATRON), ckfs.manifest_step(s))
        for i in range(nodes):
            _, text = manifest('n%d' % i, nodes, s)
            d = os.path.join(top, 'n%d' % i)
            os.makedirs(d)
            fd = os.open(os.path.join(d, VERSION + '.json'), os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, text)
            os.close(fd)
    return time.monotonic() - t0


def remote_for(cache, nodes, steps):
    """The synthetic remote of nodes x steps under cache, generated unless a complete one is
    there, and reset to what generate wrote: what a mount or a publish added is removed."""
    point = os.path.join(cache, '%dx%d' % (nodes, steps))
    remote = os.path.join(point, 'remote')
    done = os.path.join(point, 'complete')
    try:
        with open(done) as f:
            complete = f.read().strip() == VERSION
    except FileNotFoundError:
        complete = False
    if not complete:
        shutil.rmtree(point, ignore_errors=True)
        os.makedirs(remote)
        secs = generate(remote, nodes, steps)
        with open(done, 'w') as f:
            f.write('%s\n' % VERSION)
        print('  generated %d manifests in %.1f s' % (nodes * steps, secs), flush=True)
    for e in os.listdir(remote):
        if e != 'manifests':   # nodes/ (presence), dirs/, uploads/: the last mount's
            p = os.path.join(remote, e)
            if os.path.isdir(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
    kdir = os.path.join(remote, 'manifests', str(KIND_MEGATRON))
    for e in os.listdir(kdir):
        if int(e) > steps:
            shutil.rmtree(os.path.join(kdir, e))
    return remote


def cpu_seconds(pid):
    """utime + stime of process pid, seconds (/proc/PID/stat fields 14 and 15: every thread,
    those that ended included)."""
    with open('/proc/%d/stat' % pid) as f:
        s = f.read()
    fields = s[s.rfind(')') + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def wait_tracker(m, want, deadline):
    """Poll the tracker every 10 ms until it names want; OverCap at deadline (monotonic)."""
    while (ckfs.read_tracker(m) or '').strip() != want:
        if time.monotonic() > deadline:
            raise OverCap()
        time.sleep(0.01)


def mount(remote, nodes, steps, cap):
    """(Mount, seconds from starting ckptfs to the tracker naming steps). OverCap (the daemon
    killed, nothing left mounted) when that passes cap seconds."""
    m = ckfs.Mount(opts=['remote=' + remote, 'node=' + NODE, 'nodes=%d' % nodes,
                         'keep_checkpoint_max=2', 'remote_gc=off'])
    ckfs.MOUNT_TIMEOUT = cap     # read by Mount.start at each call
    t0 = time.monotonic()
    try:
        m.start()
    except ckfs.MountError:
        over = time.monotonic() - t0 >= cap
        release(m)
        if over:
            raise OverCap() from None
        raise
    try:
        wait_tracker(m, str(steps), t0 + cap)
    except OverCap:
        unmount(m, cap)
        raise
    return m, time.monotonic() - t0


def release(m):
    """After a start that failed or passed the cap: SIGKILL the daemon of m's store if it still
    runs, detach its mount and remove its directories. Mount.start's own cleanup looks at the
    mount before it kills the daemon, which may mount in between and leave a dead mount."""
    pid = ckfs.store_daemon_pid(m.store)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
        ckfs.wait_pid_exit(pid, 30)
    if ckfs.is_fuse_mounted(m.mnt):
        ckfs.run(['fusermount3', '-uz', m.mnt], timeout=60)
    m.close()


def unmount(m, cap):
    """Unmount m, waiting up to cap seconds for the daemon (then SIGKILL, by Mount.unmount), and
    remove its store. Returns a note when the daemon had to be killed, else ''."""
    note = ''
    try:
        m.unmount(timeout=cap)
    except ckfs.MountError as e:
        note = str(e).splitlines()[0]
    m.close()
    return note


def tracker_latency(m, want, reps=50):
    """Median seconds of reps tracker reads (open + read + close), each naming want."""
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        with open(m.path(TRACKER)) as f:
            got = f.read().strip()
        t.append(time.perf_counter() - t0)
        assert got == want, (got, want)
    return statistics.median(t)


def tick_cost(m, seconds, publish=None):
    """The daemon's CPU seconds per wall second over seconds; publish(k), when given, is called
    at the start of second k = 0, 1, ..."""
    c0, t0 = cpu_seconds(m.pid), time.monotonic()
    for k in range(int(seconds)):
        if publish:
            publish(k)
        time.sleep(max(0.0, t0 + k + 1 - time.monotonic()))
    return (cpu_seconds(m.pid) - c0) / (time.monotonic() - t0)


MEASURES = ('mount s', 'tracker ms', 'idle cpu s/s', 'publish cpu s/s', 'new step s',
            'listed after', 'listed whole')


def listings(m):
    """((partial listings, their manifests), (whole listings, their manifests)) so far, from
    .ckptfs/status (fs/node/node.c node_status, "listing:")."""
    t = re.search(r'listing: +\d+ manifests at the last; (\d+) listings after the newest '
                  r'global step \((\d+) manifests\), (\d+) whole \((\d+) manifests\)',
                  m.status_text())
    v = [int(x) for x in t.groups()]
    return (v[0], v[1]), (v[2], v[3])


def per_listing(a, b):
    """Manifests per listing between counters a and b ((listings, manifests)), or None."""
    return (b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] else None


def measure_point(cache, nodes, steps, cap, tick_s):
    """{measure: figure, float or OverCap()} for one point; a measure not taken is None."""
    out = dict.fromkeys(MEASURES)
    remote = remote_for(cache, nodes, steps)
    try:
        m, out['mount s'] = mount(remote, nodes, steps, cap)
    except OverCap:
        out['mount s'] = OverCap()
        return out
    try:
        out['tracker ms'] = tracker_latency(m, str(steps)) * 1e3
        l0 = listings(m)
        out['idle cpu s/s'] = tick_cost(m, tick_s)
        out['publish cpu s/s'] = tick_cost(
            m, tick_s, lambda k: publish_step(remote, nodes, steps + 1 + k))
        l1 = listings(m)
        out['listed after'] = per_listing(l0[0], l1[0])
        out['listed whole'] = per_listing(l0[1], l1[1])
        last = steps + int(tick_s) + 1
        t0 = time.monotonic()
        publish_step(remote, nodes, last)
        try:
            wait_tracker(m, str(last), t0 + cap)
            out['new step s'] = time.monotonic() - t0
        except OverCap:
            out['new step s'] = OverCap()
    finally:
        note = unmount(m, cap)
        if note:
            print('  unmount: %s' % note, flush=True)
    return out


def fmt(v, cap):
    if v is None:
        return '-'
    if isinstance(v, OverCap):
        return '> %g s cap' % cap
    return '%.4g' % v


def growth(v, b, x, cap):
    """Text of figure v against figure b at x times the size: 'R x (k K)' with v / b = x^K,
    '> ...' when v passed the cap, '-' when either is missing or b passed the cap."""
    if v is None or b is None or isinstance(b, OverCap) or b <= 0:
        return '-'
    pre, q = ('> ', cap / b) if isinstance(v, OverCap) else ('', v / b)
    if x <= 1 or q <= 0:
        return '%s%.3gx' % (pre, q)
    return '%s%.3gx (k %s%.2f)' % (pre, q, pre, math.log(q) / math.log(x))


def print_tables(rows, cap):
    print('\n| nodes | steps | manifests | %s |' % ' | '.join(MEASURES))
    print('|---:|---:|---:|' + '---:|' * len(MEASURES))
    for n, s, r in rows:
        print('| %d | %d | %d | %s |' % (n, s, n * s, ' | '.join(fmt(r[k], cap)
                                                               for k in MEASURES)))
    by = {(n, s): r for n, s, r in rows}
    (bn, bs) = min(by, key=lambda p: p[0] * p[1])
    print('\nAgainst %d x %d: the figure\'s ratio and k, figure ~ manifests^k (0 flat, 1 linear, '
          '2 quadratic)\n' % (bn, bs))
    print('| nodes | steps | manifests | %s |' % ' | '.join(MEASURES))
    print('|---:|---:|---:|' + '---:|' * len(MEASURES))
    for n, s, r in rows:
        if (n, s) != (bn, bs):
            x = n * s / (bn * bs)
            print('| %d | %d | %.3gx | %s |' % (n, s, x, ' | '.join(
                growth(r[k], by[bn, bs][k], x, cap) for k in MEASURES)))
    nodes = sorted({n for n, _ in by})
    steps = sorted({s for _, s in by})
    if len(nodes) * len(steps) <= 2:
        return
    print('\nAlong one axis, between neighbouring points: k, figure ~ nodes^k (steps fixed) or '
          'steps^k (nodes fixed)\n')
    print('| from | to | %s |' % ' | '.join(MEASURES))
    print('|---|---|' + '---:|' * len(MEASURES))
    pairs = [((a, s), (b, s)) for s in steps for a, b in zip(nodes, nodes[1:])]
    pairs += [((n, a), (n, b)) for n in nodes for a, b in zip(steps, steps[1:])]
    for p, q in pairs:
        x = q[0] * q[1] / (p[0] * p[1])
        print('| %d x %d | %d x %d | %s |' % (p + q + (' | '.join(
            growth(by[q][k], by[p][k], x, cap) for k in MEASURES),)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--nodes', type=int, nargs='+', default=[64, 256])
    ap.add_argument('--steps', type=int, nargs='+', default=[100, 1000])
    ap.add_argument('--cap', type=float, default=300.0, help='seconds a measure may take')
    ap.add_argument('--tick-seconds', type=float, default=10.0)
    ap.add_argument('--cache', default=None, help='keep the generated remotes here')
    a = ap.parse_args()
    ckfs.check_fuse_usable()
    if any(n < 1 for n in a.nodes) or any(s < 3 for s in a.steps):
        ap.error('nodes >= 1 and steps >= 3 (keep_checkpoint_max=2 below the newest)')
    cache = a.cache or tempfile.mkdtemp(prefix='ckptfs-bench-nodes-', dir='/tmp')
    rows = []
    print('ckptfs %s, manifest version %s, cap %g s' % (ckfs.ckptfs_bin(), VERSION, a.cap))
    try:
        for n in sorted(a.nodes):
            for s in sorted(a.steps):
                print('%d nodes x %d steps:' % (n, s), flush=True)
                r = measure_point(cache, n, s, a.cap, a.tick_seconds)
                print('  ' + ', '.join('%s %s' % (k, fmt(r[k], a.cap)) for k in MEASURES),
                      flush=True)
                rows.append((n, s, r))
    finally:
        if not a.cache:
            shutil.rmtree(cache, ignore_errors=True)
    print_tables(rows, a.cap)


if __name__ == '__main__':
    main()
