"""The engine's boundaries (docs/design/overview.md#packages-and-imports,
docs/design/protocols.md#optional-members, docs/design/overview.md#names): ``harness`` reaches
methods and datasets only through the registry and names no concrete method in its logic; a
retriever's registered name is its entry point name; the optional members are named protocols;
method packages add verbs through an entry point group."""

from __future__ import annotations

import ast
import dataclasses
import re
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import typer

from harness import registry
from harness.protocols import OPTIONAL_PROTOCOLS, PROTOCOL_MEMBERS, Retriever

HARNESS = Path(__file__).resolve().parents[1] / "harness"
MODULES = sorted(p for p in HARNESS.rglob("*.py"))
COMPOSITION_ROOT = HARNESS / "cli"  # the package: its modules may import reports
METHOD_PACKAGES = {"retrievers", "benchmarks", "reports"}
# A concrete retriever named as a word: ``bm25`` but not the ``bm25s`` package, ``coder-seq``, ``nnn-tr``.
CONCRETE = re.compile(r"(?<![\w-])(bm25|dense|hyde|deo(-rules)?|coder(-seq|-union)?|nnn(-fix|-tr)?|l[12]-fix|mmr)"
                      r"(?![\w-])", re.I)
# (module, text the literal contains): why it may name a retriever.
ALLOWED = {
    ("console.py", "e.g. dense.model=all-MiniLM-L6-v2"): "an example in the --param error message, like a help text",
    ("cmd_data.py", "run it with: beyondsim run bm25 -b"): "data check shows a command line to copy; bm25 ships with "
                                                      "every install",
}


def _imported_packages(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _prose(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings or help texts (``help=`` keywords)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.keyword) and node.arg == "help":
            skip |= {id(n) for n in ast.walk(node.value) if isinstance(n, ast.Constant)}
    return skip


def _logic_strings(path: Path) -> list[str]:
    """Every string literal of ``path`` that is neither a docstring nor a help text (the constant
    parts of an f-string joined, so a message reads as one)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = _prose(tree)
    inside_fstring = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and id(node) not in prose:
            out.append("{}".join(v.value if isinstance(v, ast.Constant) else "" for v in node.values))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
              and id(node) not in inside_fstring):
            out.append(node.value)
    return out


@pytest.mark.parametrize("path", [m for m in MODULES if COMPOSITION_ROOT not in m.parents], ids=lambda p: p.name)
def test_the_engine_imports_no_method_package(path: Path) -> None:
    imported = _imported_packages(ast.parse(path.read_text(encoding="utf-8")))
    assert not imported & METHOD_PACKAGES, f"{path.relative_to(HARNESS.parent)} imports {imported & METHOD_PACKAGES}"


@pytest.mark.parametrize("path", sorted(COMPOSITION_ROOT.glob("*.py")), ids=lambda p: p.name)
def test_the_composition_root_imports_only_reports(path: Path) -> None:
    assert _imported_packages(ast.parse(path.read_text(encoding="utf-8"))) & METHOD_PACKAGES <= {"reports"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_the_engine_names_no_concrete_retriever_in_its_logic(path: Path) -> None:
    named = [s for s in _logic_strings(path) if CONCRETE.search(s)
             and not any(path.name == module and text in s for module, text in ALLOWED)]
    assert not named, f"{path.relative_to(HARNESS.parent)} names a retriever in: {named}"


def test_the_concrete_name_pattern_sees_what_it_should() -> None:
    assert all(CONCRETE.search(s) for s in ("run bm25 -b", "coder-seq", "-p nnn-tr.x=1", "Dense", "mmr"))
    assert not any(CONCRETE.search(s) for s in ("bm25s", "encoder", "denser", "deos", "nnn_tr", "summary"))


def _our_retriever_entry_points() -> list:
    return sorted((ep for ep in entry_points(group=registry.RETRIEVER_GROUP)
                   if ep.dist is not None and ep.dist.name == "beyondsim"), key=lambda ep: ep.name)


def test_every_retriever_entry_point_loads_the_class_registered_under_its_name() -> None:
    eps = _our_retriever_entry_points()
    assert eps
    for ep in eps:
        cls = ep.load()
        info = registry.retriever_info(cls)
        assert vars(cls).get("retriever_name") == info.name == ep.name, (ep.name, ep.value)
        assert registry.get_retriever_class(ep.name) is cls
    # and nothing of ours registers a name without an entry point
    ours = {n for n, c in registry._retrievers.items() if c.__module__.startswith("retrievers.")}
    assert ours == {ep.name for ep in eps}


def test_every_retriever_declares_its_metadata() -> None:
    for ep in _our_retriever_entry_points():
        cls = ep.load()
        info = registry.retriever_info(cls)
        assert info.description and info.family and info.paper, ep.name
        assert "\n" not in info.description, ep.name
        assert bool(info.trainer) == bool(info.artifact_param), ep.name
        if info.artifact_param:
            assert info.artifact_param in {f.name for f in dataclasses.fields(cls.Params)}, ep.name


@dataclasses.dataclass(frozen=True)
class FlagParams:
    flag: bool = False


def test_metadata_is_declared_once_with_register(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_retrievers", dict(registry._retrievers))

    @registry.register("declared-llm-test", params=FlagParams, family="toy", uses_llm=lambda p: p.flag)
    class Declared:
        """A retriever that calls an LLM with some settings.

        More text that is not the description."""

    info = registry.retriever_info(Declared)
    assert (info.name, info.family) == ("declared-llm-test", "toy")
    assert info.description == "A retriever that calls an LLM with some settings."
    assert info.calls_llm(FlagParams(flag=True)) and not info.calls_llm(FlagParams())
    assert registry.get_retriever_class("declared-llm-test") is Declared

    class Subclass(Declared):  # not registered itself: nothing of its base's registration
        uses_llm = True

    sub = registry.retriever_info(Subclass)
    assert sub.name.endswith(".Subclass") and sub.family == "" and sub.calls_llm(FlagParams())


def test_llm_use_of_our_retrievers() -> None:
    uses = {ep.name: registry.retriever_info(ep.load()).calls_llm(ep.load().Params())
            for ep in _our_retriever_entry_points()}
    assert {n for n, used in uses.items() if used} == {"hyde", "deo", "nsir"}
    deo_rules = registry.get_retriever_class("deo-rules")
    assert registry.retriever_info(deo_rules).calls_llm(deo_rules.Params(decomposer="llm"))


def test_the_optional_members_are_named_protocols() -> None:
    assert PROTOCOL_MEMBERS == (
        ("index", ("corpus", "ctx"), True),
        ("search", ("queries", "k", "ctx"), True),
        ("fit", ("benchmark", "ctx"), False),
        ("prepare", ("ctx",), False),
        ("training_data", ("ctx",), False),
        ("result_extra", (), False),
        ("analyse", ("benchmark", "ctx"), False),
        ("score", ("queries", "doc_ids", "ctx"), False),
    )
    for protocol in (Retriever, *OPTIONAL_PROTOCOLS):
        assert protocol.__doc__ and "runner" in protocol.__doc__, protocol.__name__

    class Partial:
        def index(self, corpus, ctx): ...

        def search(self, queries, k, ctx): ...

        def prepare(self, ctx): ...

    assert [p.__name__ for p in OPTIONAL_PROTOCOLS if isinstance(Partial(), p)] == ["Preparable"]


def test_method_packages_add_verbs_through_an_entry_point_group() -> None:
    from typer.testing import CliRunner

    from harness.cli import app

    rows = registry.command_apps()
    assert {verb for verb, _, _ in rows} >= {"deo", "coder"}
    assert all(isinstance(commands, typer.Typer) and not error for _, commands, error in rows)
    for verb in ("deo", "coder"):
        res = CliRunner().invoke(app, [verb, "--help"])
        assert res.exit_code == 0, res.output


def test_a_verb_that_fails_to_load_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import harness.cli as cli

    monkeypatch.setattr(cli, "command_apps", lambda: [("nope", None, "command 'nope': entry point 'x:y' failed "
                                                                         "to load: boom")])
    res = CliRunner().invoke(cli.app, ["nope"])
    assert res.exit_code == 2 and "failed to load: boom" in res.output
    res = CliRunner().invoke(cli.app, ["--help"])
    assert res.exit_code == 0 and "nope" in res.output


def test_a_package_verb_may_import_the_shared_options_before_the_app() -> None:
    """The verbs of installed packages are added when the command line is built, so importing one
    (it imports harness.cli.options, and so the package) before the app mounts it whole."""
    import subprocess
    import sys

    script = ("import retrievers.commands\n"
              "from typer.testing import CliRunner\n"
              "from harness.cli import app\n"
              "res = CliRunner().invoke(app, ['deo', 'agreement', '--help'])\n"
              "assert res.exit_code == 0 and '--benchmark' in res.output, res.output\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_modules_of_the_command_line_import_each_other_without_a_cycle() -> None:
    """Every import between the modules of harness/cli, lazy ones included, goes one way."""
    package = HARNESS / "cli"
    names = {p.stem for p in package.glob("*.py")}
    edges: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        targets = edges.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    targets.add(node.module.split(".")[0])
                else:
                    targets |= {a.name for a in node.names}
    edges = {m: {t for t in ts if t in names and t != m} for m, ts in edges.items()}
    _assert_acyclic(edges)
    assert "__init__" not in set().union(*edges.values())  # no verb module reaches back to the app


def _assert_acyclic(edges: dict[str, set[str]]) -> None:
    """Fail naming the first import cycle of the graph ``edges`` (module → the modules it imports)."""
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module in done:
            return
        for target in sorted(edges[module]):
            visit(target, (*path, module))
        done.add(module)

    for module in sorted(edges):
        visit(module, ())


# -- the layers of harness (ARCHITECTURE.md#the-layers) ----------------------------------------------

LAYERS = ("core", "data", "measures", "models", "store", "cost", "run", "record", "cli")
"""The engine's sub-packages, bottom first: a module may import its own layer and the layers before it."""
ALIASES = {"types": "core", "registry": "core", "protocols": "core"}
"""Top-level modules of ``harness`` that are public names of a module in a layer (plug-ins import them)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(HARNESS.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, name: str | None = None) -> set[str]:
    """The ``harness`` modules ``path`` imports at run time (lazy imports inside functions included,
    ``if TYPE_CHECKING:`` blocks left out: a name used only in annotations is no import), resolved to
    absolute dotted names (``from . import x`` gives the submodule ``x`` when there is one)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    name = name or _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "harness"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "harness":
                continue
            subs = {f"{module}.{a.name}" for a in node.names
                    if (HARNESS.parent / f"{module}.{a.name}".replace(".", "/")).with_suffix(".py").exists()
                    or (HARNESS.parent / f"{module}.{a.name}".replace(".", "/") / "__init__.py").exists()}
            out |= subs or {module}
            if len(subs) < len(node.names):
                out.add(module)
    return out - {name}


def _layer(module: str) -> str | None:
    """The layer of a dotted ``harness`` module name; ``None`` for the package itself (its version)."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    return ALIASES.get(parts[1], parts[1])


def test_harness_is_layers_and_its_top_level_holds_few_modules() -> None:
    top = sorted(p.name for p in HARNESS.glob("*.py"))
    assert top == ["__init__.py", *sorted(f"{a}.py" for a in ALIASES)], top
    assert len(top) <= 8
    packages = sorted(p.name for p in HARNESS.iterdir() if (p / "__init__.py").exists())
    assert set(packages) == set(LAYERS), packages


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_a_public_top_level_name_is_its_module(name: str) -> None:
    import importlib

    public = importlib.import_module(f"harness.{name}")
    assert public is importlib.import_module(f"harness.{ALIASES[name]}.{name}")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(HARNESS)))
def test_a_module_imports_only_its_own_layer_and_those_below(path: Path) -> None:
    own = _layer(_module_name(path))
    if own is None or path.parent == HARNESS:
        assert not any(_layer(m) for m in _runtime_imports(path) if m != "harness") or path.stem in ALIASES
        return
    above = sorted(m for m in _runtime_imports(path)
                   if _layer(m) is not None and LAYERS.index(_layer(m)) > LAYERS.index(own))
    assert not above, f"{path.relative_to(HARNESS.parent)} (layer {own}) imports from above: {above}"


def test_the_layering_check_sees_an_import_from_above(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from ..run.runner import Runner\nfrom . import readers\n"
                     "if TYPE_CHECKING:\n    from ..store.results import Store\n", encoding="utf-8")
    imported = _runtime_imports(probe, "harness.data.probe")
    assert imported == {"harness.run.runner", "harness.data.readers"}
    imported.discard("harness.data.readers")
    assert imported == {"harness.run.runner"}
    assert LAYERS.index(_layer("harness.run.runner")) > LAYERS.index("data")


def test_no_import_cycle_between_the_modules_of_harness() -> None:
    """Run-time imports between harness's modules (lazy ones included) form no cycle; a package's
    ``__init__`` counts as a module of its own."""
    names = {_module_name(p): p for p in MODULES}
    _assert_acyclic({n: {m for m in _runtime_imports(p) if m in names and m != n} for n, p in names.items()})


def test_the_cycle_check_finds_a_cycle() -> None:
    _assert_acyclic({"a": {"b"}, "b": {"c"}, "c": set()})
    with pytest.raises(AssertionError, match="import cycle: a -> b -> c -> a"):
        _assert_acyclic({"a": {"b"}, "b": {"c"}, "c": {"a"}})
