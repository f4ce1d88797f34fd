"""The compile path's cost in each form a CMake build puts ltowrap in, against plain clang.

    .venv/bin/python bench/launcher.py [--reps N] [--project libwebp yaml-cpp] [--other-bin DIR]

Builds Debian's libwebp 1.2.4 (C) and yaml-cpp 0.7 (C++) with CMake and Ninja, Release
(-O3, no LTO: every compile is one the compile path decides, and the links pass through),
in these configurations:

  plain      CMAKE_<LANG>_COMPILER=/usr/bin/clang-22, clang++-22
  launcher   the same, with CMAKE_<LANG>_COMPILER_LAUNCHER and _LINKER_LAUNCHER = ltowrap
             (README's CMake form; meson's CC="ltowrap clang" runs the same command)
  wrapper    CMAKE_<LANG>_COMPILER=ltowrap-clang, ltowrap-clang++ and LTOWRAP_CLANG=/usr/bin/clang-22
             (clang++ then comes from ltowrap's clang -> clang++ mapping)

With --other-bin DIR (the bin of another install, e.g. a venv made from main), `launcher`
and `wrapper` are measured again with that install's scripts, as `launcher@other` and
`wrapper@other`: a change is measured side by side with what it replaces.

Each repetition configures a fresh build directory per configuration (not timed), then
times `ninja -j2`: wall, and user+sys CPU of ninja and everything it ran (wait4). First,
a per-call table isolates what each form adds to one compile: `--calls` runs of it with
/bin/true standing in for clang, against /bin/true itself.
Configurations run in rotating order. Prints medians and ratios to `plain` and writes
them with every sample to bench/out/<date>-launcher.{json,md}. The ltowrap measured
is the one installed beside the Python running this script.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from integration import debsrc  # noqa: E402

SCRIPTS = Path(sys.executable).parent
CLANG, CLANGXX = "/usr/bin/clang-22", "/usr/bin/clang++-22"
PROJECTS = {  # Debian source package -> CMake options that leave out what the build does not need
    "libwebp": [f"-DWEBP_BUILD_{t}=OFF" for t in ("ANIM_UTILS", "GIF2WEBP", "IMG2WEBP", "VWEBP", "EXTRAS")],
    "yaml-cpp": ["-DYAML_CPP_BUILD_TESTS=OFF", "-DYAML_CPP_BUILD_TOOLS=OFF"],
}


@dataclass
class Sample:
    project: str
    config: str
    rep: int
    wall: float
    cpu: float
    compiles: int


def configurations(bins: dict[str, Path]) -> dict[str, tuple[list[str], dict[str, str]]]:
    """config name -> (cmake options, extra environment)."""
    out = {"plain": ([f"-DCMAKE_C_COMPILER={CLANG}", f"-DCMAKE_CXX_COMPILER={CLANGXX}"], {})}
    for suffix, bindir in bins.items():
        launcher = str(bindir / "ltowrap")
        out["launcher" + suffix] = ([f"-DCMAKE_C_COMPILER={CLANG}", f"-DCMAKE_CXX_COMPILER={CLANGXX}",
                                     *(f"-DCMAKE_{lang}_{kind}_LAUNCHER={launcher}" for lang in ("C", "CXX")
                                       for kind in ("COMPILER", "LINKER"))], {})
        out["wrapper" + suffix] = ([f"-DCMAKE_C_COMPILER={bindir / 'ltowrap-clang'}",
                                    f"-DCMAKE_CXX_COMPILER={bindir / 'ltowrap-clang++'}"], {"LTOWRAP_CLANG": CLANG})
    return out


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, user+sys CPU of the command and all its descendants); fails loudly on an error."""
    with tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        proc.returncode = rc = os.waitstatus_to_exitcode(status)
        if rc != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)} exited {rc}:\n{err.read().decode(errors='replace')[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def build_once(tree: Path, build: Path, options: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    subprocess.run(["cmake", "-G", "Ninja", "-S", str(tree), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", *options],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    compiles = len(subprocess.run(["ninja", "-C", str(build), "-t", "commands"], env=env, check=True,
                                  capture_output=True, text=True).stdout.splitlines())
    wall, cpu = timed(["ninja", "-C", str(build), "-j2"], build, env)
    return wall, cpu, compiles


def clean_env(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LTOWRAP_", "CCACHE_")) and k not in ("MAKEFLAGS", "MFLAGS", "CC", "CXX", "CFLAGS", "CXXFLAGS")}
    return env | {"LTOWRAP_CACHE_DIR": str(scratch / "ltowrap-cache"), "LTOWRAP_CONFIG": str(scratch / "none.toml"),
                  "LC_ALL": "C"}


def per_call(bins: dict[str, Path], scratch: Path, env: dict[str, str], calls: int) -> tuple[str, dict]:
    """The wrapper's own cost per compile: `calls` runs of each form with /bin/true as the compiler.

    A compiler that does nothing leaves only what the form adds: a sh start and an exec,
    or a Python start. `clang` and `clang++` here are links to true, so ltowrap-clang++
    with LTOWRAP_CLANG finds its clang++ the way it does beside a real clang.
    """
    fake = scratch / "fake-llvm"
    fake.mkdir()
    true = shutil.which("true") or "/bin/true"
    for name in ("clang", "clang++"):
        (fake / name).symlink_to(true)
    (scratch / "a.c").write_text("int a;\n")
    forms = {"true": ([true, "-c", "a.c"], {}),
             "ltowrap-clang, LTOWRAP_CLANG (the plain sh entry)": ([str(SCRIPTS / "ltowrap-clang"), "-c", "a.c"],
                                                                 {"LTOWRAP_CLANG": str(fake / "clang")})}
    for suffix, bindir in bins.items():
        forms["ltowrap clang (launcher)" + suffix] = ([str(bindir / "ltowrap"), str(fake / "clang"), "-c", "a.c"], {})
        forms["ltowrap-clang++, LTOWRAP_CLANG" + suffix] = ([str(bindir / "ltowrap-clang++"), "-c", "a.c"],
                                                            {"LTOWRAP_CLANG": str(fake / "clang")})
    lines = ["| form | ms CPU per call | ms wall per call |", "| --- | ---: | ---: |"]
    out = {}
    for name, (argv, extra) in forms.items():
        script = f'i=0; while [ $i -lt {calls} ]; do "$@" || exit 1; i=$((i+1)); done'
        wall, cpu = timed(["sh", "-c", script, "sh", *argv], scratch, env | extra)
        out[name] = {"cpu_ms": round(1000 * cpu / calls, 2), "wall_ms": round(1000 * wall / calls, 2), "calls": calls}
        lines.append(f"| `{name}` | {out[name]['cpu_ms']:.2f} | {out[name]['wall_ms']:.2f} |")
    return "\n".join(lines), out


def table(samples: list[Sample], configs: list[str]) -> tuple[str, dict]:
    lines = ["| project | configuration | commands | wall (s) | CPU (s) | wall / plain | CPU / plain |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    medians: dict = {}
    for project in sorted({s.project for s in samples}):
        for config in configs:
            mine = [s for s in samples if s.project == project and s.config == config]
            if not mine:
                continue
            wall, cpu = statistics.median(s.wall for s in mine), statistics.median(s.cpu for s in mine)
            # Ratios per repetition (same rep, same load), then their median.
            plain = {s.rep: s for s in samples if s.project == project and s.config == "plain"}
            rw = statistics.median(s.wall / plain[s.rep].wall for s in mine if s.rep in plain)
            rc = statistics.median(s.cpu / plain[s.rep].cpu for s in mine if s.rep in plain)
            medians[f"{project}: {config}"] = {"wall": round(wall, 3), "cpu": round(cpu, 3), "wall_ratio": round(rw, 4),
                                               "cpu_ratio": round(rc, 4), "commands": mine[0].compiles}
            lines.append(f"| {project} | {config} | {mine[0].compiles} | {wall:.2f} | {cpu:.2f} | {rw:.3f}x | {rc:.3f}x |")
    return "\n".join(lines), medians


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--project", nargs="+", default=list(PROJECTS), choices=list(PROJECTS))
    p.add_argument("--other-bin", type=Path, help="another install's bin directory, measured side by side")
    p.add_argument("--calls", type=int, default=200, help="runs of each form for the per-call table (0: none)")
    p.add_argument("--no-builds", action="store_true", help="only the per-call table")
    a = p.parse_args()
    bins = {"": SCRIPTS, **({"@other": a.other_bin.resolve()} if a.other_bin else {})}
    configs = configurations(bins)
    names = list(configs)
    samples: list[Sample] = []
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ltowrap-bench-launcher-") as tmp:
        scratch = Path(tmp)
        env = clean_env(scratch)
        calls_text, calls = per_call(bins, scratch, env, a.calls) if a.calls else ("", {})
        for project in [] if a.no_builds else a.project:
            (scratch / project).mkdir()
            tree = debsrc.fetch(project).unpack(scratch / project / "src")
            for rep in range(a.reps):
                order = names[rep % len(names):] + names[:rep % len(names)]
                for config in order:
                    options, extra = configs[config]
                    build = scratch / project / f"build-{config}-{rep}"
                    wall, cpu, n = build_once(tree, build, [*options, *PROJECTS[project]], env | extra)
                    samples.append(Sample(project, config, rep, wall, cpu, n))
                    print(f"{project} rep {rep} {config}: {wall:.2f} s wall, {cpu:.2f} s CPU", file=sys.stderr)
                    shutil.rmtree(build)
    text, medians = table(samples, names)
    text = f"{text}\n\n{calls_text}"
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    info = {"date": stamp, "command": " ".join([Path(sys.executable).name, *sys.argv]), "reps": a.reps,
            "load_average_start": load_start, "load_average_end": os.getloadavg(), "other_bin": str(a.other_bin or ""),
            "clang": subprocess.run([CLANG, "--version"], capture_output=True, text=True).stdout.splitlines()[0]}
    out = ROOT / "bench" / "out" / f"{stamp}-launcher"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"info": info, "medians": medians, "per_call": calls,
                                                    "samples": [asdict(s) for s in samples]}, indent=2) + "\n")
    out.with_suffix(".md").write_text(f"# bench/launcher.py, {stamp}\n\n{json.dumps(info)}\n\n{text}\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
