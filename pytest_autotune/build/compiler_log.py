"""The compiler's first error in a build log (the reason of ``REJECTED by build``), and the log as the report and
the store keep it.

torch's loaders raise ``RuntimeError("Error building extension 'NAME': <ninja's output>")``: the commands ninja ran,
then the compilers' messages. The reason is the first message that names a file and a line (gcc/clang
``file:line:col: error: ...``, nvcc ``file(line): error: ...``), else the linker's first error, else the first line
that says ``error``, with the sandbox's scratch folders cut from the paths.
"""

from __future__ import annotations

import re
from typing import Optional

#: the whole log is kept up to this many characters (head and tail beyond it)
LOG_CHARS = 1 << 20

_GCC = re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?:fatal )?error:\s*(?P<msg>.+)$",
                  re.MULTILINE)
_NVCC = re.compile(r"^(?P<file>[^\s(][^(\n]*)\((?P<line>\d+)\):\s*(?:catastrophic )?error:?\s*(?P<msg>.+)$",
                   re.MULTILINE)
_LINKER = re.compile(r"^.*(?:undefined reference to|cannot find -l|multiple definition of).*$", re.MULTILINE)
_ANY = re.compile(r"^.*\berror\b.*$", re.MULTILINE | re.IGNORECASE)
#: the build sandbox's folders (the jail's private /tmp, or a temporary folder outside it)
_SCRATCH = re.compile(r"(?:/[^\s:'\"()]*)?/autotune-build-[A-Za-z0-9_]+/(?:ext/[0-9a-f]+/|triton/[^/\s]+/)?")


def strip_scratch(text: str) -> str:
    return _SCRATCH.sub("", text)


def first_error(log: str) -> Optional[str]:
    """``file:line:col: error: message`` (or the linker's / any first error line), or None when the log names
    none."""
    text = strip_scratch(log)
    hits = []
    for rx in (_GCC, _NVCC):
        m = rx.search(text)
        if m:
            col = m.groupdict().get("col")
            where = f"{m.group('file').strip()}:{m.group('line')}" + (f":{col}" if col else "")
            hits.append((m.start(), f"{where}: error: {m.group('msg').strip()}"))
    if hits:
        return min(hits)[1]
    for rx in (_LINKER, _ANY):
        for m in rx.finditer(text):
            line = m.group(0).strip()
            if not line.startswith(("FAILED:", "[")) and "Error building extension" not in line:
                return line[:500]
    return None


def keep(log: str) -> str:
    """The log as kept: whole up to :data:`LOG_CHARS`, else its head and tail with a note of what was cut."""
    if len(log) <= LOG_CHARS:
        return log
    half = LOG_CHARS // 2
    return f"{log[:half]}\n[... {len(log) - LOG_CHARS} characters cut ...]\n{log[-half:]}"


#: lines of a build log that are commands, not messages (ninja's progress and FAILED lines, compiler invocations)
_COMMAND = re.compile(r"^(\[\d+/\d+\]|FAILED:|ninja: |(\S*/)?(c\+\+|g\+\+|gcc|cc|clang\+\+|clang|nvcc)\s)")


def excerpt(log: str, chars: int) -> str:
    """The compilers' messages of a log, commands left out, from a little before the first error, at most
    ``chars`` characters (for the LLM tuner's next prompt)."""
    lines = [ln.rstrip() for ln in strip_scratch(log).splitlines()
             if ln.strip() and not _COMMAND.match(ln.strip()) and "Error building extension" not in ln]
    first = next((i for i, ln in enumerate(lines) if re.search(r"\berror\b", ln, re.IGNORECASE)), 0)
    text = "\n".join(lines[max(0, first - 2):])
    return text if len(text) <= chars else text[:chars] + "\n[...]"
