"""Imports flow downward only (docs/internals.md): checked on the source, and at run time for
the broker, which must not load the client."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "magnetar"

#: What each layer may import from magnetar (itself included).
ALLOWED = {
    "protocol": {"protocol"},
    "metadata": {"metadata"},
    "storage": {"storage", "metadata"},
    "client": {"client", "protocol"},
    "broker": {"broker", "storage", "metadata", "protocol"},
    "admin": {"admin", "broker", "storage", "metadata", "protocol", "client"},
    "spark": {"spark", "client", "protocol"},
    "cli": {"cli", "admin", "broker", "storage", "metadata", "protocol", "client", "spark",
            "sync"},
}


def magnetar_imports(path: Path) -> set[str]:
    """The magnetar sub-packages a module imports (first component after ``magnetar``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "magnetar" and len(parts) > 1:
                out.add(parts[1])
    return out


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_flow_downward(layer: str) -> None:
    folder = SRC / layer
    if not folder.exists():
        pytest.skip(f"no {layer} package yet")
    wrong = {
        str(path.relative_to(SRC)): sorted(magnetar_imports(path) - ALLOWED[layer])
        for path in folder.rglob("*.py")
        if magnetar_imports(path) - ALLOWED[layer]
    }
    assert not wrong, f"{layer} imports above or beside itself: {wrong}"


def test_broker_and_storage_do_not_load_the_client() -> None:
    code = (
        "import sys, magnetar.storage, magnetar.broker.service\n"
        "print(sorted(m for m in sys.modules if m.startswith('magnetar.client')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def private_imports(path: Path) -> list[str]:
    """Names starting with ``_`` (not dunders) a module imports from another magnetar module."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 0 and not (node.module or "").startswith("magnetar"):
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                out.append(f"{'.' * node.level}{node.module or ''}.{alias.name}")
    return out


def test_no_module_imports_a_private_name_of_another() -> None:
    """A name starting with ``_`` is its module's own business: what other modules need is
    public (so a refactor of one module cannot silently break another)."""
    wrong = {
        str(path.relative_to(SRC)): private_imports(path)
        for path in SRC.rglob("*.py")
        if private_imports(path)
    }
    assert not wrong, f"private names imported across modules: {wrong}"
