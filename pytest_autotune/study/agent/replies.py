"""What a model's reply gives an iteration (docs/guide/llm-tuner.md#unusable-iterations): candidate code, an engine flag
set, or the reason it gives nothing to measure.

Nothing here runs or imports the reply: code is found by text (fenced blocks), checked by nothing but its text, and
handed to the sandboxed gates like any candidate (code that does not import is refused there, by the load gate).
A flag set is parsed as JSON and checked against the declared space.

Unusable (recorded with gate ``reply``, never dropped):

* the call failed (after its retries), or answered without a reply;
* the reply was cut off: ``finish_reason`` "length" (the token cap) -- whatever it holds, the model did not finish;
  ``content_filter`` likewise;
* no code: no fenced block that defines ``class ModelNew``, no fenced Python block at all, and the reply is not
  itself a module defining it;
* (engines) no JSON object of flags, an empty one, or a flag or value outside the declared space.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from .client import CallResult

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
_PY_LANGS = ("", "python", "py", "python3")
CUT_OFF = ("length", "content_filter")


@dataclass(frozen=True)
class Reply:
    """An iteration's reply, judged: ``artifact`` (code, or a flag set) or ``unusable`` (why not)."""

    text: str  # the reply as received ("" when the call gave none)
    artifact: Any = None
    unusable: Optional[str] = None


def judge_call(result: CallResult, max_tokens: int) -> Optional[str]:
    """Why the call itself gives nothing to measure (None: its reply can be read)."""
    if result.error is not None and result.content is None:
        return f"the model call failed after {result.attempts} attempt(s): {result.error}"
    if result.finish_reason == "length":
        n = result.completion_tokens
        at = f" after {n} completion tokens" if n is not None else ""
        return (f"cut off by the token cap: finish_reason \"length\"{at} (--max-tokens={max_tokens}); a reply the "
                "model did not finish is not a candidate, whatever it holds")
    if result.finish_reason in CUT_OFF:
        return f"the reply was cut off: finish_reason {result.finish_reason!r}"
    if result.content is None or not result.content.strip():
        return f"the reply is empty (finish_reason {result.finish_reason!r})"
    return None


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each closed fenced block, in order."""
    return [(lang.lower(), body) for lang, body in _FENCE.findall(text)]


def _defines_model_new(code: str) -> bool:
    return re.search(r"^class[ \t]+ModelNew\b", code, re.M) is not None


def extract_code(text: str) -> tuple[Optional[str], Optional[str]]:
    """(code, None) or (None, why there is none). The last fenced block that defines ``class ModelNew``; else the
    last fenced Python block (its refusal by the load gate then says what it lacks); else the whole reply when it
    parses as a module defining ``ModelNew``."""
    blocks = fenced_blocks(text)
    defining = [b for lang, b in blocks if _defines_model_new(b)]
    if defining:
        return defining[-1], None
    python = [b for lang, b in blocks if lang in _PY_LANGS and b.strip()]
    if python:
        return python[-1], None
    if _defines_model_new(text):
        try:
            ast.parse(text)
        except (SyntaxError, ValueError):
            pass
        else:
            return text, None
    kinds = ", ".join(sorted({lang or "unlabelled" for lang, _ in blocks}))
    extra = f" (its {len(blocks)} fenced block(s): {kinds})" if blocks else ""
    return None, (f"no code: the reply ({len(text)} characters) holds no fenced Python block and no module defining "
                  f"class ModelNew{extra}")


def extract_flags(text: str, choices: Mapping[str, Sequence[Any]], engine: str
                  ) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    """(flags, None) or (None, why not): the last fenced JSON object, else the last ``{...}`` in the reply; every
    flag in the declared space (leading dashes dropped), every value one of its choices."""
    obj = None
    for lang, body in reversed(fenced_blocks(text)):
        obj = _json_object(body)
        if obj is not None:
            break
    if obj is None:
        for m in reversed(list(re.finditer(r"\{[^{}]*\}", text, re.S))):
            obj = _json_object(m.group(0))
            if obj is not None:
                break
    if obj is None:
        return None, (f"no flag set: the reply ({len(text)} characters) holds no JSON object of flags")
    flags = {str(k).lstrip("-"): v for k, v in obj.items()}
    if not flags:
        return None, "the flag set is empty: a configuration is the engine's default plus at least one flag"
    for flag, value in flags.items():
        if flag not in choices:
            return None, (f"--{flag} is not in {engine}'s declared flag space ({', '.join(sorted(choices))}): a flag "
                          "outside the space is not a point of the search")
        if not any(type(value) is type(c) and value == c for c in choices[flag]):
            return None, (f"--{flag} = {json.dumps(value)} is not one of its declared choices "
                          f"{json.dumps(list(choices[flag]))}")
    return dict(sorted(flags.items())), None


def _json_object(text: str) -> Optional[dict]:
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None
