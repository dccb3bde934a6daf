#!/usr/bin/env python3
"""Seed corpus for tests/fuzz/header_fuzz.c, written by an independent Python encoder of the
chunk object format v1 (docs/FORMAT.md) -- not by the C code under test.

tests/unit/format_test.c loads valid-kv-bf16-partial and checks that the C decoder accepts
it and that the C encoder reproduces it byte for byte, so this file doubles as a second
implementation of the documented layout.

    python3 tests/fuzz/make_corpus.py tests/fuzz/corpus/header_fuzz
"""
import hashlib
import os
import struct
import sys

HEADER = 4096
ALIGN = 4096
DTYPE_BYTES = {1: 2, 2: 2, 3: 1, 4: 4}


def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    return t


_T = _crc_table()


def crc32c(data, crc=0):
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = _T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def align(x):
    return (x + ALIGN - 1) // ALIGN * ALIGN


def layer_bytes(g, n_tokens):
    planes = 2 if g["kind"] == 1 else 1
    return planes * n_tokens * g["kv_heads"] * g["head_dim"] * DTYPE_BYTES[g["dtype"]]


def fix_crc(hdr):
    hdr[4092:4096] = struct.pack("<I", crc32c(bytes(hdr[:4092])))


def encode(g, n_tokens, ns_id, key, payload):
    lb = layer_bytes(g, n_tokens)
    seg = align(lb)
    assert len(payload) == lb * g["layers"]
    total = HEADER + seg * g["layers"]
    obj = bytearray(total)
    hdr = bytearray(HEADER)
    hdr[0:8] = b"KVTCHNK1"
    struct.pack_into("<HHI", hdr, 8, 1, 0, HEADER)
    struct.pack_into("<IIII", hdr, 16, g["layers"], g["kv_heads"], g["head_dim"],
                     g["chunk_tokens"])
    struct.pack_into("<BBH", hdr, 32, g["dtype"], g["kind"], 0)
    struct.pack_into("<IQ", hdr, 36, n_tokens, total)
    hdr[48:80] = ns_id
    hdr[80:112] = key
    struct.pack_into("<IIQ", hdr, 112, ALIGN, 0, lb)
    for layer in range(g["layers"]):
        off = HEADER + layer * seg
        dense = payload[layer * lb:(layer + 1) * lb]
        obj[off:off + lb] = dense
        struct.pack_into("<Q", hdr, 128 + 8 * layer, off)
        struct.pack_into("<I", hdr, 2176 + 4 * layer, crc32c(dense))
    fix_crc(hdr)
    obj[0:HEADER] = hdr
    return obj


def payload_for(g, n_tokens, seed):
    n = layer_bytes(g, n_tokens) * g["layers"]
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d:%d" % (seed, i)).digest()
        i += 1
    return bytes(out[:n])


def geom(layers, kv_heads, head_dim, chunk_tokens, dtype, kind):
    return dict(layers=layers, kv_heads=kv_heads, head_dim=head_dim, chunk_tokens=chunk_tokens,
                dtype=dtype, kind=kind)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus/header_fuzz"
    os.makedirs(out, exist_ok=True)
    files = {}
    ns = hashlib.sha256(b"corpus-ns").digest()
    key = hashlib.sha256(b"corpus-key").digest()

    kv = geom(2, 2, 4, 8, 1, 1)
    valid = encode(kv, 5, ns, key, payload_for(kv, 5, 1))
    files["valid-kv-bf16-partial"] = valid
    mla = geom(3, 1, 16, 4, 3, 2)
    files["valid-mla-fp8-full"] = encode(mla, 4, ns, key, payload_for(mla, 4, 2))
    one = geom(1, 1, 2, 1, 4, 1)
    files["valid-kv-fp32-one-layer"] = encode(one, 1, ns, key, payload_for(one, 1, 3))
    exact = geom(2, 2, 64, 8, 1, 1)  # layer exactly 4 KiB: no padding
    files["valid-kv-bf16-no-padding"] = encode(exact, 8, ns, key, payload_for(exact, 8, 4))

    files["trunc-empty"] = b""
    files["trunc-magic"] = valid[:8]
    files["trunc-header-minus-1"] = valid[:4095]
    files["trunc-header-only"] = valid[:4096]
    files["trunc-minus-1"] = valid[:-1]
    files["valid-extended-plus-1"] = valid + b"\0"

    def corrupt(name, fn, fixcrc=True):
        b = bytearray(valid)
        fn(b)
        if fixcrc:
            hdr = bytearray(b[:HEADER])
            fix_crc(hdr)
            b[:HEADER] = hdr
        files[name] = bytes(b)

    def flip(off):
        def f(b):
            b[off] ^= 1
        return f

    def put(fmt, off, val):
        def f(b):
            struct.pack_into(fmt, b, off, val)
        return f

    corrupt("bad-header-crc", flip(4092), fixcrc=False)
    corrupt("bad-magic", flip(0), fixcrc=False)
    corrupt("bad-layer0-byte", flip(HEADER + 3), fixcrc=False)
    corrupt("bad-layer1-byte", flip(HEADER + ALIGN + 100), fixcrc=False)
    corrupt("crafted-version-2", put("<H", 8, 2))
    corrupt("crafted-flags", put("<H", 10, 1))
    corrupt("crafted-layers-257", put("<I", 16, 257))
    corrupt("crafted-layers-huge", put("<I", 16, 0xFFFFFFFF))
    corrupt("crafted-kv-heads-huge", put("<I", 20, 0x80000000))
    corrupt("crafted-dtype-9", put("<B", 32, 9))
    corrupt("crafted-mla-2-heads", put("<B", 33, 2))
    corrupt("crafted-n-tokens-0", put("<I", 36, 0))
    corrupt("crafted-n-tokens-huge", put("<I", 36, 0xFFFFFFFF))
    corrupt("crafted-object-bytes-huge", put("<Q", 40, 0xFFFFFFFFFFFFFFFF))
    corrupt("crafted-layer-bytes", put("<Q", 120, 1 << 40))
    corrupt("crafted-offset-huge", put("<Q", 128 + 8, 1 << 62))
    corrupt("crafted-offset-unused", put("<Q", 128 + 8 * 2, 4096))
    corrupt("crafted-crc-unused", put("<I", 2176 + 4 * 7, 1))
    corrupt("crafted-reserved", put("<B", 3300, 1))

    total = 0
    for name, data in sorted(files.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        total += len(data)
    print(f"{len(files)} files, {total} bytes in {out}")


if __name__ == "__main__":
    main()
