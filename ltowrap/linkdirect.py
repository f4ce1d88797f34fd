"""The link memo's direct lane: a driver link restored from its command alone, in milliseconds.

The link memo (linkmemo.py) is keyed by the final ld.lld argv, so reaching it takes the
driver line (driverline.py), the parse of the link line (cmdline.py) and their imports:
most of a relink's time. Like ccache's direct mode, this lane skips them. Its entry
(l/, cachekey.link_direct_key: the driver's argv, working directory and environment, the
tools' stat identity, the settings) holds what the memo's own keys took from the disk
when the link was memoised, and a lookup checks each again:
- what the driver line depends on (driverline.Checks: the stat identity of the files and
  directories it names or searches, the contents of the config files the driver loaded);
- the library candidates lld's search tried before each -l's file, still absent (the
  memo's fixed key records where each -l resolved);
- every file the link read, hashed again (the memo's manifest);
then it writes the outputs of the memo's result entry, as the memo would. Anything that
does not hold is a miss, and the link goes the memo's way, which writes this entry anew.

Everything imported here is cheap (no json, re, dataclasses or contextlib), and a test
holds it so: tests/test_linkmemo.py.
"""

from __future__ import annotations

import os
import sys
import time

from . import cachekey, config, driverargs, fsutil, stats, terminal, toolchain
from .cache import LINKS, Cache

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .config import Settings
    from .linkline.driverline import Checks

# The environment variables a driver link's output depends on: the driver's, the backends', lld's.
LINK_ENV = tuple(dict.fromkeys(toolchain.DRIVER_ENV + toolchain.BACKEND_ENV + toolchain.LINKER_ENV))


def write_outputs(outputs: list[tuple[str, int]], relocatable: bool, payload: bytes, n_out: int,
                  argv: list[str]) -> bool:
    """Write a memoised link's outputs as lld would (a new file renamed into place, mode 0777,
    or 0666 for -r and the map, less the umask) and replay what it printed (coloured as the
    ld.lld `argv` would colour it: terminal.py); False if a file cannot be written (the real
    link will meet the same problem and say so)."""
    pos = 0
    try:
        for i, (path, n) in enumerate(outputs):
            mode = 0o777 if i == 0 and not relocatable else 0o666
            fsutil.atomic_write(path, payload[pos : pos + n], mode, create_dirs=False)
            pos += n
    except OSError:
        return False
    sys.stdout.buffer.write(payload[pos : pos + n_out])
    sys.stdout.buffer.flush()
    err = payload[pos + n_out :]
    if err and terminal.lld_wants(argv):
        err = terminal.lld(err, os.path.basename(argv[0]))
    sys.stderr.buffer.write(err)
    sys.stderr.buffer.flush()
    return True


def result_layout(meta: dict, size: int) -> tuple[list[tuple[str, int]], int] | None:
    """(outputs with their sizes, bytes printed on stdout) of a memo result entry, or None if
    its meta does not add up to its payload."""
    try:
        outputs = [(str(p), int(n)) for p, n in meta["outputs"]]
        n_out, n_err = int(meta["out"]), int(meta["err"])
    except (KeyError, ValueError, TypeError):
        return None
    if sum(n for _, n in outputs) + n_out + n_err != size or min([n_out, n_err, *(n for _, n in outputs)]) < 0:
        return None
    return outputs, n_out


class Lane:
    """One driver link's direct entry: looked up first, written after the memo's way."""

    def __init__(self, cache_dir: str, key: str, driver_args: list[str]) -> None:
        self.cache_dir = cache_dir
        self.key = key
        self.driver_args = driver_args  # the arguments given to the driver (its line names other files)
        self.checks: Checks | None = None
        self.verifying = False  # this link's hit is checked by linking again (the verify setting)

    def driver_line(self, checks: Checks) -> None:
        """What the driver line depends on, as it was when the line was found good."""
        self.checks = checks

    def restore(self, settings: Settings) -> bool:
        """Restore the link if everything it read is as it was; True if done (and counted).
        A link picked for verify is not restored here: the memo links it again and compares."""
        if settings.verify and config.pick(settings.verify):
            self.verifying = True
            return False
        counts = stats.Stats()
        cache = Cache(self.cache_dir, counts)
        start = time.time()
        done = self._restore(cache)
        if done is not None:
            counts.add("link_hits")
        stats.flush(self.cache_dir, counts)
        if done is not None and settings.log:
            from . import logfile

            logfile.restored(settings.log, os.path.basename(done[0]), done, start, time.time())
        return done is not None

    def _restore(self, cache: Cache) -> list[str] | None:
        """The ld.lld argv of the restored link, or None on a miss."""
        data = cache.get_data(LINKS, self.key, _direct_entry)
        if data is None:
            return None
        stamped, stamp, configs, absent, files, result_key, relocatable, argv = data
        if cachekey.stamp(stamped) != stamp or any(os.path.isfile(p) for p in absent):
            return None
        if any(cachekey.file_digest(path) != d for path, d in (*configs, *files)):
            return None
        result = cache.get(LINKS, result_key)
        if result is None:
            return None
        layout = result_layout(result.meta, len(result.payload))
        if layout is None:
            cache.stats.add("bad_entries")
            return None
        outputs, n_out = layout
        return argv if write_outputs(outputs, relocatable, result.payload, n_out, argv) else None

    def store(self, cache: Cache, argv: list[str], absent: list[str], files: list[tuple[str, str]],
              result_key: str, relocatable: bool) -> None:
        """Write the entry for a link the memo stored or restored (argv: its ld.lld command)."""
        if self.checks is None:
            return
        c = self.checks
        data = {"stamped": list(c.stamped), "stamp": c.stamp, "configs": [list(f) for f in c.configs], "absent": absent,
                "files": [list(f) for f in files], "result": result_key, "relocatable": relocatable, "argv": argv}
        cache.put_data(LINKS, self.key, data)


def _direct_entry(data: dict) -> tuple:
    """A direct entry's fields (Lane.store writes them), or KeyError for another shape."""
    return (data["stamped"], data["stamp"], data["configs"], data["absent"], data["files"], data["result"],
            data["relocatable"], data["argv"])


def lane(real: list[str], args: list[str], real_ld: str, settings: Settings) -> Lane | None:
    """The direct lane of the driver link `real + args` (real_ld: the ld.lld it will run), or
    None when the memo is off or the command names a response file (whose contents the key
    would not see)."""
    if not settings.memo or driverargs.has_response_file(args):
        return None
    clang = toolchain.find_backend_clang(real_ld, settings.clang)
    if clang is None:
        return None
    tools = toolchain.compiler_files(real[0]) + [os.path.realpath(real_ld)]
    if os.path.realpath(clang) != tools[0]:  # another backend clang than the driver: its files too
        tools += toolchain.compiler_files(clang)
    key = cachekey.link_direct_key(real + args, os.getcwd(), toolchain.env_values(LINK_ENV), cachekey.stamp(tools),
                                   config.output_values(settings))
    return Lane(settings.cache_dir, key, args)
