"""Rooms inside a layer (docs/architecture.md): a package's sub-packages or module groups
in a documented order, top to bottom, and imports that only go down that order.

The order is read from the ``rooms <package>`` blocks of docs/architecture.md, so the map
cannot drift from the code: a module that no room claims, an import against the order, or an
import circle fails here. tests/test_layers.py does the same between layers.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "magnetar"
DOC = ROOT / "docs" / "architecture.md"

#: Imports made only for type hints (under ``if TYPE_CHECKING``) that may point up: the
#: type of the object that built a part and hands itself down (Pulsar's topics hold their
#: ``BrokerService`` the same way). Nothing is loaded at run time, and the owner is at the
#: top of its package, so such an arrow cannot make a circle of imports, only of type
#: names. Any other upward arrow, type-only or not, fails.
BACK_REFERENCES: dict[str, set[str]] = {
    "broker": {"service"},  # BrokerService: the wiring every room is handed
    "client": {"client", "consumer"},  # Client; the Consumer a TopicConsumer feeds
    "storage": {"factory", "ledger"},  # the factory a ledger lives in; a cursor's ledger
    "admin": set(),
}


@dataclass(frozen=True)
class Import:
    source: str  # module path relative to the package, e.g. "topics/topic.py"
    target: str
    kind: str  # "runtime" (module level), "lazy" (inside a function), "typing"
    line: int


def rooms(package: str) -> list[tuple[str, list[str]]]:
    """The rooms of ``package`` top to bottom: (name, paths) from its ``rooms`` block."""
    text = DOC.read_text()
    match = re.search(rf"```rooms {package}\n(.*?)```", text, re.S)
    assert match, f"docs/architecture.md has no ```rooms {package} block"
    out = []
    for line in match.group(1).splitlines():
        if line.strip():
            name, *paths = line.split()
            out.append((name, paths))
    return out


def modules(package: str) -> list[str]:
    base = SRC / package
    return sorted(p.relative_to(base).as_posix() for p in base.rglob("*.py"))


def room_rank(package: str) -> dict[str, int]:
    """Module path -> rank of its room (0 is the top; the package's own ``__init__.py``
    is above every room). A path ending in ``/`` claims a folder."""
    order = rooms(package)
    ranks: dict[str, int] = {"__init__.py": -1}
    for module in modules(package):
        for rank, (_, paths) in enumerate(order):
            if any(module == p or (p.endswith("/") and module.startswith(p)) for p in paths):
                ranks.setdefault(module, rank)
    return ranks


def _module_file(package: str, dotted: str) -> str | None:
    """``magnetar.<package>.a.b`` as a path relative to the package, if it is a module."""
    parts = dotted.split(".")
    if parts[:2] != ["magnetar", package]:
        return None
    rel = "/".join(parts[2:])
    base = SRC / package
    if not rel:
        return "__init__.py"
    if (base / f"{rel}.py").is_file():
        return f"{rel}.py"
    if (base / rel / "__init__.py").is_file():
        return f"{rel}/__init__.py"
    return None


def imports(package: str, module: str, source: str | None = None) -> list[Import]:
    """The imports of one module (``source``: its text, else read) that land inside its
    own package."""
    path = SRC / package / module
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    # the package a relative import starts from (for `a/b.py` and `a/__init__.py`: `a`)
    here = ["magnetar", package, *module.removesuffix(".py").split("/")][:-1]
    kinds: dict[int, str] = {}

    def mark(node: ast.AST, kind: str) -> None:
        for child in ast.walk(node):
            kinds.setdefault(id(child), kind)

    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            mark(node, "typing")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mark(node, "lazy")
    out = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                dotted = ".".join(base + ([node.module] if node.module else []))
            else:
                dotted = node.module or ""
            for alias in node.names:  # `from pkg import module` imports that module
                sub = _module_file(package, f"{dotted}.{alias.name}")
                targets.append(f"{dotted}.{alias.name}" if sub else dotted)
        for dotted in targets:
            while dotted and _module_file(package, dotted) is None:
                dotted = dotted.rpartition(".")[0]
            target = _module_file(package, dotted) if dotted else None
            if target is not None and target != module:
                out.append(Import(module, target, kinds.get(id(node), "runtime"), node.lineno))
    return out


PACKAGES = sorted(BACK_REFERENCES)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_has_a_room(package: str) -> None:
    ranks = room_rank(package)
    assert sorted(m for m in modules(package) if m not in ranks) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_only_go_down(package: str) -> None:
    ranks = room_rank(package)
    names = [name for name, _ in rooms(package)]
    owners = {m for m in ranks if m.removesuffix(".py").split("/")[0] in BACK_REFERENCES[package]}
    wrong = []
    for module in ranks:
        for imp in imports(package, module):
            up = ranks[imp.target] < ranks[module]
            if not up or (imp.kind == "typing" and imp.target in owners):
                continue
            room = "(package)" if ranks[imp.target] < 0 else names[ranks[imp.target]]
            wrong.append(f"{package}/{module}:{imp.line} imports {imp.target} ({imp.kind}), "
                         f"room {names[ranks[module]]} -> {room}")
    assert wrong == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package: str) -> None:
    """No circle of imports made at run time (module level or in a function), inside a
    room either; type-only imports inside a room may name each other."""
    graph = {m: {i.target for i in imports(package, m) if i.kind != "typing"}
             for m in room_rank(package)}
    done: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            circles.append([*path[path.index(node):], node])
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        done.add(node)

    for module in sorted(graph):
        visit(module, [])
    assert circles == []


def test_the_checker_tells_the_kinds_of_import_apart() -> None:
    """Module level, inside a function, for type hints only; absolute and relative."""
    code = (
        "from typing import TYPE_CHECKING\n"
        "from magnetar.broker.topics import topic\n"
        "from ..entries import split_entry\n"
        "if TYPE_CHECKING:\n"
        "    from magnetar.broker.service import BrokerService\n"
        "def f():\n"
        "    from magnetar.broker.connection.server_cnx import ServerCnx\n"
    )
    found = {(i.target, i.kind) for i in imports("broker", "subscriptions/probe.py", code)}
    assert found == {
        ("topics/topic.py", "runtime"),
        ("entries.py", "runtime"),
        ("service.py", "typing"),
        ("connection/server_cnx.py", "lazy"),
    }


#: About 600 lines: past this a module is usually two jobs (docs/architecture.md).
MAX_LINES = 650


def test_no_module_is_two_jobs_without_saying_why() -> None:
    """A module over ``MAX_LINES`` lines says in its docstring why it is one piece."""
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name.endswith("_pb2.py"):
            continue
        text = path.read_text()
        if text.count("\n") > MAX_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "one piece" not in doc:
                wrong.append(f"{path.relative_to(SRC)}: {text.count(chr(10))} lines")
    assert wrong == []


#: The layers top to bottom (tests/test_layers.py has the rule; this is the order).
LAYERS = ["cli", "spark", "admin", "broker", "client", "storage", "metadata", "protocol"]


def rank(path: str) -> tuple[int, int]:
    """(layer, room) of a module path under src/magnetar: smaller is higher."""
    layer, _, rest = path.partition("/")
    room = 0
    if layer in BACK_REFERENCES:
        room = room_rank(layer)[rest]
    return LAYERS.index(layer), room


def message_path() -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """The nodes (id -> module path) and arrows (from, kind, to) of the doc's picture."""
    text = DOC.read_text()
    match = re.search(r"## The path of a message.*?```mermaid\n(.*?)```", text, re.S)
    assert match, "docs/architecture.md has no message-path picture"
    block = match.group(1)
    nodes = dict(re.findall(r'^\s*(\w+)\["([\w/]+\.py): ', block, re.M))
    arrows = re.findall(r"^\s*(\w+)\s*(-->|-\.->)\s*(\w+)\s*$", block, re.M)
    return nodes, arrows


def test_the_message_path_names_real_modules() -> None:
    nodes, arrows = message_path()
    assert len(nodes) >= 10 and len(arrows) >= len(nodes) - 1
    assert sorted(p for p in nodes.values() if not (SRC / p).is_file()) == []
    ends = {a for a, _, _ in arrows} | {b for _, _, b in arrows}
    assert sorted(ends - set(nodes)) == []


def test_the_message_path_follows_the_order() -> None:
    """A solid arrow (a call) never points up the order; a dotted one (a callback, or a
    call through a Protocol the lower room declares) always does."""
    nodes, arrows = message_path()
    wrong = []
    for a, kind, b in arrows:
        up = rank(nodes[b]) < rank(nodes[a])
        if up != (kind == "-.->"):
            wrong.append(f"{a} {kind} {b}: {nodes[a]} -> {nodes[b]}")
    assert wrong == []
