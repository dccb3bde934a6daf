#!/usr/bin/env python3
"""Independent reference for kvtier chunk keys (docs/FORMAT.md), using only hashlib.

Prints the canonical namespace text, ns_id and chunk keys of the test-vector cases.
tests/unit/keys_test.c checks the C implementation against the same values; a change to
either side that alters a key must show up as a failing test.

    python3 tests/unit/keys_vectors.py          # human-readable
    python3 tests/unit/keys_vectors.py --c      # C initialisers for keys_test.c
"""
import hashlib
import struct
import sys

DTYPES = {1: "bf16", 2: "fp16", 3: "fp8", 4: "fp32"}
KINDS = {1: "kv", 2: "mla"}


def ns_text(model, revision, layers, kv_heads, head_dim, dtype, kind, chunk_tokens, tenant):
    return ("kvtier-ns-v1\n"
            f"model={model}\n"
            f"revision={revision}\n"
            f"layers={layers}\n"
            f"kv_heads={kv_heads}\n"
            f"head_dim={head_dim}\n"
            f"dtype={DTYPES[dtype]}\n"
            f"kind={KINDS[kind]}\n"
            f"chunk_tokens={chunk_tokens}\n"
            f"tenant={tenant}\n").encode("utf-8")


def keys(ns_id, chunk_tokens, tokens):
    prev = bytes(32)
    out = []
    for i in range(0, len(tokens), chunk_tokens):
        chunk = tokens[i:i + chunk_tokens]
        h = hashlib.sha256()
        h.update(b"kvtier-chunk-v1")
        h.update(ns_id)
        h.update(prev)
        h.update(struct.pack("<%dI" % len(chunk), *chunk))
        prev = h.digest()
        out.append(prev)
    return out


def storage_key(ns_id, key):
    """The name every tier stores a chunk under (docs/FORMAT.md section 2b)."""
    h = hashlib.sha256()
    h.update(b"kvtier-store-v1".ljust(32, b"\0"))
    h.update(ns_id)
    h.update(key)
    return h.digest()


OPAQUE = bytes([0x42]) * 32  # an engine's own key, the same for every namespace


def golden_tokens(n, mul, add):
    """Deterministic token lists: (i * mul + add) mod 2^32."""
    return [(i * mul + add) & 0xFFFFFFFF for i in range(n)]


# (name, namespace args, token list description, tokens)
CASES = [
    ("llama_two_chunks",
     dict(model="meta-llama/Llama-3.1-8B-Instruct", revision="0e9e39f249a16976918f6564b8830bc894c89659",
          layers=32, kv_heads=8, head_dim=128, dtype=1, kind=1, chunk_tokens=256, tenant=""),
     "i for i in 0..511", list(range(512))),
    ("llama_tenant_salt",
     dict(model="meta-llama/Llama-3.1-8B-Instruct", revision="0e9e39f249a16976918f6564b8830bc894c89659",
          layers=32, kv_heads=8, head_dim=128, dtype=1, kind=1, chunk_tokens=256, tenant="acme-corp"),
     "i for i in 0..511", list(range(512))),
    ("tiny_partial",
     dict(model="tiny", revision="r1", layers=2, kv_heads=2, head_dim=4, dtype=4, kind=1,
          chunk_tokens=4, tenant=""),
     "1..10 (last chunk has 2 tokens)", list(range(1, 11))),
    ("mla_fp8_wide_tokens",
     dict(model="deepseek-ai/DeepSeek-V3", revision="main", layers=61, kv_heads=1, head_dim=576,
          dtype=3, kind=2, chunk_tokens=64, tenant="t\u00e9nant-\u00fcnicode"),
     "(i * 2654435761 + 0xdeadbeef) mod 2^32 for i in 0..149",
     golden_tokens(150, 2654435761, 0xDEADBEEF)),
    ("single_token",
     dict(model="m", revision="", layers=1, kv_heads=1, head_dim=1, dtype=2, kind=1,
          chunk_tokens=65536, tenant=""),
     "[4294967295]", [0xFFFFFFFF]),
]


def main():
    as_c = "--c" in sys.argv
    for name, ns, desc, tokens in CASES:
        text = ns_text(**ns)
        ns_id = hashlib.sha256(text).digest()
        ks = keys(ns_id, ns["chunk_tokens"], tokens)
        if as_c:
            print(f"\t/* {name}: tokens {desc} */")
            print(f'\t{{"{name}",\n\t "{ns_id.hex()}",\n\t {len(ks)},\n\t {{')
            for k in ks:
                print(f'\t\t"{k.hex()}",')
            print("\t}},")
            continue
        print(f"## {name}")
        print("namespace text:")
        for line in text.decode("utf-8").splitlines():
            print(f"    {line}")
        print(f"tokens: {desc}")
        print(f"ns_id:  {ns_id.hex()}")
        for i, k in enumerate(ks):
            print(f"key[{i}]: {k.hex()}")
        print(f"storage(key[0]): {storage_key(ns_id, ks[0]).hex()}")
        print(f"storage(42..42): {storage_key(ns_id, OPAQUE).hex()}")
        print()


if __name__ == "__main__":
    main()
