#!/usr/bin/python3
"""The daemon, `ckptctl import` and `ckptctl fsck` judge the same checkpoints the same way: they
all call the one policy module (fs/policy/policy.h). For each layout, the same trainer sequence
is written four ways, and the states of the steps compared once the store has been mounted:

  live    written through a mounted ckptfs, claim after claim;
  import  written into a plain directory (where only the last tracker write survives), then
          `ckptctl import` into a fresh store;
  mounted the same plain directory imported into a running mount (issue 40): ckptctl copies it
          through the mount point, markers and trackers after the files they seal, and the
          claims of older steps the last tracker stands for written before it, so the daemon,
          which knows every claim, judges it as the live save;
  fsck    the imported store with its step records deleted (as a salvage that lost them
          would leave it), rebuilt by `ckptctl fsck` from the directories, the recorded
          claims and the markers.

The cases, one store per layout, each with a step the layout's own evidence shows complete and
steps that are not:
  megatron   10, 20 complete; 30 claimed by the tracker but its file torn half-way
             (malformed); 40 whole but never claimed, written by one process: a copy (policy
             rule 3), left at its name as `copied` by the live mount and by both imports (the
             import is its one writer). fsck alone sets it aside: the record it rebuilds has
             lost who wrote the step, and a step whose writers are unknown may be a crashed
             save, never a copy
  deepspeed  10 complete; 20 claimed by `latest` but one rank's optimizer shard never written
             (the previous complete step's names are the record of what a step holds)
  mf2        10 complete; 20 claimed, but its metadata.json lists a file that is not there
             (mindformers checkpoint.py verify_ckpt_valid checks the listed files exist)
  dcp        10 sealed by its .metadata (renamed into place last); 20 without one
  internevo  10 sealed by its 10.step, written last (tests/traces/internevo.md); 30 sealed but
             a file torn half-way; 20 without its marker and `2024/` of logs are directories
             named by digits with no InternEvo evidence: no steps at all
  hf         10 and 40 complete; 20 and 50 without their trainer_state.json; 30 sealed but one
             rank's rng_state never written: complete to a daemon that saw step 40 started
             after its seal, incomplete by the previous step's names elsewhere (ORDER_ONLY);
             60 and 70 saved as transformers 4.36 does, into tmp-checkpoint-N/ with its
             trainer_state.json, 70 renamed to checkpoint-70/ (complete), 60 left under its
             tmp name (incomplete: a tmp directory is sealed by its rename only, rule 1; on
             6d11687 import and fsck sealed it by its marker)
  mf1        per-rank files, no step directory, each rank's meta.json naming 20 last: 10
             complete on both ranks; 20 with rank 1's file torn half-way and 30 saved by rank 0
             only stay writing (a rank may still save them: MF1 steps are never set aside)
  orbax      10 and 20 committed by renaming their tmp directory (no commit file; 20's shard
             torn); 30 left under its tmp name; 40 written in place with InternEvo's 40.step
             first and Orbax's commit_success.txt after it: Orbax's step (policy_marker_kind).
             Only a live mount sees a rename: elsewhere 10 and 20 are no steps (RENAME_ONLY)
  lightning  step files at the root (tests/traces/lightning.md): 10 whole, with last.ckpt a
             copy of it; 20 written torn (half a torch zip: no end of central directory), no
             step at all; 30 whole under a re-save's name (`-v1`)
Each step's layout is compared too.

Before the policy module, import judged deepspeed 20 and mf2 20 complete (it checked neither
the previous step's names nor metadata.json), and fsck sealed steps only from tracker claims,
of any layout, so it set aside every DCP step. Before policy_step_facts (issue 43), the daemon
made orbax 40 an InternEvo step, import made no step of orbax 30 (a tmp name) nor of any mf1
file (and stored meta.json as a file), and fsck made no mf1 step again.

Run: /usr/bin/python3 tests/tools/test_policy_agreement.py  (CKPTFS_BIN / CKPTCTL_BIN)
"""

import sys
import os

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import faulthandler  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

import ckfs  # noqa: E402

PY = '/usr/bin/python3'

# One trainer sequence per layout, written into ROOT (a mount or a plain directory) in order,
# trackers included; file formats as the frameworks write them (tests/traces/).
WRITER = r'''
import io, json, os, struct, sys, torch
layout, root = sys.argv[1], sys.argv[2]

def tsave(path, step):
    torch.manual_seed(step)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save({"w": torch.randn(64, 64), "step": step}, path)

def torn(path, step):
    tsave(path, step)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)

def text(path, s):
    with open(path, "w") as f:
        f.write(s)

def safetensors(path, step):
    t = torch.full((16,), float(step))
    b = t.numpy().tobytes()
    h = json.dumps({"w": {"dtype": "F32", "shape": [16], "data_offsets": [0, len(b)]}},
                   separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b)

if layout == "megatron":
    for step in (10, 20, 30, 40):
        f = os.path.join(root, "iter_%07d" % step, "mp_rank_00", "model_optim_rng.pt")
        (torn if step == 30 else tsave)(f, step)
        if step != 40:
            text(os.path.join(root, "latest_checkpointed_iteration.txt"), str(step))
elif layout == "deepspeed":
    for step in (10, 20):
        d = os.path.join(root, "global_step%d" % step)
        tsave(os.path.join(d, "mp_rank_00_model_states.pt"), step)
        tsave(os.path.join(d, "zero_pp_rank_0_mp_rank_00_optim_states.pt"), step)
        if step == 10:
            tsave(os.path.join(d, "zero_pp_rank_1_mp_rank_00_optim_states.pt"), step)
        text(os.path.join(root, "latest"), "global_step%d" % step)
elif layout == "mf2":
    names = ["model-%07d-0000002.safetensors" % r for r in (0, 1)]
    for step in (10, 20):
        d = os.path.join(root, "iteration_%08d" % step)
        for r, n in enumerate(names):
            if step == 10 or r == 0:
                safetensors(os.path.join(d, n), step)
        text(os.path.join(d, "metadata.json"),
             json.dumps({"storage_data": {"w": [{"file_name": n} for n in names]}}))
        text(os.path.join(root, "latest_checkpointed_iteration.txt"), str(step))
elif layout == "dcp":
    for step in (10, 20):
        d = os.path.join(root, "step-%d" % step)
        for r in (0, 1):
            tsave(os.path.join(d, "__%d_0.distcp" % r), step)
        if step == 10:
            tsave(os.path.join(d, ".metadata.tmp"), step)
            os.rename(os.path.join(d, ".metadata.tmp"), os.path.join(d, ".metadata"))
elif layout == "internevo":
    for step in (10, 20, 30):
        d = os.path.join(root, str(step))
        (torn if step == 30 else tsave)(os.path.join(d, "model_tp0_pp0.pt"), step)
        tsave(os.path.join(d, "context.pt"), step)
        if step != 20:
            torch.save({"step": step}, os.path.join(d, "%d.step" % step))
    os.makedirs(os.path.join(root, "2024", "sub"))
    text(os.path.join(root, "2024", "sub", "log"), "x\n")
elif layout == "hf":
    for step in (10, 20, 30, 40, 50):
        d = os.path.join(root, "checkpoint-%d" % step)
        tsave(os.path.join(d, "optimizer.pt"), step)
        for r in (0, 1):
            if step != 30 or r == 0:
                tsave(os.path.join(d, "rng_state_%d.pth" % r), step)
        if step not in (20, 50):
            text(os.path.join(d, "trainer_state.json"), json.dumps({"global_step": step}))
    # transformers 4.36: into tmp-checkpoint-N/, renamed to checkpoint-N/ last (70); 60 left
    # under its tmp name, its trainer_state.json inside
    for step in (60, 70):
        d = os.path.join(root, "tmp-checkpoint-%d" % step)
        tsave(os.path.join(d, "optimizer.pt"), step)
        for r in (0, 1):
            tsave(os.path.join(d, "rng_state_%d.pth" % r), step)
        text(os.path.join(d, "trainer_state.json"), json.dumps({"global_step": step}))
        if step == 70:
            os.rename(d, os.path.join(root, "checkpoint-%d" % step))
elif layout == "mf1":
    for step in (10, 20, 30):
        for r in (0, 1):
            d = os.path.join(root, "rank_%d" % r)
            f = os.path.join(d, "llama_rank_%d-1_%d.ckpt" % (r, step))
            if step == 30 and r == 1:
                continue
            (torn if step == 20 and r == 1 else tsave)(f + ".tmp", step)
            os.rename(f + ".tmp", f)
            if step != 30:
                text(os.path.join(d, "meta.json"),
                     json.dumps({"last_epoch": 1, "last_step": step,
                                 "last_ckpt_file": os.path.basename(f)}))
elif layout == "lightning":
    import shutil
    for step, name in ((10, "epoch=0-step=10.ckpt"), (20, "epoch=0-step=20.ckpt"),
                       (30, "epoch=1-step=30-v1.ckpt")):
        path = os.path.join(root, name)
        if step == 20:
            b = io.BytesIO()
            torch.manual_seed(step)
            torch.save({"w": torch.randn(64, 64), "step": step}, b)
            with open(path, "wb") as f:
                f.write(b.getvalue()[:len(b.getvalue()) // 2])
        else:
            tsave(path, step)
        if step == 10:
            shutil.copyfile(path, os.path.join(root, "last.ckpt"))
elif layout == "orbax":
    for step in (10, 20, 30):
        tmp = os.path.join(root, "%d.orbax-checkpoint-tmp" % step)
        (torn if step == 20 else tsave)(os.path.join(tmp, "shard_0.pt"), step)
        if step != 30:
            os.rename(tmp, os.path.join(root, str(step)))
    # written in place and committed by its commit file (Orbax's CommitFileTemporaryPath),
    # with InternEvo's N.step beside it, written first: whose is the step?
    d = os.path.join(root, "40")
    tsave(os.path.join(d, "shard_0.pt"), 40)
    torch.save({"step": 40}, os.path.join(d, "40.step"))
    text(os.path.join(d, "commit_success.txt"), "Checkpoint commit was successful")
'''

EXPECT = {
    'megatron': {10: 'complete', 20: 'complete', 30: 'incomplete', 40: 'copied'},
    'deepspeed': {10: 'complete', 20: 'incomplete'},
    'mf2': {10: 'complete', 20: 'incomplete'},
    'dcp': {10: 'complete', 20: 'incomplete'},
    'internevo': {10: 'complete', 30: 'incomplete'},
    'hf': {10: 'complete', 20: 'incomplete', 30: 'complete', 40: 'complete', 50: 'incomplete',
           60: 'incomplete', 70: 'complete'},
    'mf1': {10: 'complete', 20: 'writing', 30: 'writing'},
    'orbax': {10: 'complete', 20: 'incomplete', 30: 'incomplete', 40: 'complete'},
    'lightning': {10: 'complete', 30: 'complete'},
}

# the layout of each step, where it is not the store's own: InternEvo's N.step written before
# Orbax's commit_success.txt, the daemon took InternEvo's, import Orbax's (policy_marker_kind)
KINDS = {'orbax': {40: 'orbax'}}

# what only a live mount sees: Orbax commits a step on a local filesystem by renaming its tmp
# directory, with no commit file; a plain directory (import, an import through a mount) and a
# record rebuilt from the tree (fsck) show `N/` as a user's `2024/` looks: no step (policy.h
# rule 1)
RENAME_ONLY = {'orbax': (10, 20)}


# what only a daemon that saw the steps written in order knows: hf 30, sealed without a rank's
# rng_state, is complete once step 40 was started after its seal (a trainer trains on only after
# every rank finished a save); a tree shows no such order, and import and fsck judge by the
# previous step's names (policy.h rule 3). An import through a mount writes the steps in order.
ORDER_ONLY = {'hf': {30: 'incomplete'}}


def static(layout, order=False):
    """EXPECT[layout] as a plain directory shows it (RENAME_ONLY), judged with the order the
    steps were written in (an import through a mount) or without it (ORDER_ONLY)."""
    want = {k: v for k, v in EXPECT[layout].items() if k not in RENAME_ONLY.get(layout, ())}
    return want if order else {**want, **ORDER_ONLY.get(layout, {})}

# what fsck cannot call a copy: the writers of a step whose record was lost are unknown
FSCK_UNKNOWN_WRITERS = {'megatron': {40: 'incomplete'}}


def write(layout, root):
    subprocess.run([PY, '-c', WRITER, layout, root], check=True, timeout=300)


def ctl(store, *args, rc=(0,)):
    r = ckfs.ckptctl(store, *args, json_out=True)
    if r.returncode not in rc:
        raise AssertionError('ckptctl %s %s exited %d: %s%s' % (store, ' '.join(args),
                                                              r.returncode, r.stdout, r.stderr))
    return json.loads(r.stdout) if r.stdout.strip() else None


def states(store):
    return {s['step']: s['state'] for s in ctl(store, 'steps')['steps']}


def layouts(store):
    return {s['step']: s['layout'] for s in ctl(store, 'steps')['steps']}


def judged(store, m, want=None, timeout=60):
    """Wait (mounted) until the daemon has judged every step: none writing or sealed, or the
    states are want (MindFormers 1.0 leaves a step that is not complete on every rank writing:
    a rank may still save it)."""
    deadline = time.monotonic() + timeout
    while True:
        m.settle()
        st = states(store)
        if all(v not in ('writing', 'sealed') for v in st.values()) or st == want:
            return st
        if time.monotonic() > deadline:
            raise AssertionError('steps still unjudged after %ds: %s' % (timeout, st))
        time.sleep(0.3)


def mount_and_judge(store, want=None):
    m = ckfs.Mount(store=store)
    try:
        m.start()
        judged(store, m, want)
        m.unmount()
    finally:
        m.close()
    return states(store)


class PolicyAgreementTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ckfs.check_fuse_usable()
        cls.tmp = tempfile.mkdtemp(prefix='ckptfs-policy-', dir=ckfs.test_tmp_root())

    @classmethod
    def tearDownClass(cls):
        if not ckfs.keep_tmp():
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def live(self, layout):
        store = os.path.join(self.tmp, layout + '-live')
        m = ckfs.Mount(store=store)
        try:
            m.start()
            write(layout, m.mnt)
            judged(store, m, EXPECT[layout])
            m.unmount()
        finally:
            m.close()
        return mount_and_judge(store, EXPECT[layout])

    def imported(self, layout):
        src = os.path.join(self.tmp, layout + '-plain')
        os.mkdir(src)
        write(layout, src)
        store = os.path.join(self.tmp, layout + '-import')
        out = ctl(store, 'import', src)
        self.assertEqual(out['failed'], [], out)
        # import does not set a step aside (the daemon owns the namespace): what is not
        # complete stays writing or sealed until the first mount, a copy is copied
        for s in out['steps']:
            want = static(layout)[s['step']]
            self.assertEqual(s['state'] == 'complete', want == 'complete',
                             'import judged %s %s: %s' % (layout, s['name'], s))
            self.assertEqual(s['state'] == 'copied', want == 'copied',
                             'import judged %s %s: %s' % (layout, s['name'], s))
        # the fsck copy starts from the imported store before its first mount
        copy = os.path.join(self.tmp, layout + '-fsck')
        shutil.copytree(store, copy, symlinks=True)
        return mount_and_judge(store, static(layout)), copy, src

    def mounted_import(self, layout, src):
        store = os.path.join(self.tmp, layout + '-mounted')
        m = ckfs.Mount(store=store)
        try:
            m.start()
            out = ctl(store, 'import', src)
            self.assertEqual(out['failed'], [], out)
            self.assertEqual(out['mount'], m.mnt)
            judged(store, m, static(layout, order=True))
            m.unmount()
        finally:
            m.close()
        return mount_and_judge(store, static(layout, order=True))

    def fscked(self, layout, store):
        db = sqlite3.connect(os.path.join(store, 'index.db'))
        with db:
            db.execute('DELETE FROM step_events')
            db.execute('DELETE FROM steps')
        db.close()
        self.assertEqual(states(store), {})
        ctl(store, 'fsck', rc=(0, 1))
        return mount_and_judge(store, static(layout))

    def check(self, layout):
        live = self.live(layout)
        imp, copy, src = self.imported(layout)
        mounted = self.mounted_import(layout, src)
        fsck = self.fscked(layout, copy)
        kinds = {way: layouts(os.path.join(self.tmp, layout + '-' + way))
                 for way in ('live', 'import', 'mounted', 'fsck')}
        self.assertEqual(live, EXPECT[layout], 'live mount')
        self.assertEqual(imp, static(layout), 'import, then mount')
        self.assertEqual(mounted, static(layout, order=True), 'import into a mount')
        self.assertEqual(fsck, {**static(layout), **FSCK_UNKNOWN_WRITERS.get(layout, {})},
                         'fsck, then mount')
        for step, kind in KINDS.get(layout, {}).items():
            self.assertEqual(kinds['live'][step], kind, 'live mount: the layout of %d' % step)
        for way in ('import', 'mounted', 'fsck'):
            self.assertEqual(kinds[way], {k: v for k, v in kinds['live'].items()
                                          if k not in RENAME_ONLY.get(layout, ())},
                             '%s: the layouts of the steps' % way)

    def test_megatron(self):
        self.check('megatron')

    def test_deepspeed(self):
        self.check('deepspeed')

    def test_mf2(self):
        self.check('mf2')

    def test_dcp(self):
        self.check('dcp')

    def test_internevo(self):
        self.check('internevo')

    def test_hf(self):
        self.check('hf')

    def test_mf1(self):
        self.check('mf1')

    def test_orbax(self):
        self.check('orbax')

    def test_lightning(self):
        self.check('lightning')


if __name__ == '__main__':
    faulthandler.enable()
    unittest.main(verbosity=2)
