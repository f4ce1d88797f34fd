"""What reading a module's own facts (irmodule.read) costs a link, per module without a record.

Every module of Debian lua5.4 is compiled `-O2 -flto=thin`, with and without `-g`, by
clang 22. For each set this measures, side by side and alternating:
- irmodule.read(data, flags=False): the triple, what every record-less module needs;
- irmodule.read(data): triple and module flags, what a `-r` link needs;
- the anchor: `clang --version`, the floor of the backend compile every module gets (a
  clang process start), once per module.
It prints the median per module of each and its share of the anchor, and writes them to
bench/out/<date>-module-facts.{json,md} (docs/backend-options.md).

    .venv/bin/python bench/module_facts.py [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from integration import debsrc  # noqa: E402
from ltowrap.formats import irmodule  # noqa: E402

CLANG = "/usr/lib/llvm-22/bin/clang"


def modules(tree: Path, out: Path, flags: list[str]) -> list[bytes]:
    out.mkdir(parents=True)
    found = []
    for src in sorted((tree / "src").glob("*.c")):
        obj = out / (src.stem + ".o")
        subprocess.run([CLANG, "-O2", "-flto=thin", *flags, "-DLUA_COMPAT_5_3", "-DLUA_USE_LINUX", "-c", str(src),
                        "-o", str(obj)], check=True)
        found.append(obj.read_bytes())
    return found


def per_module(fn, datas: list[bytes]) -> float:
    start = time.perf_counter()
    for d in datas:
        fn(d)
    return (time.perf_counter() - start) / len(datas)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    measures = {
        "triple": lambda d: irmodule.read(d, flags=False),
        "triple+flags": irmodule.read,
        "anchor: clang --version": lambda d: subprocess.run([CLANG, "--version"], check=True, capture_output=True),
    }
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tree = debsrc.lua_upstream_tree(Path(tmp) / "lua5.4")
        for label, flags in (("lua -O2", []), ("lua -O2 -g", ["-g"])):
            datas = modules(tree, Path(tmp) / label.replace(" ", "_"), flags)
            samples: dict[str, list[float]] = {k: [] for k in measures}
            for _ in range(a.reps):
                for name, fn in measures.items():
                    samples[name].append(per_module(fn, datas))
            medians = {k: statistics.median(v) for k, v in samples.items()}
            anchor = medians["anchor: clang --version"]
            results[label] = {"modules": len(datas), "bytes": sum(map(len, datas)),
                              "ms_per_module": {k: round(v * 1000, 3) for k, v in medians.items()},
                              "ratio_to_anchor": {k: round(v / anchor, 3) for k, v in medians.items()},
                              "samples_ms": {k: [round(x * 1000, 3) for x in v] for k, v in samples.items()}}
    stamp = time.strftime("%Y-%m-%d-%H%M")
    out = HERE / "out" / f"{stamp}-module-facts"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    lines = ["| modules | what | ms per module | × clang --version |", "| --- | --- | ---: | ---: |"]
    for label, r in results.items():
        for k, v in r["ms_per_module"].items():
            lines.append(f"| {label} ({r['modules']}, {r['bytes'] // 1024} KiB) | {k} | {v} | {r['ratio_to_anchor'][k]} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
