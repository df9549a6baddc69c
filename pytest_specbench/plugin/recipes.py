"""A missing model directory whose matrix file says in its comments how to make it: the
``scripts/make_dummy_model.py`` command to quote in the error. Pure but for reading the file."""

from __future__ import annotations

import re
from pathlib import Path

SCRIPT = "scripts/make_dummy_model.py"
_PUNCT = ",;:)."


def _comment_text(matrix_path: str | Path) -> str:
    """The matrix file's comments as one line of words (``# `` and line continuations dropped)."""
    try:
        lines = Path(matrix_path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return ""
    words = []
    for line in lines:
        _, hash_, comment = line.partition("#")
        if hash_:
            words.append(comment.replace("\\", " "))
    return " ".join(words)


def _commands(text: str) -> list[list[str]]:
    """The arguments of each ``make_dummy_model.py`` command in ``text``: paths, options and the
    values after options, up to the first word that is none of these."""
    out = []
    for m in re.finditer(re.escape(SCRIPT), text):
        args: list[str] = []
        for word in text[m.end() :].split():
            bare = word.rstrip(_PUNCT) or word
            after_option = bool(args) and args[-1].startswith("--")
            if not (bare.startswith(("-", ".", "/", "~")) or after_option):
                break
            args.append(bare)
            if bare != word:
                break
        out.append(args)
    return out


def make_model_hint(matrix_path: str | Path, missing: str) -> str:
    """``; the matrix's header says how to make it ...: python3 scripts/make_dummy_model.py ...`` for
    the command in the matrix's comments that writes ``missing`` (by its last path component; the
    first command where none names it); empty when the comments have none."""
    cmds = _commands(_comment_text(matrix_path))
    if not cmds:
        return ""
    name = Path(missing).name
    cmd = next((c for c in cmds if any(Path(a).name == name for a in c)), cmds[0])
    return "; the matrix's comments say how to make it (from the repository root): " + " ".join(
        ["python3", SCRIPT, *cmd]
    )


def with_make_model_hint(matrix_path: str | Path, why: str) -> str:
    """``why`` with :func:`make_model_hint` added where it says a model path does not exist."""
    m = re.search(r"'([^']+)' does not exist", why)
    return why + make_model_hint(matrix_path, m.group(1)) if m else why
