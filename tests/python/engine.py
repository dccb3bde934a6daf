"""Test-side driver of a real vLLM engine process (kvtier.vllm.harness serve): start it,
send JSON commands, read its answers with a deadline, stop it; plus the prompts and the
object-file reader the end-to-end tests share."""

from __future__ import annotations

import json
import os
import queue
import random
import subprocess
import sys
import threading
import time

import numpy as np

import kvtier

START_TIMEOUT_S = float(os.environ.get("KVT_VLLM_START_TIMEOUT", "600"))
CMD_TIMEOUT_S = float(os.environ.get("KVT_VLLM_CMD_TIMEOUT", "300"))


def prompt(seed: int, n: int = 600) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100, 32000) for _ in range(n)]


class Engine:
    """One fresh vLLM process. Use as a context manager; quit() shuts it down cleanly
    (the tier's store is closed, so its write-behind is complete when quit returns)."""

    def __init__(self, workdir: str, name: str, spec: dict, env: dict | None = None):
        self.name = name
        self.log_path = os.path.join(workdir, f"{name}.log")
        spec_path = os.path.join(workdir, f"{name}.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        e = dict(os.environ)
        e.update(env or {})
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvtier.vllm.harness", "serve", spec_path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
            env=e, start_new_session=True)
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        ready = self._answer(START_TIMEOUT_S)
        assert ready.get("ready"), ready

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith("KVT> "):
                self._q.put(json.loads(line[5:]))
            else:
                self._log.write(line)
        self._q.put(None)

    def _answer(self, timeout: float) -> dict:
        try:
            a = self._q.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise AssertionError(f"{self.name}: no answer within {timeout:.0f} s; "
                                 f"log {self.log_path}:\n{self.tail()}")
        if a is None:
            raise AssertionError(f"{self.name} exited (rc {self.proc.wait()}); "
                                 f"log {self.log_path}:\n{self.tail()}")
        return a

    def tail(self, n: int = 40) -> str:
        self._log.flush()
        with open(self.log_path) as f:
            return "".join(f.readlines()[-n:])

    def cmd(self, timeout: float = CMD_TIMEOUT_S, **c) -> dict:
        self.proc.stdin.write(json.dumps(c) + "\n")
        self.proc.stdin.flush()
        return self._answer(timeout)

    def generate(self, prompts, max_tokens: int = 16, timeout: float = CMD_TIMEOUT_S):
        return self.cmd(timeout, op="generate", prompts=prompts, max_tokens=max_tokens)

    def quit(self):
        if self.proc.poll() is None:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.flush()
            bye = self._answer(CMD_TIMEOUT_S)
            assert bye.get("bye"), bye
            self.proc.wait(CMD_TIMEOUT_S)
        self._log.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is None:
            self.quit()
        else:
            self.kill()
            self._log.close()


def objects(root: str) -> list[str]:
    """Object files of a kvtier fs or nvme directory (named by 64 hex digits)."""
    out = []
    for dp, _, fs in os.walk(root):
        out += [os.path.join(dp, f) for f in fs if len(f) == 64 and "." not in f]
    return sorted(out)


def read_object(path: str, geo: kvtier.Geometry) -> np.ndarray:
    """The canonical K/V of a stored full chunk, by FORMAT.md (header, then each layer at
    its aligned offset, K then V [tokens][heads][dim]): bf16 bits as uint16,
    shape (layers, 2, tokens, heads, dim)."""
    with open(path, "rb") as f:
        data = f.read()
    T = geo.chunk_tokens
    lb = geo.layer_bytes(T)
    layers = [np.frombuffer(data, np.uint16, lb // 2, geo.layer_offset(T, l))
              for l in range(geo.layers)]
    return np.stack(layers).reshape(geo.layers, 2, T, geo.kv_heads, geo.head_dim)


def dir_files(root: str) -> dict[str, int]:
    """{path: size} of the files under root (one walk; not atomic across directories)."""
    out = {}
    for dp, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(dp, f)
            try:
                out[p] = os.stat(p).st_size
            except FileNotFoundError:
                continue
    return out


class DiskSampler:
    """Peak bytes on disk under root, sampled by walks. One walk is not a snapshot: a file
    evicted in one directory after the walk counted it, and another written in a directory
    the walk reached later, would both be counted. So a sample is the files present in two
    consecutive walks: each existed at both observations, and all of them at once at the
    instant the first walk ended. Never an overcount; a file living shorter than a walk
    is missed. Published objects and every file (temp files of writes in flight and
    evicted objects whose unlink is pending) are kept apart."""

    def __init__(self, root: str):
        self.root = root
        self.prev: dict[str, int] = {}
        self.peak_objects = 0
        self.peak_total = 0

    def sample(self) -> None:
        cur = dir_files(self.root)
        both = {p: n for p, n in cur.items() if self.prev.get(p) == n}
        self.prev = cur
        objs = sum(n for p, n in both.items()
                   if ".tmp." not in os.path.basename(p) and
                   not os.path.basename(p).startswith("."))
        self.peak_objects = max(self.peak_objects, objs)
        self.peak_total = max(self.peak_total, sum(both.values()))
