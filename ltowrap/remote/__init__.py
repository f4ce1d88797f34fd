"""Backend compiles on a Remote Execution API (REAPI v2) service: its cache, or its workers.

Optional (`pip install ltowrap[remote]`): nothing outside this package imports it unless
`remote` is set, so the local link never loads grpc or protobuf.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Settings
    from ..stats import Stats
    from .session import Session


def connect(settings: Settings, stats: Stats, compiler_identity: str, digest_of: Callable[[str], str]) -> Session | None:
    """A session with the configured service, or None (local only) when none is set or it cannot be used."""
    if not settings.remote:
        return None
    try:
        from .client import RemoteError
        from .session import open_session
    except ImportError as e:
        print(f"ltowrap: remote is set but its client is not installed (pip install 'ltowrap[remote]'): {e}",
              file=sys.stderr)
        stats.add("remote_errors")
        return None
    from ..cachekey import remote_toolchain
    from ..config import platform_properties

    platform = platform_properties(settings)
    try:
        return open_session(settings, stats, platform, remote_toolchain(compiler_identity), digest_of)
    except (RemoteError, OSError) as e:
        print(f"ltowrap: remote {settings.remote}: {e}; compiling locally", file=sys.stderr)
        stats.add("remote_errors")
        return None
