"""Checkpoint file formats written and read by hand, as the frameworks' libraries do, for the
trainer (tests/e2e/trainer.py) and the tests: SHA-256 helpers, safetensors (the format of
huggingface/safetensors: u64 LE header length, JSON header, raw tensor bytes), torch.save bytes.
torch is imported on use, so the module loads without it."""

import hashlib
import io
import json
import mmap
import os
import struct


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


# -- safetensors, by hand ---------------------------------------------------------------------

def _st_dtypes():
    import torch
    return {torch.float32: 'F32', torch.float64: 'F64', torch.bfloat16: 'BF16',
            torch.float16: 'F16', torch.int64: 'I64', torch.int32: 'I32', torch.uint8: 'U8'}


def safetensors_bytes(tensors, metadata=None):
    """The safetensors format: u64 LE header length, JSON header (dtype, shape, data_offsets),
    padded with spaces to 8 bytes, then the raw little-endian tensor bytes."""
    dt = _st_dtypes()
    header = {}
    if metadata:
        header['__metadata__'] = {k: str(v) for k, v in metadata.items()}
    blobs = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        b = t.view(-1).view(__import__('torch').uint8).numpy().tobytes() if t.numel() else b''
        header[name] = {'dtype': dt[t.dtype], 'shape': list(t.shape),
                        'data_offsets': [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * (-len(h) % 8)
    return struct.pack('<Q', len(h)) + h + b''.join(blobs)


def safetensors_load(path):
    """safe_open-like: mmap the file (MAP_PRIVATE), validate the header against the size."""
    import torch
    rev = {v: k for k, v in _st_dtypes().items()}
    with open(path, 'rb') as f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise ValueError('%s: safetensors file too small (%d bytes)' % (path, size))
        mm = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
    try:
        n = struct.unpack('<Q', mm[:8])[0]
        if 8 + n > size:
            raise ValueError('%s: safetensors header too large (%d > %d)' % (path, n, size - 8))
        header = json.loads(mm[8:8 + n])
        meta = header.pop('__metadata__', {})
        base = 8 + n
        out = {}
        end = 0
        for name, info in header.items():
            b, e = info['data_offsets']
            end = max(end, e)
            if base + e > size:
                raise ValueError('%s: tensor %s beyond end of file (incomplete buffer)' %
                                 (path, name))
            buf = bytearray(mm[base + b:base + e])
            dtype = rev[info['dtype']]
            if buf:
                t = torch.frombuffer(buf, dtype=torch.uint8).view(dtype)
            else:
                t = torch.empty(0, dtype=dtype)
            out[name] = t.reshape(info['shape']).clone()
        if base + end != size:
            raise ValueError('%s: safetensors size %d != header end %d' % (path, size, base + end))
    finally:
        mm.close()
    return out, meta



def tsave_bytes(obj):
    import torch
    b = io.BytesIO()
    torch.save(obj, b)
    return b.getvalue()
