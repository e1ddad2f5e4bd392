"""Start a real `pinfer serve` on 127.0.0.1 (a free port) as a subprocess, for tests.

With PINFER_BUILD_DIR set (see conftest.py) the child imports pinfer from python/
and the extension from that build dir, as the test process does."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import List, Optional

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_BOOT = """
import glob, importlib.util, os, sys
root, build = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(root, "python"))
so = glob.glob(os.path.join(build, "_core*.so"))[0]
spec = importlib.util.spec_from_file_location("pinfer._core", so)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); sys.modules["pinfer._core"] = mod
from pinfer.server.cli import standalone as main
sys.exit(main(sys.argv[3:]))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, args: List[str], api_key: Optional[str] = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = ["--port", str(self.port)] + args + (["--api-key", api_key] if api_key else [])
        build = os.environ.get("PINFER_BUILD_DIR")
        if build:
            build = build if os.path.isabs(build) else os.path.join(ROOT, build)
            cmd = [sys.executable, "-c", _BOOT, ROOT, build] + argv
        else:
            cmd = [sys.executable, "-m", "pinfer.server"] + argv
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("PINFER_API_KEY", None)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: {self.proc.stdout.read()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the server did not answer /health within 60 s")
            time.sleep(0.1)

    def stop(self, sig: Optional[int] = None, timeout: float = 20) -> int:
        import signal
        if self.proc.poll() is None:
            self.proc.send_signal(sig or signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def output(self) -> str:
        return self.proc.stdout.read() if self.proc.stdout else ""
