"""The differential harness: a cache hit must be byte for byte what an empty cache would produce.

Each case is a small bash script in tests/soundness/ (NN-short-name.sh) that defines `setup`,
`build` and `change` (and optionally OUTPUTS, MODES, LLVM, NEEDS; tests/soundness/common.sh
holds the defaults and helpers). For each case and cache mode:

1. a fresh directory: `setup`, then `build` with the warm cache W: the outputs "before";
2. `change` (one input the outputs depend on); the tree is copied as it now stands;
3. `build` again with W: the outputs "warm";
4. the tree put back as it stood after `change`, at the same path (paths end up in
   outputs), and `build` with a brand-new empty cache C: the outputs "cold".

warm must equal cold. The case must also be meaningful: cold differs from before (else
the change changes nothing and the case tests nothing), ltowrap really distributed the
first build's link (a link it passed through tests nothing of its caches), and a second
cold build in another empty cache equals the first (else a difference would be noise;
checked once per case, in the first mode it runs in).
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import BIN, clean_env, toolchain, wrapper
from needs import missing

CASES_DIR = Path(__file__).resolve().parent / "soundness"
COMMON = CASES_DIR / "common.sh"
# The cache modes. memo: the direct lane and the link memo first (ltowrap's default);
# nomemo: no memo, so the driver-line, thin-link and backend caches answer alone.
MODE_ENV: dict[str, dict[str, str]] = {"memo": {}, "nomemo": {"LTOWRAP_MEMO": "0"}}
SLOW_MODES = frozenset(["nomemo"])  # the quick loop runs the default mode; the whole suite both
# What the clang driver reads from the environment: the caller's values must not reach a case.
DRIVER_ENV = ("COMPILER_PATH", "LIBRARY_PATH", "GCC_EXEC_PREFIX", "CCC_OVERRIDE_OPTIONS", "CLANG_NO_DEFAULT_CONFIG",
              "CLANG_CONFIG_FILE_SYSTEM_DIR", "CLANG_CONFIG_FILE_USER_DIR", "SDKROOT", "CPATH", "C_INCLUDE_PATH",
              "SOURCE_DATE_EPOCH")
LOG_TAIL = 6  # LTOWRAP_LOG records shown on a failure


@dataclass(frozen=True)
class Case:
    script: Path
    outputs: tuple[str, ...]
    modes: tuple[str, ...]
    llvm: tuple[int, ...]
    needs: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.script.stem


def read_case(script: Path) -> Case:
    """The case's settings, as its script leaves them once sourced over common.sh."""
    done = subprocess.run(["bash", "-euc", '. "$0"; . "$1"; printf "%s\\n" "$OUTPUTS" "$MODES" "$LLVM" "$NEEDS"',
                           str(COMMON), str(script)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} cannot be sourced: {done.stderr.strip()}")
    outputs, modes, llvm, needs = (line.split() for line in done.stdout.split("\n")[:4])
    unknown = [m for m in modes if m not in MODE_ENV]
    if unknown or not outputs or not modes or not llvm:
        raise RuntimeError(f"{script.name}: MODES {modes} (known: {list(MODE_ENV)}), OUTPUTS {outputs}, LLVM {llvm}")
    return Case(script, tuple(outputs), tuple(modes), tuple(int(v) for v in llvm), tuple(needs))


CASES = [read_case(p) for p in sorted(CASES_DIR.glob("[0-9][0-9]-*.sh"))]


def params() -> list[object]:
    """case x mode x LLVM version; the nomemo mode is slow (the quick loop keeps the default mode)."""
    out = []
    for case in CASES:
        for mode in case.modes:
            for version in case.llvm:
                marks = [pytest.mark.slow] if mode in SLOW_MODES else []
                suffix = "" if case.llvm == (22,) else f"-llvm{version}"
                out.append(pytest.param(case, mode, version, id=f"{case.name}-{mode}{suffix}", marks=marks))
    return out


class Build:
    """One case's tree and the builds made in it."""

    def __init__(self, case: Case, mode: str, version: int, root: Path) -> None:
        self.case, self.mode, self.root = case, mode, root
        self.tree = root / "tree"
        self.tree.mkdir()
        tc = toolchain(version)
        env = clean_env(**dict.fromkeys(DRIVER_ENV), PATH=f"{tc.bindir}:{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                        LLVM_BIN=str(tc.bindir), CC=wrapper("ltowrap-clang"), CXX=wrapper("ltowrap-clang++"),
                        LTOWRAP_CONFIG=str(root / "no-config.toml"), LTOWRAP_SMALL_LINK="0", **MODE_ENV[mode])
        self.env = env
        for need in case.needs:  # a command, or a file of this machine's toolchain or libc
            if not (Path(need).exists() if need.startswith("/") else shutil.which(need, path=env["PATH"])):
                missing(f"{need} (tests/soundness/{case.script.name} needs it)", "dev/setup's Debian bookworm has it")

    def step(self, name: str, cache: str, log: str) -> None:
        """Run the case's function `name` in the tree, with cache root/`cache` and log root/`log`."""
        env = dict(self.env, LTOWRAP_CACHE_DIR=str(self.root / cache), LTOWRAP_LOG=str(self.root / log))
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", '. "$0"; . "$1"; "$2"', str(COMMON),
                               str(self.case.script), name], cwd=self.tree, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise AssertionError(f"{self.case.script.name}: `{name}` (cache {cache}) exited {done.returncode}\n"
                                 f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}\n{self.log_tail(log)}")

    def keep(self, label: str) -> Path:
        """Copy the outputs aside as root/label/, for the comparisons and the failure message."""
        dest = self.root / label
        for out in self.case.outputs:
            src = self.tree / out
            if not src.is_file():
                raise AssertionError(f"{self.case.script.name}: build left no output {out} ({label})")
            (dest / out).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dest / out)
        return dest

    def snapshot(self) -> None:
        shutil.copytree(self.tree, self.root / "snapshot", symlinks=True)

    def restore(self) -> None:
        """The tree as it stood after `change`, at its own path."""
        shutil.rmtree(self.tree)
        shutil.copytree(self.root / "snapshot", self.tree, symlinks=True)

    def differing(self, a: Path, b: Path) -> list[str]:
        return [out for out in self.case.outputs if not filecmp.cmp(a / out, b / out, shallow=False)]

    def log_tail(self, log: str) -> str:
        path = self.root / log
        if not path.exists():
            return f"(no {log})"
        lines = path.read_text().splitlines()[-LOG_TAIL:]
        return f"last {len(lines)} records of {path}:\n" + "\n".join(_summary(line) for line in lines)

    def links_distributed(self, log: str) -> bool:
        path = self.root / log
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return any(r.get("decision") in ("distributed", "restored") for r in records)


def _summary(line: str) -> str:
    """A log record without its bulkiest fields (each backend's times and output)."""
    try:
        record = json.loads(line)
    except ValueError:
        return line
    if isinstance(record.get("backends"), list):
        record["backends"] = [{k: b.get(k) for k in ("module", "source")} for b in record["backends"]]
    return json.dumps(record)


@pytest.mark.parametrize("case,mode,version", params())
def test_warm_equals_cold(case: Case, mode: str, version: int, tmp_path: Path) -> None:
    b = Build(case, mode, version, tmp_path)
    b.step("setup", "cache-warm", "log-setup.jsonl")
    b.step("build", "cache-warm", "log-before.jsonl")
    before = b.keep("before")
    b.step("change", "cache-warm", "log-change.jsonl")
    b.snapshot()
    b.step("build", "cache-warm", "log-warm.jsonl")
    warm = b.keep("warm")
    b.restore()
    b.step("build", "cache-cold", "log-cold.jsonl")
    cold = b.keep("cold")
    if mode == case.modes[0] and version == case.llvm[0]:
        b.restore()
        b.step("build", "cache-cold2", "log-cold2.jsonl")
        again = b.keep("cold2")
        noisy = b.differing(cold, again)
        assert not noisy, (
            f"{case.script.name}: two builds of the same tree with empty caches differ in {noisy}: either ltowrap's "
            f"output is not reproducible (then no hit can equal an empty cache's build) or the case is not "
            f"deterministic\n  cmp -l {cold / noisy[0]} {again / noisy[0]} | head\n{b.log_tail('log-cold2.jsonl')}")
    assert b.links_distributed("log-before.jsonl"), (
        f"{case.script.name}: ltowrap distributed no link of the first build, so the case tests none of its "
        f"caches\n{b.log_tail('log-before.jsonl')}")
    assert b.differing(before, cold), (
        f"{case.script.name}: `change` changes none of {list(case.outputs)} (cold == before), so the case tests "
        f"nothing")
    stale = b.differing(warm, cold)
    assert not stale, (
        f"{case.script.name} [{mode}, LLVM {version}]: STALE — after `change`, the warm cache's build differs from "
        f"an empty cache's in {stale}"
        + (" (the warm build equals the one before the change)" if not b.differing(warm, before) else "")
        + f"\n  cmp -l {warm / stale[0]} {cold / stale[0]} | head\n"
        f"{b.log_tail('log-warm.jsonl')}")
