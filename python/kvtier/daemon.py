"""Start a kvtierd (the node daemon, docs/DAEMON.md) as a child process: for demos
(kvtier.vllm.demo) and tests that need a real one. One place for how it is started and
waited for, so the two do not drift apart."""

from __future__ import annotations

import os
import socket
import subprocess
import time


class Kvtierd:
    """kvtierd serving `settings` (kvtier config keys) from workdir/kvtierd, listening on
    workdir/kvtierd.sock; output to `log` (a file object) or nowhere. Returns once the
    socket accepts a connection; a daemon that exits first, or is not up within start_timeout seconds,
    raises RuntimeError."""

    def __init__(self, exe: str, workdir: str, settings: dict, log=None,
                 start_timeout: float = 60.0):
        self.sock = os.path.join(workdir, "kvtierd.sock")
        args = [exe, "--dir", os.path.join(workdir, "kvtierd"), "--socket", self.sock]
        for k, v in settings.items():
            args += ["--set", f"{k}={v}"]
        out = log if log is not None else subprocess.DEVNULL
        self.proc = subprocess.Popen(args, stdout=out, stderr=out)
        deadline = time.monotonic() + start_timeout
        # up once it accepts a connection: the socket file alone may be one a killed
        # daemon left behind (this returned at once then, before the new one listened or
        # even when it failed to start)
        while not self._answers():
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvtierd exited at start (status {self.proc.returncode})")
            if time.monotonic() > deadline:
                self.stop(kill=True)
                raise RuntimeError(f"kvtierd did not start within {start_timeout} s")
            time.sleep(0.02)

    def _answers(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as c:
            try:
                c.connect(self.sock)
                return True
            except OSError:
                return False

    def stop(self, kill: bool = False) -> None:
        """SIGTERM (the daemon flushes and exits) or SIGKILL; waits for it."""
        if self.proc.poll() is None:
            (self.proc.kill if kill else self.proc.terminate)()
        self.proc.wait(timeout=60)
