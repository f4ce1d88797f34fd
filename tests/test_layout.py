"""The package's layout as docs/layout.md states it: every module listed once, in an order where each
module imports only modules listed before it (so there is no import cycle), each subpackage's modules
listed together and its `__init__.py` empty, and the compile path stays free of heavy imports."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ltowrap"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """Every ltowrap module `name` imports, at the top, inside functions or for type checkers."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in MODULES else target)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ltowrap"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ltowrap"))
    found.discard(name)
    return found


def readme_order(text: str) -> list[str]:
    """The modules docs/layout.md lists, in its order (`remote/client.py` -> ltowrap.remote.client)."""
    section = text.split("\nTests:", 1)[0]
    names = re.findall(r"^- `([a-z_/]+)\.py`", section, re.M)
    return ["ltowrap." + n.replace("/", ".").removesuffix(".__init__") if n != "__init__" else "ltowrap" for n in names]


def graph_violations(order: list[str], imports: dict[str, set[str]]) -> list[str]:
    position = {name: i for i, name in enumerate(order)}
    return [f"{name} imports {target}, listed after it" for name in order for target in sorted(imports[name])
            if position.get(target, len(order)) >= position[name]]


def test_readme_lists_every_module_once():
    order = readme_order((ROOT / "docs" / "layout.md").read_text())
    assert sorted(order) == sorted(MODULES), "docs/layout.md and the package differ"
    assert len(order) == len(set(order))


def test_modules_import_only_modules_listed_before_them():
    order = readme_order((ROOT / "docs" / "layout.md").read_text())
    assert graph_violations(order, {name: imports_of(name) for name in MODULES}) == []


def test_each_subpackage_is_listed_in_one_piece():
    """A subpackage is a layer: its modules are listed together, so it uses only what is above it."""
    order = readme_order((ROOT / "docs" / "layout.md").read_text())
    packages = [name.split(".")[1] if name.count(".") > 1 or MODULES[name].name == "__init__.py" else ""
                for name in order if name != "ltowrap"]
    runs = [p for i, p in enumerate(packages) if p and (i == 0 or packages[i - 1] != p)]
    assert len(runs) == len(set(runs)), f"a subpackage's modules are listed apart: {runs}"


# What a reader of local backend compiles reads (docs/layout.md, jobs/): the remote side's state
# is jobs/remoteside.py's alone.
LOCAL_SIDE = ["ltowrap.jobs.prepare", "ltowrap.jobs.local", "ltowrap.jobs.store"]


def test_the_local_side_imports_nothing_of_the_remote_side():
    """Not remoteside.py, and of remote/ at most, for type checkers, the session that
    prepare.Resources carries (the run's settings, no job's state)."""
    allowed = {"ltowrap.jobs.prepare": {"ltowrap.remote.session"}}
    found = {name: sorted(t for t in imports_of(name) - allowed.get(name, set())
                          if t.startswith("ltowrap.remote") or t == "ltowrap.jobs.remoteside") for name in LOCAL_SIDE}
    assert found == {name: [] for name in LOCAL_SIDE}


def test_the_executor_is_its_loop():
    """jobs/executor.py is the loop between the sides: what it gains beyond 400 lines belongs
    in prepare.py, local.py, store.py or remoteside.py."""
    assert len(MODULES["ltowrap.jobs.executor"].read_text().splitlines()) < 400


def test_subpackages_import_nothing_on_their_own():
    """A subpackage's __init__.py is empty, so a restored link that passes through one (its
    import budget is tests/test_linkmemo.py's) pays nothing for the layout. remote/ is the
    exception: its __init__ is the door to the optional REAPI client, which a local link never opens."""
    inits = [p for p in PACKAGE.glob("*/__init__.py") if p.parent.name != "remote"]
    assert inits, "no subpackage found"
    assert [str(p.relative_to(ROOT)) for p in inits if p.read_text()] == []


# What starts a process, outside proc.py: the subprocess module, and os's own ways.
PROCESS_STARTS = re.compile(r"\b(import subprocess|from subprocess|subprocess\.|os\.(system|popen|spawn\w*|posix_spawn\w*"
                            r"|exec[lv]\w*|fork\w*)\b)")


def test_only_proc_starts_processes():
    """Every process ltowrap starts goes through proc.py (the recursion guard, the environment)."""
    found = [f"{name}:{n}: {line.strip()}" for name, path in sorted(MODULES.items()) if name != "ltowrap.proc"
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if PROCESS_STARTS.search(line.split("#", 1)[0])]
    assert found == []


def test_the_check_finds_a_cycle():
    """The check itself: a back edge (a cycle) is reported."""
    imports = {"ltowrap.a": {"ltowrap.b"}, "ltowrap.b": {"ltowrap.a"}}
    assert graph_violations(["ltowrap.a", "ltowrap.b"], imports) == ["ltowrap.a imports ltowrap.b, listed after it"]


@pytest.mark.parametrize("entry", ["ltowrap.entry", "ltowrap.config", "ltowrap.optrecords", "ltowrap.proc"])
def test_the_compile_path_imports_nothing_heavy(entry):
    """Each of these costs 5-20 ms to import: too much for a module every compile may load."""
    heavy = ["subprocess", "dataclasses", "typing", "enum", "json", "xxhash", "tomllib", "re"]
    code = f"import sys, {entry}; print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.split() == []


def test_a_distributed_link_loads_no_openssl():
    """The link's BLAKE2b digests (optrecords.record_key, locks.Claims.offset) come from _blake2,
    whose type hashlib.blake2b is: importing hashlib would load OpenSSL's _hashlib, which ltowrap
    does not use."""
    entry = "ltowrap.pipeline, ltowrap.stages.finallink, ltowrap.jobs.executor, ltowrap.optrecords, ltowrap.locks"
    code = f"import sys, {entry}; print(' '.join(m for m in ['hashlib', '_hashlib'] if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.split() == []
    from ltowrap import locks, optrecords

    assert optrecords.blake2b is locks.blake2b is hashlib.blake2b


# Classes of the link path that hold a run's state: compared by identity, never printed, so
# dataclass generates neither __eq__ nor __repr__ for them (each is code compiled at import).
STATEFUL = ["ltowrap.log.CpuLedger", "ltowrap.linkline.cmdline._Reader", "ltowrap.linkmemo.Memo",
            "ltowrap.jobs.prepare.Resources", "ltowrap.jobs.prepare.JobState", "ltowrap.jobs.prepare.Preparer",
            "ltowrap.jobs.jobrun.JobRun", "ltowrap.progress.Progress", "ltowrap.linkline.ldscript._Link",
            "ltowrap.linkline.ldscript._Buffer", "ltowrap.formats.shardkey._Modules", "ltowrap.formats.interface._Global",
            "ltowrap.jobs.jobserver.Jobserver", "ltowrap.jobs.store.Store", "ltowrap.jobs.local.Running",
            "ltowrap.jobs.local.LocalSide", "ltowrap.locks.LockDir", "ltowrap.locks.Claims", "ltowrap.jobs.slots.Local",
            "ltowrap.jobs.slots.JobserverGate", "ltowrap.jobs.slots.PoolGate", "ltowrap.formats.bitcode._Budget",
            "ltowrap.formats.irmodule._Constants"]


@pytest.mark.parametrize("name", STATEFUL)
def test_stateful_classes_of_the_link_compare_by_identity(name):
    module, _, qualname = name.rpartition(".")
    cls = getattr(importlib.import_module(module), qualname)
    assert dataclasses.is_dataclass(cls)
    assert (cls.__eq__, cls.__repr__, cls.__hash__) == (object.__eq__, object.__repr__, object.__hash__)


# Dataclasses that still have no docstring (their modules' owners add them).
UNDOCUMENTED = {"ltowrap.jobs.executor.Outcome", "ltowrap.jobs.executor.Executor", "ltowrap.jobs.remoteside.RemoteSide",
                "ltowrap.remote.action.BackendAction", "ltowrap.remote.client.Endpoint", "ltowrap.remote.session.Work",
                "ltowrap.remote.session.Served", "ltowrap.remote.session.Reply", "ltowrap.remote.session.Session"}


def test_every_dataclass_has_a_docstring():
    """Without one, dataclass writes it from inspect.signature(cls), at import."""
    found = {f"{name}.{node.name}" for name, path in MODULES.items() for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.ClassDef) and ast.get_docstring(node) is None
             and any("dataclass" in ast.unparse(d) for d in node.decorator_list)}
    assert found == UNDOCUMENTED


def test_no_test_module_imports_another():
    """What tests share lives in tests/helpers.py and integration's helper modules, not in a
    test module another one imports (at its top or inside a test)."""
    found = []
    for path in [*(ROOT / "tests").glob("*.py"), *(ROOT / "integration").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                      if n.split(".")[-1].startswith("test_")]
    assert found == []


def test_bench_results_hold_the_cited_summaries_only():
    """bench/results/ keeps the summaries the docs cite, each listed in its index; raw dumps
    go to bench/out/, which git ignores."""
    results = ROOT / "bench" / "results"
    files = sorted(p.name for p in results.iterdir() if p.name != "README.md")
    index = (results / "README.md").read_text()
    assert [f for f in files if not f.endswith(".md")] == []
    assert [f for f in files if f"`{f}`" not in index] == []
    assert "bench/results/README.md" in (ROOT / "docs" / "figures.md").read_text()
