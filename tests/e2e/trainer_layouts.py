"""trainer_layouts.py - how trainer.py's Job saves and resumes in each framework's layout: one
save_<layout> and resume_<layout> per layout (trainer.py --layout), each with the exact file
operations of the framework's source, cited at its head (tests/traces/<layout>.md). A mixin of
trainer.Job, which gives it the model, the ranks (barrier, bcast, gather), the Saver (sv) and
the side log; kept apart from trainer.py so that each file reads in one sitting.
"""

import glob
import json
import os
import re
import shutil
import stat
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from ckptformats import safetensors_bytes, tsave_bytes  # noqa: E402

D_MODEL = 128
TRACKER = 'latest_checkpointed_iteration.txt'


def param_names(model):
    return [n for n, _ in model.named_parameters()]


def full_state_keys(model):
    keys = []
    for n in param_names(model):
        keys.append('model.' + n)
    for n in param_names(model):
        keys += ['optim.%s.%s' % (n, k) for k in ('step', 'exp_avg', 'exp_avg_sq')]
    return keys


def shard_of(sd, model, rank, world):
    names = param_names(model)
    mine = {n for i, n in enumerate(names) if i % world == rank}
    def owner(k):
        return k[6:] if k.startswith('model.') else k[6:].rsplit('.', 1)[0]
    return {k: v for k, v in sd.items() if owner(k) in mine}


def split_model_optim(sd):
    return ({k: v for k, v in sd.items() if k.startswith('model.')},
            {k: v for k, v in sd.items() if k.startswith('optim.')})


def load_full_state(model, opt, sd):
    names = param_names(model)
    missing = [k for k in full_state_keys(model) if k not in sd]
    if missing:
        raise RuntimeError('checkpoint lacks %d tensors, e.g. %s' % (len(missing), missing[:3]))
    model.load_state_dict({n: sd['model.' + n] for n in names})
    osd = opt.state_dict()
    osd['state'] = {i: {'step': sd['optim.%s.step' % n], 'exp_avg': sd['optim.%s.exp_avg' % n],
                        'exp_avg_sq': sd['optim.%s.exp_avg_sq' % n]}
                    for i, n in enumerate(names)}
    opt.load_state_dict(osd)


def ms_exec_save(sv, final, ext, data):
    """MindSpore _exec_save, the newer version (tests/traces/mf1.md, mindspore_test 00281fe):
    an existing final file and tmp file are made writable and removed, the bytes go to
    `name.replace(ext, '.tmp')` (opened 'ab': O_APPEND), os.rename to the final name,
    os.chmod(final, S_IRUSR). No fsync."""
    tmp = final[:-len(ext)] + '.tmp'
    for p in (final, tmp):
        if os.path.exists(p):
            os.chmod(p, stat.S_IWUSR)
            os.remove(p)
    sv.write(tmp, data, flags=os.O_WRONLY | os.O_CREAT | os.O_APPEND, final=final)
    sv.rename_0400(tmp, final, data)


def orbax_steps(root):
    """Finalized Orbax steps, ascending (step.py checkpoint_steps: all-digit directories; a
    tmp directory's name is not all digits)."""
    if not os.path.isdir(root):
        return []
    return sorted(int(n) for n in os.listdir(root)
                  if n.isdigit() and os.path.isdir(os.path.join(root, n)))


def mf2_check_max(root, keep):
    dirs = []
    for n in os.listdir(root):
        m = re.fullmatch(r'iteration_(\d+)', n)
        if m and os.path.isdir(os.path.join(root, n)):
            dirs.append((int(m.group(1)), n))
    dirs.sort()
    if len(dirs) <= keep:
        return
    for _, n in dirs[:len(dirs) - keep]:
        shutil.rmtree(os.path.join(root, n))


def hf_rng_name(rank, world):
    """_save_rng_state: rng_state.pth on one process, else rng_state_{process_index}.pth."""
    return 'rng_state.pth' if world <= 1 else 'rng_state_%d.pth' % rank


def hf_rotate(root, limit):
    """_rotate_checkpoints(use_mtime=True) / _sorted_checkpoints: every checkpoint-* directory,
    sorted by its mtime; by the number in its name instead when the newest and the oldest
    mtimes are less than 1 s apart; rmtree(ignore_errors=True) the oldest beyond
    save_total_limit."""
    cps = []
    for p in glob.glob(os.path.join(root, 'checkpoint-*')):
        if os.path.isdir(p):
            cps.append((os.path.getmtime(p), p))
    ordered = sorted(cps)
    if len(ordered) > 1 and ordered[-1][0] - ordered[0][0] < 1.0:
        num = [(int(m.group(1)), p) for _, p in ordered
               for m in [re.match(r'.*checkpoint-([0-9]+)', p)] if m]
        ordered = sorted(num)
    for _, p in ordered[:max(0, len(ordered) - limit)]:
        shutil.rmtree(p, ignore_errors=True)


def get_last_checkpoint(folder):
    if not os.path.isdir(folder):
        return None
    cps = [n for n in os.listdir(folder)
           if re.search(r'^checkpoint-(\d+)$', n) and os.path.isdir(os.path.join(folder, n))]
    if not cps:
        return None
    return os.path.join(folder, max(cps, key=lambda n: int(n.split('-')[1])))


class Layouts:
    """save_<layout>(step, loss, sd) and resume_<layout>() -> (step, loss) or None."""

    # ---- MindFormers 2.0 ------------------------------------------------------------------
    # tests/traces/mf2.md: mindspore-lab/mindformers 8d9e5d7 mindformers/checkpoint/
    # checkpoint.py save_checkpoint, utils.py check_checkpoints_dir_max_num; MindSpore
    # _exec_save (tests/traces/mf1.md) for each safetensors file.
    def save_mf2(self, step, loss, sd):
        d = os.path.join(self.root, 'iteration_%08d' % step)
        if self.rank == 0:
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o750)       # set_safe_mode_for_file_or_dir (mode unverified)
        self.barrier()
        if self.rank == 0 and self.a.keep > 0:
            mf2_check_max(self.root, self.a.keep)   # counts the new, empty dir
        self.barrier()
        shard = shard_of(sd, self.model, self.rank, self.world)
        msd, osd = split_model_optim(shard)
        osd = dict(osd)
        osd['rng_state'] = self.gen.get_state()
        for kind, tens in (('model', msd), ('opt', osd)):
            name = '%s-%07d-%07d.safetensors' % (kind, self.rank, self.world)
            data = safetensors_bytes(tens, {'format': 'pt', 'iteration': step})
            final = os.path.join(d, name)
            ms_exec_save(self.sv, final, '.safetensors', data)
        if self.rank == 0:
            self.sv.json_named_tmp_replace(os.path.join(d, 'common.json'),
                                           {'iteration': step, 'loss': loss, 'epoch': 1,
                                            'world_size': self.world})
            # save_metadata from the global strategy, known before any rank's file exists:
            # metadata.json may appear while other ranks still write theirs
            storage = {}
            for r in range(self.world):
                rshard = shard_of(sd, self.model, r, self.world)
                rm, ro = split_model_optim(rshard)
                for kind, keys in (('model', list(rm)), ('opt', list(ro) + ['rng_state'])):
                    fname = '%s-%07d-%07d.safetensors' % (kind, r, self.world)
                    for k in sorted(keys):
                        storage.setdefault(k, []).append({'file_name': fname})
            self.sv.json_named_tmp_replace(os.path.join(d, 'metadata.json'),
                                           {'storage_data': storage})
        self.barrier()   # "Rank_0 is saving 'metadata.json' ..."
        self.barrier()   # "All ranks for sync save checkpoint."
        if self.rank == 0:
            self.sv.plain_text(os.path.join(self.root, TRACKER), str(step))
            self.saved(step, loss)
        self.barrier()   # not MindFormers': SAVED means every rank is done

    def resume_mf2(self):
        tracker = os.path.join(self.root, TRACKER)
        if not os.path.isfile(tracker):
            return None
        with open(tracker) as f:
            it = int(f.read().strip())
        d = os.path.join(self.root, 'iteration_%08d' % it)
        if not os.path.isdir(d):
            raise FileNotFoundError('Can not find the latest iteration weight path: %r' % d)
        # verify_ckpt_valid: metadata.json parses, listed files exist
        with open(os.path.join(d, 'metadata.json'), encoding='utf-8') as f:
            md = json.load(f)
        names = set()
        for lst in md['storage_data'].values():
            for s in lst:
                if not os.path.exists(os.path.join(d, s['file_name'])):
                    raise FileNotFoundError('%s missing in %s' % (s['file_name'], d))
                names.add(s['file_name'])
        sd = {}
        for name in sorted(names):
            t, _ = self.stload(os.path.join(d, name))
            if name.startswith('opt-%07d-' % self.rank):
                self.gen.set_state(t['rng_state'])
            t.pop('rng_state', None)
            sd.update(t)
        common = json.loads(self.read_file(os.path.join(d, 'common.json')))
        self.read_file(os.path.join(d, 'metadata.json'))
        load_full_state(self.model, self.opt, sd)
        return it, float(common['loss'])

    # ---- Megatron-LM (legacy torch.save) --------------------------------------------------
    def save_megatron(self, step, loss, sd):
        d = os.path.join(self.root, 'iter_%07d' % step, 'mp_rank_%02d' % self.rank)
        os.makedirs(d, exist_ok=True)
        msd, osd = split_model_optim(shard_of(sd, self.model, self.rank, self.world))
        obj = {'iteration': step, 'checkpoint_version': 3.0, 'model': msd, 'optimizer': osd,
               'rng_state': [self.rng_state()], 'loss': loss}
        self.sv.write(os.path.join(d, 'model_optim_rng.pt'), tsave_bytes(obj))
        self.barrier()
        if self.rank == 0:
            self.sv.plain_text(os.path.join(self.root, TRACKER), str(step))
            self.saved(step, loss)
        self.barrier()

    def resume_megatron(self):
        tracker = os.path.join(self.root, TRACKER)
        it = 0
        if os.path.isfile(tracker):
            with open(tracker) as f:
                s = f.read().strip()
            try:
                it = int(s)
            except ValueError:
                # read_metadata: "ERROR: Invalid metadata file ..."; sys.exit() on every rank
                # (tests/traces/megatron.md)
                if s != 'release':
                    print('ERROR: Invalid metadata file %s. Exiting' % tracker, flush=True)
                    sys.exit()
                raise
        t = self.torch.tensor([it], dtype=self.torch.long)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        it = int(t.item())
        if it == 0:
            return None
        d = os.path.join(self.root, 'iter_%07d' % it)
        sd, loss = {}, None
        for r in range(self.world):
            obj = self.tload(os.path.join(d, 'mp_rank_%02d' % r, 'model_optim_rng.pt'))
            sd.update(obj['model'])
            sd.update(obj['optimizer'])
            if r == self.rank:
                self.set_rng(obj['rng_state'][0])
                loss = obj['loss']
        load_full_state(self.model, self.opt, sd)
        return it, float(loss)

    # ---- MindFormers 1.0 / MindSpore ModelCheckpoint --------------------------------------
    # tests/traces/mf1.md: mindformers 00745ca core/callback/callback.py CheckpointMonitor;
    # mindspore 01df72b train/callback/_checkpoint.py ModelCheckpoint, CheckpointManager,
    # _chg_ckpt_file_name_if_same_exist; _exec_save (newer: tmp + rename + 0400).
    PREFIX = 'llama'

    def mf1_prefix(self):
        """This launch's prefix: {PREFIX}_rank_{r}, with MindSpore's suffix _N when .ckpt files
        of that prefix already exist (ModelCheckpoint.__init__ ->
        _chg_ckpt_file_name_if_same_exist), computed once per launch."""
        if getattr(self, '_mf1_prefix', None) is None:
            d = os.path.join(self.root, 'rank_%d' % self.rank)
            prefix = '%s_rank_%d' % (self.PREFIX, self.rank)
            suffix = 0
            for fn in (os.listdir(d) if os.path.isdir(d) else []):
                if os.path.splitext(fn)[1] != '.ckpt' or fn.endswith('_breakpoint.ckpt'):
                    continue
                if fn.find(prefix) == 0 and not fn[len(prefix)].isalpha():
                    i = fn[len(prefix):].find('-')
                    if i == 0:
                        suffix = max(suffix, 1)
                    elif i != -1 and fn[len(prefix) + 1:len(prefix) + i].isdigit():
                        suffix = max(suffix, int(fn[len(prefix) + 1:len(prefix) + i]) + 1)
            self._mf1_prefix = prefix + ('_%d' % suffix if suffix else '')
        return self._mf1_prefix

    def save_mf1(self, step, loss, sd):
        d = os.path.join(self.root, 'rank_%d' % self.rank)
        prefix = self.mf1_prefix()
        os.makedirs(d, exist_ok=True)
        if not getattr(self, '_mf1_graph', False):
            # ModelCheckpoint.step_end: {prefix}-graph.meta once per launch
            g = os.path.join(d, prefix + '-graph.meta')
            if os.path.isfile(g):
                os.remove(g)
            self.sv.write(g, b'graph of the network', pause=False)
            self._mf1_graph = True
        if self.a.keep > 0:
            # CheckpointManager: this prefix's .ckpt files only; the oldest by mtime, BEFORE
            # saving, when keep_checkpoint_max <= their number
            ck = [os.path.join(d, n) for n in os.listdir(d)
                  if n.endswith('.ckpt') and n.startswith(prefix + '-')]
            if len(ck) >= self.a.keep:
                ck.sort(key=os.path.getmtime)
                os.chmod(ck[0], stat.S_IWRITE)
                os.remove(ck[0])
        msd, osd = split_model_optim(shard_of(sd, self.model, self.rank, self.world))
        data = tsave_bytes({'model': msd, 'optimizer': osd, 'rng': self.rng_state(),
                            'epoch_num': 1, 'step_num': step, 'loss': loss})
        final = os.path.join(d, '%s-%d_%d.ckpt' % (prefix, 1, step))
        ms_exec_save(self.sv, final, '.ckpt', data)
        # record_last_ckpt_to_json: NamedTemporaryFile + os.replace, no fsync
        meta = {'last_epoch': 1, 'last_step': step,
                'last_ckpt_file': os.path.basename(final)}
        mdata = json.dumps(meta).encode()
        self.sv.pause()
        self.sv.intend(os.path.join(d, 'meta.json'), mdata)
        with tempfile.NamedTemporaryFile('wb', dir=d, delete=False) as tf:
            tf.write(mdata)
        os.replace(tf.name, os.path.join(d, 'meta.json'))
        self.sv.wrote(os.path.join(d, 'meta.json'), mdata)
        # no barrier in MindFormers 1.0: the collective below only decides when to log SAVED
        self.barrier()
        self.saved(step, loss)

    def mf1_file(self, r, ep, it):
        """Rank r's .ckpt of (epoch, step), whatever launch's prefix wrote it (the newest by
        mtime when several did), or None."""
        d = os.path.join(self.root, 'rank_%d' % r)
        found = [os.path.join(d, n) for n in os.listdir(d)
                 if re.fullmatch(r'%s_rank_%d(_\d+)?-%d_%d\.ckpt' % (self.PREFIX, r, ep, it), n)]
        return max(found, key=os.path.getmtime) if found else None

    def resume_mf1(self):
        """tools/resume_ckpt.py: rank 0 reads every rank_x/meta.json, takes the minimum
        (epoch, step) and the newest step at or below it present on ALL ranks; writes
        resume_record/latest_checkpointed_iteration.txt beside the checkpoint dir."""
        choice = None
        if self.rank == 0:
            rank_dirs = sorted(glob.glob(os.path.join(self.root, 'rank_*')))
            metas, present = [], []
            for rd in rank_dirs:
                mp = os.path.join(rd, 'meta.json')
                if not os.path.isfile(mp):
                    metas = None
                    break
                with open(mp) as f:
                    m = json.load(f)
                metas.append((m['last_epoch'], m['last_step']))
                steps = set()
                for n in os.listdir(rd):
                    mm = re.fullmatch(r'.*-(\d+)_(\d+)\.ckpt', n)
                    if mm:
                        steps.add((int(mm.group(1)), int(mm.group(2))))
                present.append(steps)
            if metas and len(rank_dirs) == self.world:
                lim = min(metas)
                common = set.intersection(*present)
                ok = [s for s in common if s <= lim]
                if ok:
                    choice = max(ok)
                    rec = os.path.join(os.path.dirname(self.root), 'resume_record')
                    os.makedirs(rec, exist_ok=True)
                    with open(os.path.join(rec, TRACKER), 'w') as f:
                        f.write(str(choice[1]))
        choice = self.bcast(choice)
        if choice is None:
            return None
        ep, it = choice
        sd, loss = {}, None
        for r in range(self.world):
            obj = self.tload(self.mf1_file(r, ep, it))
            sd.update(obj['model'])
            sd.update(obj['optimizer'])
            if r == self.rank:
                self.set_rng(obj['rng'])
                loss = obj['loss']
        load_full_state(self.model, self.opt, sd)
        return it, float(loss)

    # ---- DeepSpeed ------------------------------------------------------------------------
    # tests/traces/deepspeed.md: deepspeedai/DeepSpeed 007cca6 deepspeed/runtime/engine.py
    # save_checkpoint, _save_checkpoint, _save_zero_checkpoint, _copy_recovery_script; the
    # default TorchCheckpointEngine (torch.save). --ds-fast-writer: the optional FastFileWriter
    # engine (O_DIRECT pwrites, not traced).
    def save_deepspeed(self, step, loss, sd):
        tag = 'global_step%d' % step
        d = os.path.join(self.root, tag)
        if self.rank == 0:
            os.makedirs(self.root, exist_ok=True)
        self.barrier()
        os.makedirs(d, exist_ok=True)       # _create_checkpoint_file, every rank
        msd, osd = split_model_optim(sd)
        write = self.sv.write_odirect if self.a.ds_fast_writer else self.sv.write
        if self.rank == 0:
            write(os.path.join(d, 'mp_rank_00_model_states.pt'),
                  tsave_bytes({'module': msd, 'global_steps': step, 'loss': loss,
                               'dp_world_size': self.world}))
        mine = split_model_optim(shard_of(sd, self.model, self.rank, self.world))[1]
        write(os.path.join(d, 'bf16_zero_pp_rank_%d_mp_rank_00_optim_states.pt' % self.rank),
              tsave_bytes({'optimizer_state_dict': mine, 'rng': self.rng_state(),
                           'ds_version': '0.14.0'}))
        if self.rank == 0:
            # copyfile(src, <tag>/zero_to_fp32.py); chmod +x
            z = os.path.join(d, 'zero_to_fp32.py')
            self.sv.write(z, b'#!/usr/bin/env python\n# recovery script placeholder\n',
                          pause=False)
            os.chmod(z, os.stat(z).st_mode | stat.S_IEXEC)
            # rank 0 writes `latest` BEFORE the barrier, as DeepSpeed does
            self.sv.plain_text(os.path.join(self.root, 'latest'), tag, pause=False)
        self.barrier()
        if self.rank == 0:
            self.saved(step, loss)

    def resume_deepspeed(self):
        lp = os.path.join(self.root, 'latest')
        if not os.path.isfile(lp):
            return None
        with open(lp) as f:
            tag = f.read().strip()
        d = os.path.join(self.root, tag)
        sd = {}
        models = sorted(glob.glob(os.path.join(d, 'mp_rank_*_model_states.pt')))
        if not models:
            raise FileNotFoundError('no mp_rank_*_model_states.pt in %s' % d)
        m = self.tload(models[0])
        sd.update(m['module'])
        for r in range(self.world):
            o = self.tload(os.path.join(d, 'bf16_zero_pp_rank_%d_mp_rank_00_optim_states.pt'
                                        % r))
            sd.update(o['optimizer_state_dict'])
            if r == self.rank:
                self.set_rng(o['rng'])
        load_full_state(self.model, self.opt, sd)
        return int(m['global_steps']), float(m['loss'])

    # ---- Hugging Face Trainer -------------------------------------------------------------
    # tests/traces/hf.md: huggingface/transformers 000945a src/transformers/trainer.py
    # Trainer._save_checkpoint, _save, _save_rng_state, _rotate_checkpoints; trainer_utils.py
    # get_last_checkpoint.
    def save_hf(self, step, loss, sd):
        d = os.path.join(self.root, 'checkpoint-%d' % step)
        msd, osd = split_model_optim(sd)
        if self.rank == 0:      # should_save: _save -> save_pretrained, training_args.bin
            os.makedirs(d, exist_ok=True)
            self.sv.write(os.path.join(d, 'model.safetensors'),
                          safetensors_bytes(msd, {'format': 'pt'}))
            self.sv.write(os.path.join(d, 'config.json'),
                          json.dumps({'model_type': 'charlm', 'd_model': D_MODEL}).encode())
            self.sv.write(os.path.join(d, 'training_args.bin'),
                          tsave_bytes({'output_dir': self.root, 'save_total_limit': self.a.keep}))
            self.sv.write(os.path.join(d, 'optimizer.pt'), tsave_bytes(osd))
            self.sv.write(os.path.join(d, 'scheduler.pt'), tsave_bytes({'last_epoch': step}))
        # _save_rng_state: every rank makedirs (it may arrive before process 0 made it)
        os.makedirs(d, exist_ok=True)
        self.sv.write(os.path.join(d, hf_rng_name(self.rank, self.world)),
                      tsave_bytes(self.rng_state()))
        if self.rank == 0:
            st = {'global_step': step, 'max_steps': self.a.steps,
                  'log_history': [{'step': step, 'loss': loss}]}
            self.sv.plain_text(os.path.join(d, 'trainer_state.json'), json.dumps(st, indent=2))
            if self.a.keep > 0:
                hf_rotate(self.root, self.a.keep)
        self.barrier()
        if self.rank == 0:
            self.saved(step, loss)

    def resume_hf(self):
        d = get_last_checkpoint(self.root)
        if d is None:
            return None
        t, _ = self.stload(os.path.join(d, 'model.safetensors'))
        sd = dict(t)
        sd.update(self.tload(os.path.join(d, 'optimizer.pt')))
        self.set_rng(self.tload(os.path.join(d, hf_rng_name(self.rank, self.world))))
        st = json.loads(self.read_file(os.path.join(d, 'trainer_state.json')))
        load_full_state(self.model, self.opt, sd)
        return int(st['global_step']), float(st['log_history'][-1]['loss'])

    # ---- one shard per rank (DCP, Orbax) ---------------------------------------------------
    def shard_bytes(self, step, loss, sd):
        """This rank's shard of sd (its tensors, its RNG, and on rank 0 the step and loss) as
        torch.save bytes. Returns (the shard's tensors by name, the bytes)."""
        shard = dict(shard_of(sd, self.model, self.rank, self.world))
        obj = {'tensors': shard, 'rng': self.rng_state()}
        if self.rank == 0:
            obj['train_state'] = {'step': step, 'loss': loss}
        return shard, tsave_bytes(obj)

    def load_shards(self, d, files, mine):
        """Load the shards `files` under d written by shard_bytes into the model and optimizer,
        this rank's RNG from the shard named `mine`. Returns (step, loss) from rank 0's shard."""
        sd, loss, step = {}, None, None
        for f in files:
            obj = self.tload(os.path.join(d, f))
            sd.update(obj['tensors'])
            if f == mine:
                self.set_rng(obj['rng'])
            if 'train_state' in obj:
                loss = obj['train_state']['loss']
                step = obj['train_state']['step']
        load_full_state(self.model, self.opt, sd)
        return step, float(loss)

    # ---- PyTorch DCP / torchtitan ---------------------------------------------------------
    def save_dcp(self, step, loss, sd):
        d = os.path.join(self.root, 'step-%d' % step)
        os.makedirs(d, exist_ok=True)
        shard, data = self.shard_bytes(step, loss, sd)
        name = '__%d_0.distcp' % self.rank
        self.sv.write(os.path.join(d, name), data, fsync=True)
        results = self.gather({'file': name, 'keys': sorted(shard), 'size': len(data)})
        if self.rank == 0:
            md = tsave_bytes({'storage_data': {k: r['file'] for r in results for k in r['keys']},
                              'files': [r['file'] for r in results], 'step': step})
            tmp = os.path.join(d, '.metadata.tmp')
            self.sv.write(tmp, md, fsync=True, final=os.path.join(d, '.metadata'))
            final = os.path.join(d, '.metadata')
            if os.path.exists(final):
                os.unlink(final)
            os.rename(tmp, final)
            self.sv.wrote(final, md)
            self.saved(step, loss)
        self.barrier()          # dcp.save ends with a collective on every rank
        if self.rank == 0 and self.a.keep > 0:
            # torchtitan CheckpointManager._purge_stale_checkpoints (tests/traces/dcp.md),
            # after the save: every step-N dir counts, complete or not; re.search on names
            steps = sorted(int(m.group(1)) for m in
                           (re.search(r'step-(\d+)', n) for n in os.listdir(self.root)) if m)
            for s in steps[:-self.a.keep]:
                shutil.rmtree(os.path.join(self.root, 'step-%d' % s), ignore_errors=True)

    def resume_dcp(self):
        if not os.path.isdir(self.root):
            return None
        # torchtitan CheckpointManager._find_load_step: re.search(r"step-(\d+)") on each name,
        # the highest whose directory holds .metadata
        steps = [(int(m.group(1)), n) for n in os.listdir(self.root)
                 for m in [re.search(r'step-(\d+)', n)]
                 if m and os.path.isfile(os.path.join(self.root, n, '.metadata'))]
        if not steps:
            return None
        step, name = max(steps)
        d = os.path.join(self.root, name)
        md = self.tload(os.path.join(d, '.metadata'))
        return self.load_shards(d, md['files'], '__%d_0.distcp' % self.rank)

    # ---- InternEvo ------------------------------------------------------------------------
    # tests/traces/internevo.md: InternLM/InternEvo 05bbd8f internlm/checkpoint/
    # checkpoint_manager.py, CheckpointManager.try_save_checkpoint / save_checkpoint, and
    # query_latest_snapshot_step_local for the resume.
    def ie_folder(self, step):
        """try_save_checkpoint: a normal save goes to <save>/<step>; a snapshot save to
        <save>/snapshot/<snapshot_counter>, the counter starting at -1 in every launch and
        advancing (counter + 1) % 2 per snapshot. `internevo-snap` saves every step as a
        snapshot into slot 0, as each launch's first snapshot does: the slot that may hold
        the newest step is overwritten in place."""
        if self.a.layout == 'internevo-snap':
            return os.path.join(self.root, 'snapshot', '0')
        return os.path.join(self.root, str(step))

    def save_internevo(self, step, loss, sd):
        d = self.ie_folder(step)
        self.barrier()
        # llm_save -> LocalClient: os.makedirs(dirname, exist_ok=True), then torch.save
        os.makedirs(d, exist_ok=True)
        msd, _ = split_model_optim(sd)
        if self.rank == 0:
            # save_model_checkpoint: model_tp{tp}_pp{pp}.pt and topo_tp{tp}_pp{pp}.json (a
            # torch.save despite its name) by the dp-rank-0 of each (tp, pp); then a barrier
            self.sv.write(os.path.join(d, 'model_tp0_pp0.pt'), tsave_bytes(msd))
            self.sv.write(os.path.join(d, 'topo_tp0_pp0.json'),
                          tsave_bytes({'tp': 0, 'pp': 0, 'world': self.world}), pause=False)
        self.barrier()
        # save_optimizer_checkpoint: optimizer_tp{tp}_pp{pp}_zo{zo}.pt on every rank
        osd = split_model_optim(shard_of(sd, self.model, self.rank, self.world))[1]
        self.sv.write(os.path.join(d, 'optimizer_tp0_pp0_zo%d.pt' % self.rank),
                      tsave_bytes({'state': osd, 'rng': self.rng_state()}))
        if self.rank == 0:
            # the log rank: sampler.pt, schedulder.pt (sic), context.pt
            self.sv.write(os.path.join(d, 'sampler.pt'), tsave_bytes({'batch_count': step}))
            self.sv.write(os.path.join(d, 'schedulder.pt'), tsave_bytes({'last_epoch': step}))
            self.sv.write(os.path.join(d, 'context.pt'),
                          tsave_bytes({'step': step, 'loss': loss, 'batch_count': step}))
        self.barrier()
        if self.rank == 0:
            # llm_save(os.path.join(folder, f"{step}.step"), saved_obj=dict({"step": step}))
            self.sv.write(os.path.join(d, '%d.step' % step), tsave_bytes({'step': step}))
            self.saved(step, loss)
        self.barrier()

    save_internevo_snap = save_internevo

    def resume_internevo(self):
        """query_latest_snapshot_step_local: os.walk the whole save folder; the folder holding
        the highest N.step (strictly greater than the best so far, from 0) wins, and its files
        are loaded as they are."""
        max_step, max_path = 0, None
        for root, _, files in os.walk(self.root, followlinks=True):
            for fn in files:
                fn = fn.strip(' ')
                if fn.endswith('.step'):
                    st = int(fn.rsplit('.', maxsplit=1)[0])
                    if max_step < st:
                        max_step, max_path = st, root
        if max_path is None:
            return None
        d = max_path
        sd = dict(self.tload(os.path.join(d, 'model_tp0_pp0.pt')))
        for r in range(self.world):
            o = self.tload(os.path.join(d, 'optimizer_tp0_pp0_zo%d.pt' % r))
            sd.update(o['state'])
            if r == self.rank:
                self.set_rng(o['rng'])
        ctx = self.tload(os.path.join(d, 'context.pt'))
        load_full_state(self.model, self.opt, sd)
        return int(ctx['step']), float(ctx['loss'])

    resume_internevo_snap = resume_internevo

    # ---- Orbax CheckpointManager ----------------------------------------------------------
    # tests/traces/orbax.md: google/orbax checkpoint_manager.py CheckpointManager.save,
    # checkpointer.py Checkpointer.save, _src/path/atomicity.py (local filesystem:
    # AtomicRenameTemporaryPath, no commit file), _src/path/step.py (latest_step).
    ORBAX_TMP = '.orbax-checkpoint-tmp'

    def save_orbax(self, step, loss, sd):
        """The primary host creates {step}.orbax-checkpoint-tmp/ (a leftover of that name is
        rmtree'd first: _create_tmp_directory); every host writes its shards into it; after a
        barrier the primary host renames it to {step}/ (the commit on a local filesystem);
        then max_to_keep retention, after the commit."""
        tmp = os.path.join(self.root, '%d%s' % (step, self.ORBAX_TMP))
        final_dir = os.path.join(self.root, str(step))
        if self.rank == 0:
            if os.path.isdir(tmp):
                shutil.rmtree(tmp)
            os.makedirs(tmp)
        self.barrier()
        _, data = self.shard_bytes(step, loss, sd)
        name = 'shard_%d.pt' % self.rank
        self.sv.write(os.path.join(tmp, name), data, final=os.path.join(final_dir, name))
        self.sv.wrote(os.path.join(final_dir, name), data)
        self.barrier()
        if self.rank == 0:
            self.sv.pause()
            os.rename(tmp, final_dir)     # AtomicRenameTemporaryPath.finalize
            self.saved(step, loss)
            if self.a.keep > 0:
                steps = orbax_steps(self.root)
                for s in steps[:-self.a.keep]:
                    shutil.rmtree(os.path.join(self.root, str(s)))
        self.barrier()

    def resume_orbax(self):
        """CheckpointManager.latest_step(): the highest finalized step directory (all-digit
        name; on a local filesystem, finalized = no tmp suffix: step.py is_checkpoint_finalized)."""
        steps = orbax_steps(self.root)
        if not steps:
            return None
        step = steps[-1]
        d = os.path.join(self.root, str(step))
        return self.load_shards(d, ['shard_%d.pt' % r for r in range(self.world)],
                                'shard_%d.pt' % self.rank)


    # ---- PyTorch Lightning ModelCheckpoint --------------------------------------------------
    # tests/traces/lightning.md: Lightning-AI/pytorch-lightning 03763c9 callbacks/
    # model_checkpoint.py (_save_none_monitor_checkpoint, _update_best_and_save,
    # _save_last_checkpoint, _link_checkpoint, _find_last_checkpoints), d2bf065 trainer.py
    # save_checkpoint (dump on every rank, write on rank 0, barrier), fabric 014994a cloud_io.py
    # _atomic_save (fsspec transaction: a temp from tempfile.mkstemp() in $TMPDIR, moved by
    # shutil.move: across devices an O_TRUNC copy into the final name, copystat, then chmod).
    LIGHTNING_CB = "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0}"

    def lt_state(self):
        if not hasattr(self, '_lt'):
            self._lt = {'best_model_path': '', 'last_model_path': '', 'best_k_models': {}}
        return self._lt

    def lt_name(self, step, ver=None):
        # _format_checkpoint_name: "{epoch}-{step}" -> "epoch=E-step=S"; "-v{ver}"; ".ckpt"
        return os.path.join(self.root, 'epoch=0-step=%d%s.ckpt' %
                            (step, '' if ver is None else '-v%d' % ver))

    def lt_version(self, first, keep_name):
        # _get_metric_interpolated_filepath_name: -v1, -v2 ... while the name exists on disk,
        # unless it is the file about to be deleted (then it is overwritten in place)
        path, ver = first(None), 1
        while os.path.exists(path) and path != keep_name:
            path, ver = first(ver), ver + 1
        return path

    def lt_bytes(self, step, loss, sd, st):
        msd, osd = split_model_optim(sd)
        # rng of every rank: the emulation resumes bit-exact; Lightning keeps rank 0's only
        rngs = self.gather(self.rng_state())
        cb = {'monitor': 'step' if self.a.keep >= 2 else None, 'dirpath': self.root,
              'best_model_path': st['best_model_path'], 'last_model_path': st['last_model_path'],
              'best_k_models': dict(st['best_k_models'])}
        return tsave_bytes({'epoch': 0, 'global_step': step, 'pytorch-lightning_version': '2.5.0',
                            'state_dict': msd, 'optimizer_states': [osd], 'loops': {},
                            'callbacks': {self.LIGHTNING_CB: cb}, 'lr_schedulers': [],
                            'loss': loss, 'rng': rngs})

    def lt_atomic_save(self, final, data):
        """rank 0, TorchCheckpointIO.save_checkpoint: makedirs, then _atomic_save: torch.save
        into a mkstemp() temp in $TMPDIR, shutil.move onto final (os.rename fails with EXDEV:
        copy2 = O_TRUNC open + copy + close, utime, chmod 0600 (mkstemp's mode), unlink the
        temp), then fsspec's chmod(0666 & ~umask). Slow: the copy by hand, in paced pieces."""
        os.makedirs(self.root, exist_ok=True)
        fd, tmp = tempfile.mkstemp()
        os.close(fd)
        with open(tmp, 'wb') as f:
            f.write(data)
        if self.sv.slow > 0:
            st = os.stat(tmp)
            self.sv.write(final, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode=0o666,
                          final=final)
            os.utime(final, ns=(st.st_atime_ns, st.st_mtime_ns))
            os.chmod(final, 0o600)
            os.unlink(tmp)
        else:
            self.sv.intend(final, data)
            shutil.move(tmp, final)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(final, 0o666 & ~umask)
        self.sv.wrote(final, data)

    def save_lightning(self, step, loss, sd):
        st = self.lt_state()
        # _save_topk_checkpoint: the file to delete after this save, then the new name
        dele = None
        if self.rank == 0:
            if self.a.keep == 1:
                dele = st['best_model_path'] or None
            elif self.a.keep >= 2 and len(st['best_k_models']) == self.a.keep:
                dele = min(st['best_k_models'], key=st['best_k_models'].get)
        path = None
        if self.rank == 0:
            path = self.lt_version(lambda v: self.lt_name(step, v), dele)
        path = self.bcast(path)
        if self.a.keep >= 2:
            st['best_k_models'].pop(dele, None)
            st['best_k_models'][path] = step
        st['best_model_path'] = path
        data = self.lt_bytes(step, loss, sd, st)
        if self.rank == 0:
            self.lt_atomic_save(path, data)
        self.barrier()                       # Trainer.save_checkpoint
        if self.rank == 0 and dele and dele != path and os.path.exists(dele):
            os.remove(dele)                  # _remove_checkpoint, rank 0, no barrier
        # _save_last_checkpoint
        last = None
        if self.rank == 0:
            last = self.lt_version(
                lambda v: os.path.join(self.root, 'last%s.ckpt' % ('' if v is None else
                                                                   '-v%d' % v)),
                st['last_model_path'])
        last = self.bcast(last)
        previous, st['last_model_path'] = st['last_model_path'], last
        if self.a.layout == 'lightning-link':
            if self.rank == 0:           # _link_checkpoint: remove, then a relative symlink
                # PAUSE lines: where a test's kill lands (test_lightning), named, not timed
                self.out.log('PAUSE step=%d before=remove path=%s' %
                             (step, self.sv.rel(last)))
                self.sv.pause()
                if os.path.islink(last) or os.path.isfile(last):
                    os.remove(last)
                self.out.log('PAUSE step=%d before=symlink path=%s' %
                             (step, self.sv.rel(last)))
                self.sv.pause()
                os.symlink(os.path.relpath(path, os.path.dirname(last)), last)
            self.barrier()
        else:
            data = self.lt_bytes(step, loss, sd, st)
            if self.rank == 0:
                self.lt_atomic_save(last, data)
            self.barrier()
        if self.rank == 0 and previous and previous != last and os.path.exists(previous):
            os.remove(previous)
        if self.rank == 0:
            self.saved(step, loss)

    def resume_lightning(self):
        """ckpt_path="last": _find_last_checkpoints lists the directory, keeps the .ckpt whose
        stem matches ^last(-(\d+))?, drops those that do not exist (a dangling link), takes the
        newest mtime (a link: its target's); none: a fresh start. Every rank loads it."""
        if not os.path.isdir(self.root):
            return None
        cands = {}
        for n in os.listdir(self.root):
            p = os.path.join(self.root, n)
            if n.endswith('.ckpt') and re.match(r'^last(-(\d+))?', n[:-5]) and os.path.exists(p):
                cands[p] = os.path.getmtime(p)
        if not cands:
            print('.fit(ckpt_path="last") is set, but there is no last checkpoint available. '
                  'No checkpoint will be loaded.', file=sys.stderr, flush=True)
            return None
        path = max(cands, key=cands.get)
        # torch.load follows the link; the log names the file whose bytes were read
        ck = self.tload(os.path.realpath(path) if os.path.islink(path) else path)
        sd = dict(ck['state_dict'])
        sd.update(ck['optimizer_states'][0])
        load_full_state(self.model, self.opt, sd)
        self.set_rng(ck['rng'][self.rank])
        cb = ck['callbacks'][self.LIGHTNING_CB]
        st = self.lt_state()
        if cb['dirpath'] == self.root:   # restored only when dirpath is unchanged
            st['best_model_path'] = cb['best_model_path']
            st['last_model_path'] = cb['last_model_path']
            st['best_k_models'] = dict(cb['best_k_models'])
        return int(ck['global_step']), float(ck['loss'])

    save_lightning_link = save_lightning
    resume_lightning_link = resume_lightning
