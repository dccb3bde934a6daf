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


class Kvtierd:
    """A real kvtierd serving dram,nvme from workdir on workdir/kvtierd.sock, with the
    kvtier keys of settings (the clients' geometry and model)."""

    def __init__(self, workdir: str, settings: dict):
        self.sock = os.path.join(workdir, "kvtierd.sock")
        args = [_kvtierd_exe(), "--dir", os.path.join(workdir, "kvtierd"), "--socket",
                self.sock, "--tiers", "dram,nvme", "--set", "dram.bytes=8MiB",
                "--set", "dram.hugepages=false", "--set", "nvme.fsync=none"]
        for k, v in settings.items():
            args += ["--set", f"{k}={v}"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.sock):
            assert self.proc.poll() is None, "kvtierd exited at start"
            assert time.monotonic() < deadline, "kvtierd did not start"
            time.sleep(0.02)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


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
