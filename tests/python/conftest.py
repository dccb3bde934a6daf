"""Shared pytest fixtures for the kvtier Python package: a per-test directory under
$KVT_TEST_DIR (so helpers and CI runs do not collide), a real redis-server and a real
kvtierd."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

import kvtier.daemon


def pytest_configure(config):
    config.addinivalue_line("markers", "vllm: end-to-end tests that start real vLLM engines")
    config.addinivalue_line("markers", "ceph: tests that start the test Ceph (run under flock)")


@pytest.fixture
def tdir():
    base = os.environ.get("KVT_TEST_DIR", "/var/tmp")
    os.makedirs(base, exist_ok=True)
    d = tempfile.mkdtemp(prefix="kvt-py-", dir=base)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class RedisServer:
    """A real redis-server on 127.0.0.1 without persistence (tests/integ/lib/redis.sh in
    Python). A missing redis-server fails the test: it is a declared dependency."""

    def __init__(self, workdir: str):
        exe = shutil.which("redis-server")
        assert exe, "redis-server is not installed (scripts/deps.sh installs it)"
        self.dir = workdir
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", workdir,
             "--save", "", "--appendonly", "no", "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def redis_server(tdir):
    r = RedisServer(tdir)
    yield r
    r.stop()


def _kvtierd_exe() -> str:
    """The kvtierd of this build: $KVT_BIN, next to $KVTIER_LIB, the checkout's build/, or
    PATH. Missing fails the test: it is built with the library."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for d in (os.environ.get("KVT_BIN", ""), os.path.dirname(os.environ.get("KVTIER_LIB", "")),
              os.path.join(root, "build")):
        exe = os.path.join(d, "kvtierd")
        if d and os.access(exe, os.X_OK):
            return exe
    exe = shutil.which("kvtierd")
    assert exe, "kvtierd not found: build the project (build/kvtierd) or set KVT_BIN"
    return exe


class Kvtierd(kvtier.daemon.Kvtierd):
    """A real kvtierd serving dram,nvme from workdir on workdir/kvtierd.sock, with the
    kvtier keys of settings (the clients' geometry and model)."""

    def __init__(self, workdir: str, settings: dict):
        base = {"store.tiers": "dram,nvme", "dram.bytes": "8MiB", "dram.hugepages": "false",
                "nvme.fsync": "none"}
        try:
            super().__init__(_kvtierd_exe(), workdir, {**base, **settings},
                             start_timeout=10)
        except RuntimeError as e:
            pytest.fail(str(e))

    def stop(self):
        super().stop(kill=True)


@pytest.fixture
def kvtierd(tdir):
    """Starts kvtierd(settings) in tdir; every one started is stopped after the test."""
    started = []

    def start(settings: dict) -> Kvtierd:
        d = Kvtierd(tdir, settings)
        started.append(d)
        return d
    yield start
    for d in started:
        d.stop()
