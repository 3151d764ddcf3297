#!/usr/bin/python3
"""trainer.py - a small but real data-parallel PyTorch training program that saves and resumes
checkpoints with the exact file operations of a real framework (see
../../../shared/research/framework-io.md), implemented by hand with plain POSIX/Python file I/O
and torch.save, because the frameworks themselves are not installed. The layouts' saves and
resumes are in trainer_layouts.py (a mixin of Job).

Model: a character-level transformer language model (2 layers, d=128) on
/usr/share/common-licenses/GPL-3, CPU, deterministic seeds, one thread per rank.
Ranks: --ranks R processes (default 2) over gloo, MASTER_ADDR=127.0.0.1 and a free port;
gradients are averaged with all_reduce (data parallel), so every rank holds the same state.
"Sharded" files (per-rank model/optimizer shards) hold the parameters i with i % world == rank.

    trainer.py --layout {mf2,megatron,mf1,deepspeed,hf,dcp,internevo,internevo-snap,orbax,
                         lightning,lightning-link}
               --save DIR --steps N
               --save-every K [--keep K] [--resume] [--ranks R] [--log FILE]
               [--slow-save SECONDS] [--exit-in-save N]

stdout (rank 0): `STEP s loss=L`, `SAVING s` (a save begins), `SAVED s` (the save is complete:
printed after the framework's tracker/marker is written and every rank is done), `RESUMED step=S
loss=L digest=D` or `FRESH` (no checkpoint found: starts from step 0, as the framework does).
--log FILE (outside DIR; appended by every rank, one line per write(2)): the same events plus
`WROTE step= rank= path= sha256=` after every file a rank finished writing (path relative to DIR,
final name), `STATE step= digest=` (sha256 of every tensor of the full model+optimizer state at
the save), `LOADED rank= path= sha256=` for every file read on resume. On resume, if --log is
given, the trainer itself checks that every file it loaded hashes to the last WROTE of that path
and that the loaded state's digest equals the STATE of that step; a mismatch is `VERIFY FAIL` and
exit status 3. --slow-save SECONDS sleeps between the files of a save, and SECONDS/2 between the
pieces of each file (ranks other than 0 sleep 4x as long, and DeepSpeed's rank 0 writes
zero_to_fp32.py and `latest` without a pause, so `latest`, written by rank 0 before the barrier,
names a step another rank is still writing, as happens with real DeepSpeed), so a test can kill
the job in the middle of a save.

Retention (--keep, 0 = none) as the framework does it: mf2 removes the oldest iteration_ dirs
BEFORE saving, counting the new empty dir; mf1 removes the oldest .ckpt by mtime BEFORE saving
when count >= keep; hf rotates by directory mtime after saving; dcp (torchtitan) purges the oldest
step-N after saving, counting incomplete dirs; orbax (max_to_keep) removes the oldest committed
step dirs after the commit; lightning (ModelCheckpoint) removes the previous file after the
new one is written (keep=1: save_top_k=1, monitor=None; keep=k>=2: monitor="step", mode="max",
the oldest of the k+1; keep=0: save_top_k=-1, none). megatron, deepspeed and internevo keep
everything.
"""

import argparse
import datetime
import hashlib
import json
import mmap
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from ckptformats import file_sha256, safetensors_load, sha256  # noqa: E402
from trainer_layouts import D_MODEL, Layouts  # noqa: E402

LAYOUTS = ('mf2', 'megatron', 'mf1', 'deepspeed', 'hf', 'dcp', 'internevo', 'internevo-snap',
           'orbax', 'lightning', 'lightning-link')
TEXT = '/usr/share/common-licenses/GPL-3'
SEQ = 64
BATCH = 8
N_LAYERS = 2
LR = 3e-3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--layout', required=True, choices=LAYOUTS)
    p.add_argument('--save', required=True)
    p.add_argument('--steps', type=int, required=True)
    p.add_argument('--save-every', type=int, required=True)
    p.add_argument('--keep', type=int, default=0)
    p.add_argument('--resume', action='store_true')
    p.add_argument('--ranks', type=int, default=2)
    p.add_argument('--log', default=None)
    p.add_argument('--slow-save', type=float, default=0.0)
    p.add_argument('--ds-fast-writer', action='store_true',
                   help="deepspeed: DeepSpeed's optional FastFileWriter engine (O_DIRECT) "
                        'instead of the default torch.save')
    p.add_argument('--exit-in-save', type=int, default=0,
                   help='rank 0 calls os._exit(17) right after its first file of the Nth save '
                        'of this run (a torn save with no file torn by a kill)')
    p.add_argument('--worker-rank', type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.steps < 0 or a.save_every < 1 or a.ranks < 1 or a.keep < 0:
        p.error('bad --steps/--save-every/--ranks/--keep')
    return a


# -- launcher ---------------------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def launch(args):
    """Start one process per rank (same process group as us), wait; if one fails, stop the rest."""
    env = dict(os.environ, MASTER_ADDR='127.0.0.1', MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(args.ranks), OMP_NUM_THREADS='1', PYTHONUNBUFFERED='1')
    argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    procs = []
    for r in range(args.ranks):
        procs.append(subprocess.Popen(argv + ['--worker-rank', str(r)],
                                      env=dict(env, RANK=str(r))))
    rc = 0
    live = list(procs)
    while live:
        for p in list(live):
            c = p.poll()
            if c is None:
                continue
            live.remove(p)
            if c != 0 and rc == 0:
                rc = c if c > 0 else 1
                sys.stderr.write('trainer: a rank exited with status %d; stopping the others\n'
                                 % c)
                for q in live:
                    q.kill()
        time.sleep(0.05)
    return rc


# -- logging ----------------------------------------------------------------------------------

class Out:
    def __init__(self, rank, log):
        self.rank = rank
        self.fd = None
        if log:
            self.fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(self, line):
        if self.fd is not None:
            os.write(self.fd, (line + '\n').encode())

    def say(self, line):
        """rank 0: stdout and log."""
        if self.rank == 0:
            os.write(1, (line + '\n').encode())
            self.log(line)


# -- model and data ---------------------------------------------------------------------------

def build(torch):
    import torch.nn as nn

    with open(TEXT, encoding='utf-8') as f:
        text = f.read()
    vocab = sorted(set(text))
    stoi = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)

    class CharLM(nn.Module):
        def __init__(self, v):
            super().__init__()
            self.tok = nn.Embedding(v, D_MODEL)
            self.pos = nn.Embedding(SEQ, D_MODEL)
            layer = nn.TransformerEncoderLayer(D_MODEL, 4, 2 * D_MODEL, dropout=0.0,
                                               batch_first=True)
            self.enc = nn.TransformerEncoder(layer, N_LAYERS)
            self.head = nn.Linear(D_MODEL, v)
            self.register_buffer('mask', torch.triu(torch.full((SEQ, SEQ), float('-inf')),
                                                    diagonal=1), persistent=False)

        def forward(self, x):
            h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
            h = self.enc(h, mask=self.mask[:x.shape[1], :x.shape[1]])
            return self.head(h)

    torch.manual_seed(1234)
    model = CharLM(len(vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    return model, opt, data


def full_state(model, opt):
    """Ordered {name: tensor} of the model parameters and the AdamW state, by parameter index."""
    sd = {}
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    for n, p in zip(names, params):
        sd['model.' + n] = p.detach().clone()
    for n, p in zip(names, params):
        st = opt.state.get(p, {})
        for k in ('step', 'exp_avg', 'exp_avg_sq'):
            if k in st:
                v = st[k]
                sd['optim.%s.%s' % (n, k)] = (v.detach().clone() if hasattr(v, 'detach')
                                               else __import__('torch').tensor(float(v)))
    return sd


def digest(sd):
    h = hashlib.sha256()
    for k in sorted(sd):
        t = sd[k].detach().contiguous().cpu()
        h.update(k.encode())
        h.update(str(t.dtype).encode())
        h.update(str(list(t.shape)).encode())
        h.update(t.view(-1).view(__import__('torch').uint8).numpy().tobytes()
                 if t.numel() else b'')
    return h.hexdigest()


# -- file writing with the framework's syscalls ------------------------------------------------

def save_root(args, rank, world):
    """The save directory of rank: --save DIR, or DIR_0,DIR_1,... one per node of a job on
    several nodes (each node's ranks see their node's mount; node k holds ranks
    k*world/n .. (k+1)*world/n - 1, as torchrun places them)."""
    dirs = args.save.split(',')
    return os.path.abspath(dirs[rank * len(dirs) // world])


class Saver:
    def __init__(self, args, rank, world, out):
        self.a = args
        self.rank = rank
        self.world = world
        self.out = out
        self.root = save_root(args, rank, world)
        self.slow = args.slow_save * (1.0 if rank == 0 else 4.0)
        self.step = None
        self.nsave = 0     # saves begun by this run

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def pause(self, frac=1.0):
        if self.slow > 0:
            time.sleep(self.slow * frac)

    def pieces(self, data, n=4):
        k = max(1, -(-len(data) // n))
        return [data[i:i + k] for i in range(0, len(data), k)] or [b'']

    def wrote(self, final_path, data):
        self.out.log('WROTE step=%d rank=%d path=%s sha256=%s' %
                     (self.step, self.rank, self.rel(final_path), sha256(data)))
        if self.rank == 0 and self.a.exit_in_save and self.nsave == self.a.exit_in_save:
            self.out.log('EXIT rank=0 step=%d after %s' % (self.step, self.rel(final_path)))
            os._exit(17)   # its files are closed; the launcher stops the other ranks

    def intend(self, final_path, data):
        """Log `WILL` before the first byte of a file goes out: a kill can land after the file
        is whole (and the step complete) but before its WROTE line, so the checkers accept
        bytes equal to the last intended content too (a torn file never equals it)."""
        self.out.log('WILL step=%d rank=%d path=%s sha256=%s' %
                     (self.step, self.rank, self.rel(final_path), sha256(data)))

    def write(self, path, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, fsync=False,
              final=None, mode=0o644, pause=True):
        """open(flags), sequential writes (pieces, with pauses when slow), [fsync], close."""
        if pause:
            self.pause()
        self.intend(final or path, data)
        fd = os.open(path, flags, mode)
        try:
            ps = self.pieces(data)
            for i, piece in enumerate(ps):
                view = memoryview(piece)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                if i + 1 < len(ps):
                    self.pause(0.5 / len(ps))
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if final is None:
            self.wrote(path, data)
        return path

    def write_odirect(self, path, data):
        """DeepSpeed FastFileWriter: O_DIRECT pwrite of the aligned part from a page-aligned
        buffer, at offsets (second half first, as parallel aio may complete), then reopen with
        O_APPEND for the unaligned tail, fsync."""
        self.pause()
        self.intend(path, data)
        align = 4096
        n_al = len(data) // align * align
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        except OSError:
            # a filesystem without O_DIRECT (tmpfs): DeepSpeed would fail; write normally
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if n_al:
                half = (n_al // align // 2) * align
                spans = [(half, n_al), (0, half)] if half else [(0, n_al)]
                for j, (b, e) in enumerate(spans):
                    if e <= b:
                        continue
                    buf = mmap.mmap(-1, e - b)
                    buf[:] = data[b:e]
                    try:
                        os.pwrite(fd, buf, b)
                    finally:
                        buf.close()
                    if j + 1 < len(spans):
                        self.pause(0.25)
        finally:
            os.close(fd)
        self.pause(0.25)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            tail = data[n_al:]
            if tail:
                os.write(fd, tail)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.wrote(path, data)

    def rename_0400(self, tmp, final, data):
        os.rename(tmp, final)
        os.chmod(final, 0o400)
        self.wrote(final, data)

    def json_named_tmp_replace(self, path, obj):
        """tempfile.NamedTemporaryFile('w', dir=..., delete=False) (O_EXCL, 0600, random
        name), write, flush, fsync, os.replace (MindFormers CommonInfo.save_common,
        save_metadata)."""
        data = json.dumps(obj, indent=2).encode()
        self.pause()
        self.intend(path, data)
        with tempfile.NamedTemporaryFile('wb', dir=os.path.dirname(path), delete=False) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(f.name, path)
        self.wrote(path, data)

    def plain_text(self, path, text, pause=True):
        """open(path, 'w').write(text): O_TRUNC, no fsync, no rename."""
        if pause:
            self.pause()
        self.intend(path, text.encode())
        with open(path, 'w') as f:
            f.write(text)
        self.wrote(path, text.encode())


# -- the training program ---------------------------------------------------------------------

class Job(Layouts):
    def __init__(self, args, rank, world):
        import torch
        import torch.distributed as dist
        self.torch = torch
        self.dist = dist
        self.a = args
        self.rank = rank
        self.world = world
        self.root = save_root(args, rank, world)
        self.out = Out(rank, args.log)
        self.sv = Saver(args, rank, world, self.out)
        torch.set_num_threads(1)
        self.model, self.opt, self.data = build(torch)
        self.gen = torch.Generator().manual_seed(1000 + rank)
        self.loaded = []   # (path, sha256) read on resume

    # collective helpers ------------------------------------------------------------------
    def barrier(self):
        self.dist.barrier()

    def bcast(self, obj):
        lst = [obj]
        self.dist.broadcast_object_list(lst, src=0)
        return lst[0]

    def gather(self, obj):
        lst = [None] * self.world
        self.dist.all_gather_object(lst, obj)
        return lst

    # training -----------------------------------------------------------------------------
    def train_step(self):
        torch = self.torch
        ix = torch.randint(len(self.data) - SEQ - 1, (BATCH,), generator=self.gen)
        x = torch.stack([self.data[i:i + SEQ] for i in ix])
        y = torch.stack([self.data[i + 1:i + SEQ + 1] for i in ix])
        logits = self.model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        for p in self.model.parameters():
            self.dist.all_reduce(p.grad)
            p.grad.div_(self.world)
        self.opt.step()
        lt = loss.detach().clone()
        self.dist.all_reduce(lt)
        return float(lt.item() / self.world)

    def run(self):
        start, loss = 0, None
        if self.a.resume:
            res = self.resume()
            if res is None:
                self.out.say('FRESH')
            else:
                start, loss = res
                sd = full_state(self.model, self.opt)
                dg = digest(sd)
                self.out.say('RESUMED step=%d loss=%.6f digest=%s' % (start, loss, dg))
                for path, h in self.loaded:
                    self.out.log('LOADED rank=%d path=%s sha256=%s' %
                                 (self.rank, os.path.relpath(path, self.root), h))
                self.verify(start, dg)
        os.makedirs(self.root, exist_ok=True)
        for step in range(start + 1, self.a.steps + 1):
            loss = self.train_step()
            self.out.say('STEP %d loss=%.6f' % (step, loss))
            if step % self.a.save_every == 0:
                self.save(step, loss)
        self.barrier()

    def verify(self, step, dg):
        """Compare what was loaded with what the writers logged (before this run)."""
        if not self.a.log:
            return
        wrote, will, state = {}, {}, {}
        with open(self.a.log, errors='replace') as f:
            lines = f.read().splitlines()
        # this run's own LOADED/RESUMED lines are after the last START; use what precedes it
        cut_i = max(i for i, ln in enumerate(lines) if ln.startswith('START '))
        for ln in lines[:cut_i]:
            f = kv(ln)
            # keyed by (step, path) too: a slot (InternEvo snapshot/K) reuses its paths
            if ln.startswith('WROTE '):
                wrote[f['path']] = wrote[(int(f['step']), f['path'])] = f['sha256']
            elif ln.startswith('WILL '):
                will[f['path']] = will[(int(f['step']), f['path'])] = f['sha256']
            elif ln.startswith('STATE '):
                state[int(f['step'])] = f['digest']
        bad = []
        for path, h in self.loaded:
            rel = os.path.relpath(path, self.root)
            key = (step, rel) if (step, rel) in wrote or (step, rel) in will else rel
            if h not in (wrote.get(key), will.get(key)):
                bad.append('%s: read %s, written %s' % (rel, h[:16], (wrote.get(rel) or
                                                                      'never')[:16]))
        if state.get(step) != dg:
            bad.append('state digest %s != saved %s' % (dg[:16], (state.get(step) or
                                                                  'none')[:16]))
        if bad:
            os.write(2, ('VERIFY FAIL rank %d step %d: %s\n' % (self.rank, step,
                                                                '; '.join(bad))).encode())
            self.out.log('VERIFY FAIL rank=%d step=%d' % (self.rank, step))
            sys.exit(3)
        self.out.say('VERIFY ok step=%d files=%d' % (step, len(self.loaded)))

    # reading helpers ----------------------------------------------------------------------
    def read_file(self, path):
        with open(path, 'rb') as f:
            b = f.read()
        self.loaded.append((path, sha256(b)))
        return b

    def tload(self, path):
        """torch.load(path) as the framework does; the file is also hashed."""
        self.loaded.append((path, file_sha256(path)))
        return self.torch.load(path, map_location='cpu')

    def stload(self, path):
        self.loaded.append((path, file_sha256(path)))
        return safetensors_load(path)

    def rng_state(self):
        return {'gen': self.gen.get_state(), 'torch': self.torch.get_rng_state(),
                'python': random.getstate()}

    def set_rng(self, st):
        self.gen.set_state(st['gen'])
        if 'torch' in st:
            self.torch.set_rng_state(st['torch'])

    # save / resume dispatch ---------------------------------------------------------------
    def save(self, step, loss):
        self.out.say('SAVING %d' % step)
        self.sv.step = step
        self.sv.nsave += 1
        sd = full_state(self.model, self.opt)
        self.out.say('STATE step=%d digest=%s' % (step, digest(sd)))
        getattr(self, 'save_' + self.a.layout.replace('-', '_'))(step, loss, sd)

    def saved(self, step, loss):
        self.out.say('SAVED %d loss=%.6f' % (step, loss))

    def resume(self):
        return getattr(self, 'resume_' + self.a.layout.replace('-', '_'))()


def kv(line):
    return dict(x.split('=', 1) for x in line.split()[1:] if '=' in x)


def worker(args):
    import torch.distributed as dist
    rank = int(os.environ['RANK'])
    world = int(os.environ['WORLD_SIZE'])
    dist.init_process_group('gloo', rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    job = Job(args, rank, world)
    if rank == 0:
        job.out.log('START layout=%s resume=%d steps=%d pid=%d' %
                    (args.layout, int(args.resume), args.steps, os.getpid()))
    # every rank must see START before it reads the log in verify()
    job.barrier()
    job.run()
    dist.destroy_process_group()
    return 0


def main():
    args = parse_args()
    if args.worker_rank is None:
        return launch(args)
    return worker(args)


if __name__ == '__main__':
    sys.exit(main())
