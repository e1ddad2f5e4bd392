"""The package is typed: py.typed and the extension's stub are installed, and the stub
declares every public name the built extension has."""
import ast
import os

import pinfer
from pinfer import _core

PKG = os.path.dirname(pinfer.__file__)


def test_marker_and_stub_are_installed():
    assert os.path.isfile(os.path.join(PKG, "py.typed"))
    assert os.path.isfile(os.path.join(PKG, "_core.pyi"))


def test_stub_declares_every_public_name():
    with open(os.path.join(PKG, "_core.pyi"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    declared = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            declared.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared.add(node.target.id)
        elif isinstance(node, ast.Assign):
            declared.update(t.id for t in node.targets if isinstance(t, ast.Name))
    public = {n for n in dir(_core) if not n.startswith("_")}
    assert len(public) > 20
    assert public - declared == set()
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GGUFReader")
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert {"get"} <= methods and {"tensors", "keys"} <= methods  # properties are functions in a stub
