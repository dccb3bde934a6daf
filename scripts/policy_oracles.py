#!/usr/bin/env python3
"""policy_oracles.py - how far an online DRAM policy could go if it predicted perfectly.

Why: issue #12 asks for half the LRU -> Belady gap on conversation traffic. Belady knows
when every block comes back; an online policy can at best know *whether* a conversation
comes back and how fast it usually does. This replays a saved trace (Mooncake JSON lines,
e.g. `kvtier replay --workload conversation --save-trace T`) with policies handed such
knowledge by an oracle, to bound what predicting continuation and pace can buy.

Model, as src/sim.c's DRAM-only replay: a request's hit is the longest run of its leading
blocks resident; then all its blocks are inserted or touched; while over capacity the
block of lowest value goes, ties to the oldest request and, within it, the deepest block
(suffixes first). With value 0 everywhere this is LRU and matches `kvtier replay --policy
lru --set dram.partial_first=false` to the digit (a check of the model, printed as "lru";
the model has no partial-block rule, so the bounds are against plain LRU).

A conversation is identified by its 6th block (shared system prompts are at most 4 full
blocks in the generator); blocks of the first five positions that more than one
conversation uses are "shared". Values (a block's value is its conversation's, and a
shared block's is at least its own future use rate: a prefix is worth what its suffixes
are):
  lru    0
  turns  P(another turn | k turns so far) of the generator's power law, (k/(k+1))^1.9:
         what the turn count tells an online policy (no oracle)
  cont   1 if the conversation has another turn, else 0 (oracle: whether, not when)
  pace   cont / the conversation's mean gap between turns (oracle: whether and how fast)

With "reuse" in place of DRAM_TOKENS it prints instead where the trace's reuse is: the share of its
distinct blocks first seen in a conversation's first request, and of an infinite cache's
hits that land on them (what NVMe admission must write to keep those hits).

usage: policy_oracles.py TRACE (DRAM_TOKENS [MODE ...] | reuse)
"""
import collections
import heapq
import json
import sys


class Blocks(list):
    """A request's hash_ids, and how many of them are full 512-token blocks."""
    full = 0


def load(path):
    reqs = []
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            h = Blocks(d["hash_ids"])
            h.full = d.get("input_length", 512 * len(h)) // 512
            reqs.append((d["timestamp"], h))
    return reqs


def conv_of(h):
    """A conversation's key: its block at position 5, or its last full one when shorter. A
    prompt's partial last block gets a new id at the next turn (the turn extends it): keyed
    by it, a short first turn and its second looked like two conversations (until
    2026-12-05; a review found it, about 8 % of conversations)."""
    full = getattr(h, "full", len(h))
    return h[min(5, max(full - 1, 0), len(h) - 1)]


def run(reqs, cap_blocks, mode):
    users = collections.defaultdict(set)  # first-five-position block -> conversations
    for _, h in reqs:
        for b in h[:5]:
            users[b].add(conv_of(h))
    shared = {b for b, cs in users.items() if len(cs) > 1}
    turns = collections.defaultdict(list)  # conversation -> its requests
    uses = collections.defaultdict(list)  # block -> times used
    for i, (ts, h) in enumerate(reqs):
        turns[conv_of(h)].append(i)
        for b in h:
            uses[b].append(ts)
    span = reqs[-1][0] - reqs[0][0] + 1

    def conv_value(c, i):
        idx = turns[c]
        k = idx.index(i)
        if mode == "lru":
            return 0.0
        if mode == "turns":
            return ((k + 1) / (k + 2)) ** 1.9 * 1e-6
        if k + 1 >= len(idx):
            return 0.0
        if mode == "cont":
            return 1e-6
        gaps = [reqs[idx[m + 1]][0] - reqs[idx[m]][0] for m in range(len(idx) - 1)]
        return 1.0 / (sum(gaps) / len(gaps) + 1)

    resident, heap, seq, hits, blocks = {}, [], 0, 0, 0
    for i, (ts, h) in enumerate(reqs):
        n = 0
        while n < len(h) and h[n] in resident:
            n += 1
        hits += n
        blocks += len(h)
        cv = conv_value(conv_of(h), i)
        for j, b in enumerate(h):
            v = cv
            if b in shared and mode != "lru":
                later = sum(1 for t in uses[b] if t > ts)
                v = max(cv, later / span)
            seq += 1
            resident[b] = seq
            heapq.heappush(heap, (v, i, -j, seq, b))
        while len(resident) > cap_blocks:
            _, _, _, s, b = heapq.heappop(heap)
            if resident.get(b) == s:
                del resident[b]
    return hits / blocks


def turn_shares(reqs):
    turn, first_turn = collections.Counter(), {}
    new, hits, blocks = [0, 0], [0, 0], 0
    for _, h in reqs:
        c = conv_of(h)
        later = 1 if turn[c] else 0
        turn[c] += 1
        for b in h:
            blocks += 1
            if b in first_turn:
                hits[first_turn[b]] += 1
            else:
                first_turn[b] = later
                new[later] += 1
    print(f"distinct blocks first seen in a first request: {new[0] / sum(new):.4f} of {sum(new)}")
    print(f"infinite-cache block hit ratio {sum(hits) / blocks:.4f}: "
          f"{hits[0] / blocks:.4f} on those blocks, {hits[1] / blocks:.4f} on the others")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    reqs = load(sys.argv[1])
    if sys.argv[2] == "reuse":
        turn_shares(reqs)
        return
    cap = int(sys.argv[2]) // 512
    for mode in sys.argv[3:] or ["lru", "turns", "cont", "pace"]:
        if mode not in ("lru", "turns", "cont", "pace"):
            sys.exit(f"policy_oracles: unknown mode '{mode}' (lru, turns, cont, pace)")
        print(f"{mode:6s} {sys.argv[2]} tokens: block hit ratio {run(reqs, cap, mode):.4f}")


if __name__ == "__main__":
    main()
