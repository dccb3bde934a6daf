#!/usr/bin/env python3
# Why: kvtierd's KV events are meant to be read by routers that already follow vLLM's
# event stream. This subscribes to a kvtierd (daemon.events) and decodes every batch with
# msgspec structs declared the way vLLM declares its own (tagged maps, omit_defaults; the
# field names of vllm/distributed/kv_events.py), so kvtier's extra keys must be ignored
# and vLLM's must all be there; it also checks the sequence has no gap. Needs
# `pip install msgspec pyzmq` (not a build dependency).
# Usage: scripts/events-vllm-check.py ENDPOINT [SECONDS_OF_SILENCE_TO_STOP]
import sys
from typing import Any, Optional, Union

import msgspec
import zmq


class EventBatch(msgspec.Struct, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: Optional[int] = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[Union[bytes, int]]
    parent_block_hash: Optional[Union[bytes, int]]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]
    extra_keys: Optional[list] = None
    group_idx: Optional[int] = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[Union[bytes, int]]
    medium: Optional[str]
    group_idx: Optional[int] = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]


def main() -> int:
    dec = msgspec.msgpack.Decoder(type=KVEventBatch)
    sock = zmq.Context().socket(zmq.SUB)
    sock.connect(sys.argv[1])
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.setsockopt(zmq.RCVTIMEO, int(float(sys.argv[2] if len(sys.argv) > 2 else 4) * 1000))
    counts: dict = {}
    last = None
    try:
        while True:
            _topic, seq_b, payload = sock.recv_multipart()
            seq = int.from_bytes(seq_b, "big")
            if last is not None and seq != last + 1:
                print(f"gap: batch {seq} after {last}")
                return 1
            last = seq
            for ev in dec.decode(payload).events:
                key = (type(ev).__name__, ev.medium)
                counts[key] = counts.get(key, 0) + 1
    except zmq.Again:
        pass
    print("decoded as vLLM's KVEventBatch:", sorted(counts.items()), "last sequence", last)
    return 0 if counts else 1


if __name__ == "__main__":
    sys.exit(main())
