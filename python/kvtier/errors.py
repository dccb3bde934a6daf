"""Exceptions for kvtier's -errno results. Every one carries the errno and the library's own
text for it (kvt_strerror), plus what was being done; subclasses let callers catch the
cases they handle differently (a miss, a corrupt object, back-pressure, a slow tier)."""

from __future__ import annotations

import errno as _errno

from ._lib import lib


class KvtierError(OSError):
    """A kvtier call failed: .errno is the positive errno, str() names the operation and
    the library's text for the error (kvt_strerror)."""

    def __init__(self, err: int, what: str = "", detail: str = ""):
        err = abs(int(err))
        text = lib.kvt_strerror(-err).decode()
        msg = f"{what}: {text}" if what else text
        if detail:
            msg += f" ({detail})"
        super().__init__(err, msg)
        self.text = text


class NotFound(KvtierError):
    """-ENOENT: the key is in no tier (a miss), or an unknown configuration key."""


class Corrupt(KvtierError):
    """-EBADMSG: an object failed its format or checksum checks; it was dropped."""


class Busy(KvtierError):
    """-EAGAIN: too many operations in flight; retry after completions were polled."""


class NoSpace(KvtierError):
    """-ENOSPC: a tier is full and nothing could be evicted."""


class TierTimeout(KvtierError):
    """-ETIMEDOUT: a tier did not answer within its deadline."""


class Canceled(KvtierError):
    """-ECANCELED: the store is closing."""


class InvalidArgument(KvtierError, ValueError):
    """-EINVAL: a bad argument or configuration value."""


_BY_ERRNO = {
    _errno.ENOENT: NotFound,
    _errno.EBADMSG: Corrupt,
    _errno.EAGAIN: Busy,
    _errno.ENOSPC: NoSpace,
    _errno.ETIMEDOUT: TierTimeout,
    _errno.ECANCELED: Canceled,
    _errno.EINVAL: InvalidArgument,
}


def error(rc: int, what: str = "", detail: str = "") -> KvtierError:
    """The exception for a negative return code rc."""
    return _BY_ERRNO.get(abs(rc), KvtierError)(rc, what, detail)


def check(rc: int, what: str, detail: str = "") -> int:
    """Return rc if it is >= 0, raise the matching KvtierError otherwise."""
    if rc < 0:
        raise error(rc, what, detail)
    return rc
