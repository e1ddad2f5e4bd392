"""Test set-up: use an installed pinfer, or one from a CMake build dir.

With PINFER_BUILD_DIR=<cmake build dir configured with -DPINFER_PYTHON=ON>, the
package is imported from python/ and its extension from that build dir, so a
developer can run the tests without reinstalling.
"""
import glob
import importlib.util
import os
import sys

_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_build = os.environ.get("PINFER_BUILD_DIR")
if _build:
    _build = os.path.join(_root, _build) if not os.path.isabs(_build) else _build
    _so = glob.glob(os.path.join(_build, "_core*.so"))
    if not _so:
        raise RuntimeError(f"no _core extension in {_build}: build it with -DPINFER_PYTHON=ON")
    sys.path.insert(0, os.path.join(_root, "python"))
    _spec = importlib.util.spec_from_file_location("pinfer._core", _so[0])
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    sys.modules["pinfer._core"] = _mod
