"""Response files (@file), read as LLVM reads them on Unix (GNU quoting).

Standard library only: the compile path expands them too, to see the -flto and the
options a build system put in a response file.
"""

from __future__ import annotations

import os

from .errors import Reason, Unsupported

MAX_RESPONSE_DEPTH = 16


def expand_response_files(argv: list[str], cwd: str = ".", depth: int = 0, read: list[str] | None = None) -> list[str]:
    """Inline @file arguments as lld does (GNU quoting), nested, refusing loops; each file
    read is appended to `read`, if given (what a cached result depends on)."""
    out: list[str] = []
    for tok in argv:
        if tok.startswith("@") and len(tok) > 1:
            if depth >= MAX_RESPONSE_DEPTH:
                raise Unsupported(Reason.BAD_RESPONSE_FILE, f"nested too deep (loop?) at {tok}")
            path = os.path.join(cwd, tok[1:])
            try:
                with open(path, encoding="utf-8", errors="surrogateescape") as f:
                    text = f.read()
            except OSError as e:
                raise Unsupported(Reason.BAD_RESPONSE_FILE, f"cannot read {tok[1:]!r}: {e.strerror}") from e
            if read is not None:
                read.append(path)
            out += expand_response_files(tokenize_gnu(text), cwd, depth + 1, read)
        else:
            out.append(tok)
    return out


def tokenize_gnu(text: str) -> list[str]:
    """Split a response file as LLVM's TokenizeGNUCommandLine does: whitespace separates,
    quotes group, and a backslash escapes the next character, inside quotes of both kinds too."""
    words: list[str] = []
    word: list[str] | None = None
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote and word is not None:  # a quote is only opened inside a word
            if c == quote:
                quote = ""
            elif c == "\\" and i + 1 < len(text):
                i += 1
                word.append(text[i])
            else:
                word.append(c)
        elif c in " \t\r\n":
            if word is not None:
                words.append("".join(word))
                word = None
        else:
            word = word if word is not None else []
            if c in "'\"":
                quote = c
            elif c == "\\" and i + 1 < len(text):
                i += 1
                word.append(text[i])
            else:
                word.append(c)
        i += 1
    if word is not None:
        words.append("".join(word))
    return words
