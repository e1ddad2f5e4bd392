"""Helpers the tool modules share: the user-error type, finding pinfer's executables,
and running one as a child that never outlives its parent."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from typing import Callable, List, Optional

__all__ = ["UserError", "find_tool", "child_preexec", "run_child"]


class UserError(Exception):
    """An error caused by the user's input: printed without a traceback."""


def find_tool(name: str) -> str:
    """Path of a pinfer executable (e.g. ``pinfer-quantize``).

    Looks in $PINFER_BUILD_DIR (a CMake build directory) when set, then next to
    this Python's scripts (where pip installs them), then on PATH."""
    build = os.environ.get("PINFER_BUILD_DIR")
    if build:
        p = os.path.join(os.path.abspath(build), name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    for scheme_dir in {sysconfig.get_path("scripts"), os.path.dirname(sys.executable)}:
        if scheme_dir:
            p = os.path.join(scheme_dir, name)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    found = shutil.which(name)
    if found:
        return found
    where = f" (not in PINFER_BUILD_DIR={build})" if build else ""
    raise UserError(f"cannot find the '{name}' executable{where}: install pinfer with pip, "
                    "or set PINFER_BUILD_DIR to a CMake build directory")


def _die_with_parent(parent: int) -> None:
    """In the child before exec: SIGTERM when the parent dies, even by SIGKILL
    (Linux PR_SET_PDEATHSIG), so no orphan keeps writing the output."""
    try:
        import ctypes

        # The wrapper's Python handlers are inherited until exec: one of them would
        # swallow a SIGTERM that lands before exec. The default action kills the child.
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 15, 0, 0, 0)  # PR_SET_PDEATHSIG = 1, SIGTERM = 15
        if os.getppid() != parent:  # the parent died before prctl took effect (reparented)
            os._exit(143)
    except Exception:
        pass


def child_preexec() -> Optional[Callable[[], None]]:
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()
    return lambda: _die_with_parent(parent)


def run_child(cmd: List[str]) -> int:
    """Run a tool; an interrupted or terminated wrapper stops it (it removes
    its own temporary file on SIGTERM) and waits for it before returning."""
    p = subprocess.Popen(cmd, preexec_fn=child_preexec())
    try:
        return p.wait()
    except BaseException:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        raise
