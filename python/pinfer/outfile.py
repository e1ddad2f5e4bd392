"""Output files of the pinfer tools, written safely.

Every tool that writes a file goes through :func:`atomic_output`: the target
must be absent or a regular file (a directory, symbolic link, FIFO, socket or
device is refused with an error naming it, so that ``-o /dev/null`` run as
root never replaces the device), and must not be one of the tool's inputs.
The data goes to a temporary file in the target's directory, which is renamed
over the target only when complete; on an error, Ctrl-C or SIGTERM the
temporary file is removed. New files get the permissions of any new file
(0666 less the umask), not mkstemp's 0600.
"""
from __future__ import annotations

import contextlib
import os
import signal
import stat
import tempfile
from typing import Iterable, Iterator, Set

_pending: Set[str] = set()  # temporary files being written


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM / SIGHUP (see install_signal_handlers),
    so that cleanups run as they do for KeyboardInterrupt."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_held = 0            # > 0 while a temporary file is created or renamed (see signals_held)
_deferred: list = []  # signals that arrived meanwhile


def _raise_for(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def install_signal_handlers() -> dict:
    """Turn SIGTERM and SIGHUP into :class:`Terminated` and SIGINT into
    KeyboardInterrupt (main thread only); returns the previous handlers for
    :func:`restore_signal_handlers`. A signal that lands while a temporary
    file is being created or renamed is raised right after that step."""
    def handler(signum, frame):
        if _held:
            _deferred.append(signum)
        else:
            _raise_for(signum)

    old = {}
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        try:
            old[s] = signal.signal(s, handler)
        except (ValueError, OSError):  # not the main thread, or not settable here
            pass
    return old


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Create-and-register (or rename-and-forget) a temporary file as one step:
    the handlers above hold a signal until the block ends, so it never lands
    between a file appearing and the cleanup knowing about it."""
    global _held
    _held += 1
    try:
        yield
    finally:
        _held -= 1
    if not _held and _deferred:
        signum = _deferred[0]
        _deferred.clear()
        _raise_for(signum)


def restore_signal_handlers(old: dict) -> None:
    for s, h in old.items():
        signal.signal(s, h)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def check_output(path: str, inputs: Iterable[str] = (), what: str = "output") -> None:
    """Raise ValueError unless ``path`` may be written: absent or a regular
    file, in an existing directory, and not the same file as any of ``inputs``."""
    path = os.fspath(path)
    if not path:
        raise ValueError(f"{what}: empty path")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what} '{path}' is {_kind(st.st_mode)}; refusing to replace it "
                         "(give the path of a regular file)")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"{what} '{path}': directory '{parent}' does not exist")
    if st is not None:
        for src in inputs:
            try:
                same = os.path.samefile(path, src)
            except OSError:
                continue
            if same:
                raise ValueError(f"{what} '{path}' is the input file '{src}'; choose another output path")


def current_umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m


@contextlib.contextmanager
def atomic_output(path: str, inputs: Iterable[str] = (), what: str = "output") -> Iterator[str]:
    """Yield a temporary path beside ``path`` to write; on success it is synced
    and renamed over ``path``, on any exception (or Terminated) removed."""
    path = os.fspath(path)
    inputs = list(inputs)
    check_output(path, inputs, what)
    d = os.path.dirname(os.path.abspath(path))
    base, ext = os.path.splitext(os.path.basename(path))
    tmp = None
    try:
        with signals_held():
            # the real extension last: np.savez and savefig pick the format from it
            fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=f".tmp{ext}", dir=d)
            _pending.add(tmp)
        os.fchmod(fd, 0o666 & ~current_umask())
        os.close(fd)
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        check_output(path, inputs, what)  # nothing replaced it with a device meanwhile
        with signals_held():
            os.replace(tmp, path)
            _pending.discard(tmp)
    except BaseException:
        if tmp is not None and tmp in _pending:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    finally:
        if tmp is not None:
            _pending.discard(tmp)


def pending() -> Set[str]:
    """The temporary files being written now (for tests)."""
    return set(_pending)
