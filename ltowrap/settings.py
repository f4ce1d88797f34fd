"""The frozen settings object that the link pipeline and the CLI read (see config for the sources)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .config import resolve


@dataclass(frozen=True)
class Settings:
    cache_dir: str
    max_size: int
    jobs: int
    disable: bool
    log: str
    lto: str
    backend_opts: str
    use_lld: bool
    clang: str
    keep: bool
    debug: bool
    progress: str
    remote: str
    remote_mode: str
    remote_instance: str
    remote_header: str
    remote_tls_ca: str
    remote_jobs: int
    remote_timeout: float
    remote_exec_timeout: float
    origins: dict[str, str] = field(default_factory=dict, compare=False)


def load(env: Mapping[str, str] = os.environ) -> Settings:
    resolved = resolve(env)
    return Settings(**{k: v for k, (v, _) in resolved.items()}, origins={k: o for k, (_, o) in resolved.items()})  # type: ignore[arg-type]
