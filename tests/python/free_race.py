"""A harness for the tests that free a C object (a store, a Rows handle, a job) on one
thread while another thread is inside a C call on it: the free must wait for the call.
The C functions are wrapped so that the call can be held inside, and a free that lands
while a wrapped call runs is recorded and skipped (the object leaks instead of being freed
under the call), so the old code fails the test cleanly instead of crashing."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable


class FreeRace:
    def __init__(self, monkeypatch, lib, names: list[str], free_name: str,
                 no_hold: tuple[str, ...] = ()):
        """Wrap names of lib (a call on the thread named "user" signals `entered`, then,
        unless it is in no_hold - a call that blocks by itself - waits for the release) and
        free_name (recorded in `bad` when it lands inside a wrapped call)."""
        self.inside, self.bad = 0, []
        self.entered, self.gate = threading.Event(), threading.Event()
        lock = threading.Lock()
        real_free = getattr(lib, free_name)

        def wrap(name, real):
            def call(*args):
                with lock:
                    self.inside += 1
                try:
                    if threading.current_thread().name == "user":
                        self.entered.set()
                        if name not in no_hold:
                            self.gate.wait(10)
                    return real(*args)
                finally:
                    with lock:
                        self.inside -= 1
            return call

        def free(p):
            if self.inside:
                self.bad.append(f"{free_name} while a call on it was running")
                return None
            return real_free(p)

        for n in names:
            monkeypatch.setattr(lib, n, wrap(n, getattr(lib, n)))
        monkeypatch.setattr(lib, free_name, free)

    def run(self, call: Callable[[], Any], freer: Callable[[], None],
            settle: float = 0.0) -> Any:
        """call() on the thread "user"; once it is inside C (and settle seconds more),
        freer() on another thread; the held call released 0.2 s later. Checks that the
        free neither hung nor landed inside the call, and returns call()'s result."""
        out = []
        user = threading.Thread(target=lambda: out.append(call()), name="user", daemon=True)
        user.start()
        assert self.entered.wait(10)
        time.sleep(settle)
        freeing = threading.Thread(target=freer, daemon=True)
        freeing.start()
        time.sleep(0.2)  # the free has reached the object, or waits for the call
        self.gate.set()
        freeing.join(10)
        assert not freeing.is_alive(), "the free hung"
        assert not self.bad, self.bad
        user.join(10)
        assert not user.is_alive() and len(out) == 1
        return out[0]
