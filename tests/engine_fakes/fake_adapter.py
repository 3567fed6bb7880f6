"""An engine adapter for tests/engines/fake_server.py, registered through the ``pytest_autotune_engines`` hook
exactly as a third-party engine would be. Its "install" records the interpreter and the script."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

from pytest_autotune.engines import localhttp
from pytest_autotune.engines.adapters.base import (
    EffectiveConfig,
    EngineAdapter,
    Finding,
    FlagSet,
    FlagValue,
    LaunchEvidence,
    values_equal,
)

SCRIPT = Path(__file__).with_name("fake_server.py")


class FakeAdapter(EngineAdapter):
    name: ClassVar[str] = "fake"
    title: ClassVar[str] = "fake engine (tests)"
    load_gauges: ClassVar[tuple[str, ...]] = ("fake:running", "fake:waiting")

    def recipe(self) -> str:
        return f"fake server {SCRIPT.name}"

    def build(self, root: Path, run: Any) -> dict[str, Path]:
        return {"python": Path(sys.executable), "script": SCRIPT}

    def check_installation(self, inst: Any) -> str:
        return "fake-1"

    def command(self, inst: Any, model: Any, served_name: str, port: int, flags: FlagSet) -> list[str]:
        return [str(inst.path("python")), str(inst.path("script")), "--model", str(model.path),
                "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port), *self.render(flags)]

    def render_flag(self, name: str, value: FlagValue) -> list[str]:
        return [f"--{name}"] if value is True else super().render_flag(name, value)

    def effective_config(self, base_url: str, log_text: str, metrics: Any) -> EffectiveConfig:
        with localhttp.client(timeout=5.0) as c:
            props = c.get(base_url + "/props").json()
        values = {f"props.{k}": v for k, v in props.items()}
        return EffectiveConfig(values, str(props.get("version", "")), ("/props",))

    def findings(self, flag: str, value: FlagValue, evidence: LaunchEvidence,
                 default: LaunchEvidence) -> Finding:
        if flag == "slots":
            got = evidence.effective.get("props.slots")
            if not values_equal(got, value):
                return Finding(flag, False, f"/props slots = {got}, not {value}")
            if values_equal(default.effective.get("props.slots"), value):
                return Finding(flag, False, f"the default already runs {got} slots")
            peak = evidence.gauge_maxima.get("fake:running")
            if peak is not None and peak > float(value):
                return Finding(flag, False, f"{peak:g} running at once, more than {value}")
            return Finding(flag, True, f"{got} slots, at most {peak} running")
        if flag == "spec-type":
            drafts = evidence.delta("fake:drafts")
            if not drafts:
                return Finding(flag, False, f"speculation configured but {drafts or 0:g} drafts")
            return Finding(flag, True, f"{drafts:g} drafts")
        if flag == "token-delay":
            got = evidence.effective.get("props.token_delay")
            return Finding(flag, values_equal(got, value) or False, f"token delay {got}")
        return Finding(flag, None, "no read-back for this flag")
