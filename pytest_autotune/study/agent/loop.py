"""The LLM tuner's adaptive loop (docs/guide/llm-tuner.md#the-loop).

For each of ``budget`` iterations: build the prompt from the target and every earlier outcome, make one chat
completion (logged), and judge the reply:

* usable -> the artifact is written inside the modification surface (``<out>/<problem>/llm_s<seed>_i<NNN>.py``,
  or an engine declaration), and one ``pytest --autotune`` session measures it through the same gates as any
  candidate, with its study, arm and iteration from a session manifest. Its outcome (the speedup with its CI, or
  the refusal with gate and reason) is read from the session's JSON report and goes into the next prompt.
* unusable -> the reply, as received, is written beside the candidates and the iteration is entered in the
  manifest as unusable; its outcome is known at once (the next prompt says why), and the next measuring session
  records it (gate ``reply``). A search that ends on unusable iterations measures them in a last session.

The key never reaches a measuring session: those run with the environment minus every variable holding it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..search.manifest import MANIFEST_NAME, write_manifest
from .calls import CallLog, Redactor, TokenCount
from .client import CallResult, ClientSettings
from .history import IterationOutcome, best, from_report
from .replies import Reply, judge_call
from .targets import Target, rel

#: ``complete(messages, meta) -> CallResult``: the model call (a :class:`~.client.ChatClient`'s ``complete``)
Complete = Callable[[list, dict], CallResult]


@dataclass
class AgentSearch:
    root: Path
    target: Target
    complete: Complete
    settings: ClientSettings
    log: CallLog
    redactor: Redactor
    study: str
    arm: str
    budget: int
    seed: int
    first_iteration: int
    db: Path
    device: str
    extra: Sequence[str] = ()
    token_budget: Optional[int] = None
    env: Optional[dict[str, str]] = None  # the measuring sessions' environment (None: this one, minus the key)
    say: Callable[[str], None] = print
    history: list[IterationOutcome] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------------------------------ files
    def name(self, iteration: int) -> str:
        return f"llm_s{self.seed}_i{iteration:03d}"

    def header(self, iteration: int) -> str:
        # the tuner, model, seed and iteration, never the study or arm: two arms handed the same model and seed
        # write byte-identical candidates, which the treatment-delivery check sees (as for random search)
        return (f"autotune search: tuner llm, model {self.settings.model}, seed {self.seed}, iteration {iteration}")

    def manifest_body(self, entries: list[dict[str, Any]], spent: TokenCount) -> dict[str, Any]:
        s = self.settings
        from .calls import public_endpoint

        return {"study": self.study, "arm": self.arm, "tuner": "llm", "seed": self.seed, "budget": self.budget,
                "kind": self.target.kind, "problem": self.target.source(), "model": s.model,
                "endpoint": public_endpoint(s.endpoint), "max_tokens": s.max_tokens, "temperature": s.temperature,
                "api_key_env": s.api_key_env, "calls_log": rel(self.log.path, self.root),
                "token_budget": self.token_budget,
                "tokens": {"prompt": spent.prompt, "completion": spent.completion, "calls": spent.calls},
                "candidates": entries}

    def _entry(self, name: str, iteration: int, path: Path, result: Optional[CallResult],
               unusable: Optional[str]) -> dict[str, Any]:
        e: dict[str, Any] = {
            "problem": self.target.problem, "name": name, "iteration": iteration, "kind": self.target.kind,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "path": path.name, "params": {},
            "call": None if result is None else {
                "log_line": result.log_line, "request_sha256": result.request_sha256,
                "finish_reason": result.finish_reason, "usage": result.usage, "attempts": result.attempts,
                "latency_s": round(result.latency_s, 4), "error": result.error}}
        if unusable is not None:
            e["unusable"] = self.redactor.text(unusable)
        return e

    # ------------------------------------------------------------------------------------------ the loop
    def run(self) -> int:
        folder = self.target.folder
        if folder.exists() and any(p for p in folder.iterdir() if p.resolve() != self.log.path.resolve()):
            from ...errors import AutotuneUsageError

            raise AutotuneUsageError(f"{folder} already holds candidates (an earlier search of this arm?): remove "
                                     "it, or choose another --out (each search writes its own folder)")
        folder.mkdir(parents=True, exist_ok=True)
        spent = self.log.spent(self.study)
        pending: list[dict[str, Any]] = []
        for k in range(self.budget):
            it = self.first_iteration + k
            name = self.name(it)
            reply, result = self._ask(it, k + 1, name, spent)
            if reply.unusable is not None:
                path = folder / f"{name}.reply.txt"
                path.write_text(self.redactor.text(reply.text), encoding="utf-8")
                entry = self._entry(name, it, path, result, reply.unusable)
                pending.append(entry)
                outcome = IterationOutcome(it, name, "unusable", "reply", entry["unusable"])
                self.say(f"iteration {it} ({name}): unusable: {entry['unusable']}")
            else:
                path = self.target.write(name, reply.artifact, self.header(it))
                path.write_text(self.redactor.text(path.read_text(encoding="utf-8")), encoding="utf-8")
                entry = self._entry(name, it, path, result, None)
                self.say(f"iteration {it} ({name}): measuring {rel(path, self.root)}")
                outcome = self._measure([*pending, entry], entry, self.target.artifact_text(reply.artifact))
                pending = []
            self.history.append(outcome)
            self.entries.append(entry)
            write_manifest(folder / MANIFEST_NAME, {**self.manifest_body(self.entries, spent),
                                                   "outcomes": [o.describe() for o in self.history]})
        if pending:
            self.say(f"recording {len(pending)} unusable iteration(s) in a last session")
            self._measure(pending, None, None)
        self._summary(spent)
        return 1 if self.failures else 0

    def _ask(self, iteration: int, position: int, name: str, spent: TokenCount
             ) -> tuple[Reply, Optional[CallResult]]:
        if self.token_budget is not None and spent.total >= self.token_budget:
            return Reply("", unusable=f"not attempted: the study's token budget ({self.token_budget}) was spent "
                                      f"({spent.total} tokens) before this iteration"), None
        messages = self.target.messages(self.history, iteration, position, self.budget, self.settings.max_tokens)
        meta = {"study": self.study, "arm": self.arm, "problem": self.target.problem, "iteration": iteration,
                "candidate": name, "tuner": "llm"}
        result = self.complete(messages, meta)
        spent.add(result.usage)
        text = result.content if result.content is not None else (result.error or "")
        why = judge_call(result, self.settings.max_tokens)
        if why is not None:
            return Reply(text, unusable=why), result
        artifact, why = self.target.parse(text)
        return Reply(text, artifact, why), result

    def _measure(self, entries: list[dict[str, Any]], measured: Optional[dict[str, Any]],
                 artifact: Optional[str]) -> IterationOutcome:
        """One pytest session over ``entries`` (the measured candidate and pending unusable iterations)."""
        last = entries[-1]
        manifest = self.target.folder / f"session-{last['name']}.json"
        write_manifest(manifest, self.manifest_body(entries, TokenCount()))
        path = self.target.folder / measured["path"] if measured is not None else None
        with tempfile.TemporaryDirectory(prefix="autotune-llm-") as tmp:
            report = Path(tmp) / "report.json"
            cmd = self.target.pytest_command(manifest, path, db=self.db, device=self.device, report=report,
                                             extra=self.extra)
            rc = subprocess.run(cmd, cwd=self.root, env=self.env if self.env is not None else scrubbed_env(
                self.settings.api_key_env)).returncode
            outcomes = {e["name"]: from_report(report, self.target.problem, e["name"], e["iteration"], None, rc)
                        for e in entries}
        for e in entries:
            o = outcomes[e["name"]]
            if o.verdict == "not measured":
                self.failures.append(f"iteration {e['iteration']} ({e['name']}): {o.reason}")
        if measured is None:
            return outcomes[last["name"]]
        o = outcomes[measured["name"]]
        return IterationOutcome(o.iteration, o.name, o.verdict, o.gate, o.reason, o.speedup, o.ci, o.baseline,
                                o.candidate_s, o.baseline_s, artifact, o.build_log)

    def _summary(self, spent: TokenCount) -> None:
        self.say("")
        self.say(f"search {self.study}/{self.arm} (tuner llm, model {self.settings.model}) on {self.device}:")
        for o in self.history:
            self.say(f"  {o.describe()}")
        usable = sum(1 for o in self.history if o.usable)
        b = best(self.history)
        self.say(f"  usable: {usable} of {len(self.history)} iteration(s)"
                 + (f"; best {b.speedup:.3f}x (iteration {b.iteration})" if b is not None else ""))
        self.say(f"  {spent.describe(self.token_budget)}")
        self.say(f"  calls log: {rel(self.log.path, self.root)}")
        for f in self.failures:
            self.say(f"  NOT RECORDED: {f}")


def scrubbed_env(key_env: str) -> dict[str, str]:
    """This environment without the API key: the variable that holds it, ``OPENAI_API_KEY``, and any other
    variable with the same value."""
    secrets = {v for k, v in os.environ.items() if k in (key_env, "OPENAI_API_KEY") and v}
    return {k: v for k, v in os.environ.items() if k not in (key_env, "OPENAI_API_KEY") and v not in secrets}
