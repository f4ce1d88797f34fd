"""Why a link is not distributed (`Reason`), and the two ways a stage can refuse to go on.

Not on the compile path: `enum` costs milliseconds to import, so the modules the compile
path loads (proc, toolchain) import this lazily.
"""

from __future__ import annotations

import enum


class Reason(enum.Enum):
    """A reason a link ran unchanged. The value is its stable key in the stats
    (`ltowrap stats --json`, fallback_reasons) and the log; `text` is what users read."""

    NO_BITCODE = "no_bitcode"
    SMALL_LINK = "small_link"
    ALREADY_SPLIT = "already_split"
    UNSUPPORTED_OPTION = "unsupported_option"
    BAD_RESPONSE_FILE = "bad_response_file"
    BAD_ARCHIVE = "bad_archive"
    UNREADABLE_INPUT = "unreadable_input"
    NO_BACKEND_COMPILER = "no_backend_compiler"
    MIXED_TOOLCHAIN = "mixed_toolchain"
    LINKER_OPTION = "linker_option"
    CACHE_PATH = "cache_path"
    THINLINK_FAILED = "thinlink_failed"
    THINLINK_OUTPUT = "thinlink_output"
    BACKEND_FAILED = "backend_failed"
    MODULE_FACTS = "module_facts"
    FINAL_LINK_FAILED = "final_link_failed"
    TOOL_FAILED = "tool_failed"
    FILE_ERROR = "file_error"
    CONFIG_ERROR = "config_error"
    INTERNAL_ERROR = "internal_error"

    @property
    def text(self) -> str:
        return _TEXT[self]


_TEXT = {
    Reason.NO_BITCODE: "no bitcode input",
    Reason.SMALL_LINK: "too few bitcode modules to gain from distributing (the small_link setting)",
    Reason.ALREADY_SPLIT: "the link is already split (index-only or lld's DTLTO)",
    Reason.UNSUPPORTED_OPTION: "unsupported option",
    Reason.BAD_RESPONSE_FILE: "bad response file",
    Reason.BAD_ARCHIVE: "malformed archive",
    Reason.UNREADABLE_INPUT: "unreadable input",
    Reason.NO_BACKEND_COMPILER: "no clang for the backend compiles",
    Reason.MIXED_TOOLCHAIN: "tools of different LLVM releases",
    Reason.LINKER_OPTION: "an option this ld.lld does not take",
    Reason.CACHE_PATH: "cache path that --thinlto-prefix-replace cannot express",
    Reason.THINLINK_FAILED: "the thin-link failed",
    Reason.THINLINK_OUTPUT: "unexpected thin-link output",
    Reason.BACKEND_FAILED: "a backend compile failed",
    Reason.MODULE_FACTS: "no relocation model known for a module without a record",
    Reason.FINAL_LINK_FAILED: "the final link failed",
    Reason.TOOL_FAILED: "a tool failed",
    Reason.FILE_ERROR: "file error",
    Reason.CONFIG_ERROR: "bad configuration",
    Reason.INTERNAL_ERROR: "internal error",
}


class Unsupported(Exception):
    """ltowrap cannot distribute this link: a countable reason, and the detail for the user."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(f"{reason.text}: {detail}" if detail else reason.text)
        self.reason = reason
        self.detail = detail


class ToolFailed(Exception):
    """A tool that ltowrap ran on its own behalf failed (not the user's final command)."""

    def __init__(self, argv: list[str], returncode: int, output: str, reason: Reason = Reason.TOOL_FAILED) -> None:
        super().__init__(f"{argv[0]} exited {returncode}")
        self.argv = argv
        self.returncode = returncode
        self.output = output
        self.reason = reason
