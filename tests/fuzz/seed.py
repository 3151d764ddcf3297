#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets into tests/fuzz/corpus/<target>/ (seed-* files;
crashers found later are kept beside them as crash-*). Run once by hand; the output is
committed. Needs Debian's python3-torch and a built daemon (CKPTFS_BIN, CKPTCTL_BIN, as for the
mount tests): chunk and index seeds are real chunk files and a real index.db from a store that a
ckptfs mount wrote.
Run: CKPTFS_BIN=build-test/fs/ckptfs CKPTCTL_BIN=build-test/tools/ckptctl \\
     /usr/bin/python3 tests/fuzz/seed.py
"""
import io
import json
import os
import shutil
import sqlite3
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))
import ckfs  # noqa: E402

CORPUS = os.path.join(HERE, 'corpus')
# fs/layout.h enum layout_kind order: NONE MF2 MEGATRON MF1 DEEPSPEED HF DCP INTERNEVO ORBAX
LAYOUT_PATHS = [
    (0, b'iteration_00000100/rank_0/net.ckpt'), (1, b'latest_checkpointed_iteration.txt'),
    (2, b'iter_0000100/mp_rank_00/model_optim_rng.pt'), (3, b'rank_3/llama_rank_3-2_100.ckpt'),
    (3, b'rank_0/llama_rank_0-1_4.ckpt.tmp'), (4, b'global_step100/mp_rank_00_model_states.pt'),
    (4, b'latest'), (5, b'checkpoint-500/trainer_state.json'), (6, b'step-100/.metadata'),
    (6, b'step-100/__0_0.distcp'), (7, b'100.step'), (7, b'100/model_tp0_pp0.pt'),
    (8, b'100.orbax-checkpoint-tmp-1234567890/commit_success.txt'), (0, b'../../etc/passwd'),
    (2, b'100'), (2, b'release'), (4, b'global_step100'),
    (3, b'{"last_epoch": 1, "last_step": 4, "last_ckpt_file": "llama_rank_0-1_4.ckpt"}'),
]
VALIDATE_NAMES = ['model_optim_rng.pt', 'mp_rank_00_model_states.pt', 'llama_rank_0-1_2.ckpt',
                  'model.safetensors', 'trainer_state.json', 'meta.json', '__0_0.distcp',
                  'README']


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'seed-' + name), 'wb') as f:
        f.write(data)


def safetensors(tensors):
    hdr, blobs, off = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        hdr[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(hdr).encode()
    return struct.pack('<Q', len(h)) + h + b''.join(blobs)


def main():
    import torch
    for d in ('layout', 'validate', 'chunk', 'index'):
        shutil.rmtree(os.path.join(CORPUS, d), ignore_errors=True)
    for i, (kind, p) in enumerate(LAYOUT_PATHS):
        put('layout', '%02d' % i, bytes([kind]) + p)
    b = io.BytesIO()
    torch.save({'w': torch.arange(16, dtype=torch.float32), 'step': 4}, b)
    pt = b.getvalue()
    st = safetensors({'a': ('F32', [2, 2], b'\0' * 16), 'b': ('BF16', [3], b'\1' * 6)})
    js = json.dumps({'global_step': 4, 'log_history': [{'loss': 1.5}]}).encode()
    for i, data in ((0, pt), (2, pt), (3, st), (4, js), (5, js), (7, b'hello')):
        put('validate', '%d-%s' % (i, VALIDATE_NAMES[i]), bytes([i]) + data)
    put('validate', '0-torn.pt', bytes([0]) + pt[:len(pt) // 2])
    with ckfs.Mount() as m:
        g = torch.Generator().manual_seed(1)
        with open(m.path('bf16.bin'), 'wb') as f:     # byte-group codecs
            f.write(torch.randn(12000, generator=g).to(torch.bfloat16).view(torch.int16)
                    .numpy().tobytes())
        with open(m.path('fp32.bin'), 'wb') as f:
            f.write(torch.randn(6000, generator=g).numpy().tobytes())
        with open(m.path('zeros.bin'), 'wb') as f:    # zstd
            f.write(b'\0' * 200000)
        with open(m.path('random.bin'), 'wb') as f:   # raw
            f.write(os.urandom(20000))
        os.mkdir(m.path('iter_0000002'))
        with open(m.path('latest_checkpointed_iteration.txt'), 'w') as f:
            f.write('2')
        store = m.store
        m.unmount()
        root = os.path.join(store, 'chunks')
        chunks = sorted((size, os.path.join(root, rel))
                        for rel, size in ckfs.chunk_files(store).items())
        by_codec = {}
        for size, p in chunks:
            with open(p, 'rb') as f:
                data = f.read()
            by_codec.setdefault(data[4], data)
        for codec, data in sorted(by_codec.items()):
            put('chunk', 'codec%d' % codec, data)
        # the index as ckptctl finds it after a clean stop (WAL checkpointed into the file)
        db = os.path.join(store, 'index.db')
        c = sqlite3.connect(db)
        c.execute('PRAGMA wal_checkpoint(TRUNCATE)')
        c.close()
        with open(db, 'rb') as f:
            put('index', 'clean', f.read())
        m.start()   # the context manager unmounts it
    for t in ('layout', 'validate', 'chunk', 'index'):
        d = os.path.join(CORPUS, t)
        print('%s: %d seeds, %d bytes' % (t, len(os.listdir(d)),
                                          sum(os.path.getsize(os.path.join(d, n))
                                              for n in os.listdir(d))))


if __name__ == '__main__':
    main()
