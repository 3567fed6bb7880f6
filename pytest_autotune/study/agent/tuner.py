"""``--tuner=llm`` on the tuner seam: an adaptive tuner that writes candidates itself (docs/guide/llm-tuner.md).

It proposes no points of a template's space: ``autotune search`` runs it through the adaptive loop
(:mod:`pytest_autotune.study.agent.loop`), one model call and one measured iteration at a time.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ...errors import AutotuneUsageError
from ..search.space import Point, SearchSpace
from ..search.tuner_base import Trial, Tuner
from .calls import CallLog, Redactor
from .client import DEFAULT_KEY_ENV, ChatClient, ClientSettings, api_key


class LlmTuner(Tuner):
    name = "llm"
    adaptive = True
    writes_code = True

    def __init__(self, seed: int, options: Optional[dict[str, Any]] = None) -> None:
        super().__init__(seed, options)
        o = self.options
        self.key_env_given = bool(o.get("api_key_env"))
        self.settings = ClientSettings(
            endpoint=str(o.get("endpoint") or ""), model=str(o.get("model") or ""),
            max_tokens=int(o.get("max_tokens") or ClientSettings.max_tokens),
            temperature=float(o["temperature"]) if o.get("temperature") is not None else ClientSettings.temperature,
            seed=seed, timeout_s=float(o.get("timeout_s") or ClientSettings.timeout_s),
            retries=int(o["retries"]) if o.get("retries") is not None else ClientSettings.retries,
            backoff_s=float(o["backoff_s"]) if o.get("backoff_s") is not None else ClientSettings.backoff_s,
            api_key_env=str(o.get("api_key_env") or DEFAULT_KEY_ENV)).check()

    def propose(self, space: SearchSpace, budget: int, history: Sequence[Trial]) -> list[Point]:
        raise AutotuneUsageError("the llm tuner writes candidates itself, one measured iteration at a time; it "
                                 "proposes no template points (autotune search runs it through its adaptive loop)")

    def key(self) -> Optional[str]:
        """The API key, from the environment only."""
        return api_key(self.settings.api_key_env, self.key_env_given)

    def connect(self, log_path: Any) -> tuple[ChatClient, Redactor]:
        key = self.key()
        redactor = Redactor.of([key])
        return ChatClient(self.settings, CallLog(log_path, redactor), key), redactor
