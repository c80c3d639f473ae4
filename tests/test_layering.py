"""Dependencies run one way: core <- plumbing <- shells (agents, ledger, anchors) <- cli.

Every module of the packages below is parsed (not imported) and each of its imports is
checked against the table: those at the top, inside functions and classes, under ``if
TYPE_CHECKING:``, relative ones, and ``importlib.import_module("...")`` with a literal
name. The shells never import one another; they meet through protocols in ``plumbing``
(docs/architecture.md). The core also imports no I/O, the same list as
tests/test_core_purity.py, here statically so that an import inside a function counts.

The packages install under one namespace (``fleet_ledger.fleet``, ``fleet_ledger.agents`` ...,
issue 29): every first-party import names it, and the tables below speak of a module by its
name inside the namespace (``fleet.record.kernel``).

Inside the core, the subpackages keep an order of their own (CORE_ORDER: the root modules,
record, log, env, runtime, grants, jobs, fold, then fleet.audit), and across all the packages no
modules import one another round a circle at module level (TYPE_CHECKING imports included).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_core_purity import FORBIDDEN as CORE_IO

ROOT = Path(__file__).resolve().parent.parent

# Layer -> the first-party packages its modules may import.
ALLOWED: dict[str, frozenset[str]] = {
    "fleet": frozenset({"fleet"}),
    "plumbing": frozenset({"fleet", "plumbing"}),
    "agents": frozenset({"fleet", "plumbing", "agents"}),
    "ledger": frozenset({"fleet", "plumbing", "ledger"}),
    "anchors": frozenset({"fleet", "plumbing", "anchors"}),
    "cli": frozenset({"fleet", "plumbing", "agents", "ledger", "anchors", "cli"}),
}
# Layer -> modules it may not import at all (third-party or standard): the core does no I/O.
FORBIDDEN: dict[str, tuple[str, ...]] = {"fleet": tuple(CORE_IO)}
FIRST_PARTY = frozenset(ALLOWED)
NAMESPACE = "fleet_ledger"


def short(name: str) -> str:
    """``name`` inside the namespace: ``fleet_ledger.fleet.x`` -> ``fleet.x``."""
    return name.removeprefix(NAMESPACE + ".")


def _literal_import(node: ast.Call) -> str | None:
    """The module of ``importlib.import_module("x")`` or ``__import__("x")``, else None."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def imported_names(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``tree``, wherever it stands."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, short(alias.name)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package, up level - 1
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - (node.level - 1)])
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = short(node.module or "")
            found.append((node.lineno, name))
        elif isinstance(node, ast.Call) and (name := _literal_import(node)) is not None:
            found.append((node.lineno, short(name)))
    return sorted(found)


def violations(module: str, source: str, path: str, is_package: bool = False) -> list[str]:
    """One line per import of ``module`` that breaks the rules of its layer."""
    layer = module.split(".")[0]
    allowed, forbidden = ALLOWED[layer], FORBIDDEN.get(layer, ())
    out = []
    for line, name in imported_names(ast.parse(source, path), module, is_package):
        top = name.split(".")[0]
        if top in FIRST_PARTY and top not in allowed:
            out.append(f"{path}:{line}: {module} imports {name}: {layer} may import only "
                       f"{', '.join(sorted(allowed))}")
        elif any(name == f or name.startswith(f + ".") for f in forbidden):
            out.append(f"{path}:{line}: {module} imports {name}: {layer} does no I/O")
    return out


def modules(layer: str) -> list[tuple[str, Path]]:
    """(module name, file) of every module of the package ``layer``."""
    found = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append((".".join(parts), path))
    return found


def test_the_table_lists_every_package():
    """Every top-level package of the project has a row (a new one must choose its layer)."""
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages == set(ALLOWED)


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_imports_only_what_it_may(layer):
    """No module imports a package its layer may not (core <- plumbing <- shells <- cli)."""
    found = modules(layer)
    assert len(found) > 1, f"no modules found for {layer}"
    bad = [v for module, path in found
           for v in violations(module, path.read_text(), str(path.relative_to(ROOT)),
                               path.name == "__init__.py")]
    assert not bad, "imports against the layering rules:\n" + "\n".join(bad)


BAD_SHELL = """\
from typing import TYPE_CHECKING

import msgspec

from fleet_ledger.fleet.log.merkle import leaf_hash
from fleet_ledger.ledger import views
from fleet_ledger.plumbing.files import write_secret
import fleet_ledger.anchors.store

if TYPE_CHECKING:
    from fleet_ledger.agents.host import Host


def serve():
    from fleet_ledger.cli import main
    from . import views
    importlib.import_module("fleet_ledger.agents.outbox")
"""

BAD_CORE = """\
import hashlib


def save(path):
    import sqlite3
    from fleet_ledger.plumbing.sqlite import connect
    from . import merkle
"""


def test_the_checker_flags_a_bad_module():
    """The checker names the module, the line and the import, and only the bad ones."""
    shell = violations("ledger.bad", BAD_SHELL, "ledger/bad.py")
    assert [v.split(": ")[0:2] for v in shell] == [
        ["ledger/bad.py:8", "ledger.bad imports anchors.store"],
        ["ledger/bad.py:11", "ledger.bad imports agents.host"],
        ["ledger/bad.py:15", "ledger.bad imports cli"],
        ["ledger/bad.py:17", "ledger.bad imports agents.outbox"],
    ]
    assert shell[0].endswith("ledger may import only fleet, ledger, plumbing")
    core = violations("fleet.bad", BAD_CORE, "fleet/bad.py")
    assert core == [
        "fleet/bad.py:5: fleet.bad imports sqlite3: fleet does no I/O",
        "fleet/bad.py:6: fleet.bad imports plumbing.sqlite: fleet may import only fleet",
    ]
    assert violations("cli.ok", BAD_SHELL, "cli/ok.py") == []


def test_the_ledger_api_and_replica_do_not_reach_into_the_service():
    """The API and the replica read the ledger through protocols of their own
    (ledger.api.ApiLedger, ledger.replica.Lead): neither imports ledger.service, not even
    for type checking, so there is no circle api <-> service <-> replica."""
    bad = [f"{module} imports {name} (line {line})"
           for module, path in modules("ledger") if module in ("ledger.api", "ledger.replica")
           for line, name in imported_names(ast.parse(path.read_text()), module, False)
           if name == "ledger.service"]
    assert not bad, "\n".join(bad)


def test_the_fold_core_is_a_package_of_the_core():
    """fleet/fold/ (the fold's pure core) is parsed with the core, so its modules are held
    to the core's rules (no shell, no I/O)."""
    names = {module for module, _path in modules("fleet")}
    assert {"fleet.fold", "fleet.fold.batch", "fleet.fold.route", "fleet.fold.policy",
            "fleet.fold.cache", "fleet.fold.reference", "fleet.fold.fast"} <= names


# The core's own order, lowest first: a module may import only its own unit and those before
# it. The root modules (address, errors, text, subjects) are what every unit uses;
# fleet.audit reads the whole record, so it stands last.
CORE_ORDER: tuple[str, ...] = (
    "fleet", "fleet.record", "fleet.log", "fleet.env", "fleet.runtime", "fleet.grants",
    "fleet.jobs", "fleet.fold", "fleet.audit",
)


def core_unit(module: str) -> str:
    """The unit of CORE_ORDER a core module belongs to (its subpackage, or the root)."""
    parts = module.split(".")
    if len(parts) > 1 and (sub := ".".join(parts[:2])) in CORE_ORDER:
        return sub
    return "fleet"


def order_violations(module: str, source: str, path: str, is_package: bool = False) -> list[str]:
    """One line per import of the core module ``module`` of a unit later than its own."""
    rank = CORE_ORDER.index(core_unit(module))
    return [f"{path}:{line}: {module} imports {name}: {core_unit(module)} comes before "
            f"{core_unit(name)}"
            for line, name in imported_names(ast.parse(source, path), module, is_package)
            if name.split(".")[0] == "fleet" and CORE_ORDER.index(core_unit(name)) > rank]


def test_the_core_order_names_every_subpackage():
    """Every subpackage of fleet/ has its place in CORE_ORDER, and the root keeps only the
    modules every unit uses (a new module goes into a subpackage)."""
    subpackages = {f"fleet.{p.parent.name}" for p in (ROOT / "fleet").glob("*/__init__.py")}
    assert subpackages == set(CORE_ORDER) - {"fleet", "fleet.audit"}
    root = {p.stem for p in (ROOT / "fleet").glob("*.py")}
    assert root == {"__init__", "address", "errors", "text", "subjects", "audit"}


def test_the_core_units_import_only_earlier_ones():
    """No core module imports a unit after its own in CORE_ORDER (any import, anywhere)."""
    bad = [v for module, path in modules("fleet")
           for v in order_violations(module, path.read_text(), str(path.relative_to(ROOT)),
                                     path.name == "__init__.py")]
    assert not bad, "imports against the core's order:\n" + "\n".join(bad)


def test_the_order_checker_flags_an_upward_import():
    """The order checker names an import of a later unit, even one inside a function."""
    source = ("from fleet_ledger.fleet.address import id_text\n\n\ndef f():\n"
              "    from fleet_ledger.fleet.fold import Refused\n")
    assert order_violations("fleet.record.bad", source, "fleet/record/bad.py") == [
        "fleet/record/bad.py:5: fleet.record.bad imports fleet.fold: fleet.record comes "
        "before fleet.fold"]
    assert order_violations("fleet.fold.ok", source, "fleet/fold/ok.py") == []


def module_level_imports(source: str, module: str, is_package: bool,
                         known: frozenset[str]) -> set[str]:
    """The first-party modules ``module`` imports when it is itself imported: statements at
    module level and in class bodies, under ``if``/``try``/``with`` (``if TYPE_CHECKING:``
    included, so the annotations could be evaluated). Imports inside functions are left
    out: they run later, when every module is loaded. ``from p import x`` counts ``p.x``
    when that is a module, else ``p``."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if isinstance(node, ast.Import):
                found.update(short(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - (node.level - 1)])
                    name = f"{base}.{node.module}" if node.module else base
                else:
                    name = short(node.module or "")
                subs = {f"{name}.{a.name}" for a in node.names} & known
                found.update(subs)
                if len(subs) < len(node.names):
                    found.add(name)
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(node, field, None)
                if isinstance(block, list):
                    visit([s for s in block if isinstance(s, ast.stmt | ast.excepthandler)])

    visit(ast.parse(source).body)
    return (found & known) - {module}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import one another round a circle (Tarjan's strongly
    connected components of more than one module), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                on_stack.discard(w)
                component.append(w)
            on_stack.discard(v)
            if component:
                circles.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(circles)


def first_party_graph() -> dict[str, set[str]]:
    """Module -> the first-party modules it imports at module level, for every package."""
    files = {module: path for layer in ALLOWED for module, path in modules(layer)}
    known = frozenset(files)
    return {module: module_level_imports(path.read_text(), module, path.name == "__init__.py",
                                         known)
            for module, path in files.items()}


def test_no_module_level_import_circle():
    """No first-party modules import one another round a circle at module level (under
    ``if TYPE_CHECKING:`` too); imports inside functions are not counted."""
    graph = first_party_graph()
    assert len(graph) > 150 and graph["fleet.fold.control"] >= {"fleet.fold"}
    assert import_circles(graph) == []


def test_the_circle_checker_finds_a_type_checking_circle():
    """A circle closed only by a TYPE_CHECKING import is found; one through a function is not."""
    known = frozenset({"p", "p.a", "p.b", "p.c"})
    a = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from p.b import B\n"
    b = "from p import a\n\n\ndef f():\n    import p.c\n"
    c = "class C:\n    from p.b import B\n"
    graph = {"p.a": module_level_imports(a, "p.a", False, known),
             "p.b": module_level_imports(b, "p.b", False, known),
             "p.c": module_level_imports(c, "p.c", False, known)}
    assert graph == {"p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": {"p.b"}}
    assert import_circles(graph) == [["p.a", "p.b"]]


def bare_imports(source: str, path: str) -> list[str]:
    """One line per import of a first-party package outside the namespace (``import
    agents``): installed, that would be some other distribution's top-level module."""
    bad = []
    for node in ast.walk(ast.parse(source, path)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and (literal := _literal_import(node)) is not None:
            names = [literal]
        bad += [f"{path}:{node.lineno}: imports {name}" for name in names
                if name.split(".")[0] in FIRST_PARTY]
    return bad


def test_every_first_party_import_names_the_namespace():
    """No module of the packages, the tests or the examples imports ``fleet``, ``agents`` ...
    at the top level: each goes through ``fleet_ledger.`` (the only name the wheel installs)."""
    files = [path for layer in ALLOWED for _module, path in modules(layer)]
    files += sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "examples").rglob("*.py"))
    bad = [v for path in files if path.name != "test_layering.py"
           for v in bare_imports(path.read_text(), str(path.relative_to(ROOT)))]
    assert len(files) > 300 and not bad, "\n".join(bad)


def test_the_namespace_checker_flags_a_bare_import():
    """``import agents``, ``from ledger.x import y`` and a literal import_module("cli") are
    flagged; the namespaced forms, relative imports and third-party names are not."""
    source = ("import agents\nfrom ledger.store import S\nimportlib.import_module('cli')\n"
              "import fleet_ledger.agents\nfrom fleet_ledger.ledger import store\n"
              "from . import fleet\nimport nats\n")
    assert bare_imports(source, "x.py") == ["x.py:1: imports agents",
                                            "x.py:2: imports ledger.store",
                                            "x.py:3: imports cli"]
