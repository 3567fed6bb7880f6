"""The one interface every serving engine is driven through.

An adapter knows four things about its engine and nothing about measuring: how to install it (a *recipe*, see
:mod:`pytest_autotune.engines.install`), how to start it on a port with a set of flags, how to read back the
configuration it actually runs with (its *effective configuration*: startup log, ``/metrics``, ``/props``), and
which evidence shows that a flag took effect (treatment delivery, :mod:`pytest_autotune.engines.delivery`).
The engine flow (:mod:`pytest_autotune.engines.run`) does the rest, the same way for every engine.

Adapters are registered through the ``pytest_autotune_engines`` hook; the built-in ones are vLLM, llama.cpp's
server and SGLang.
"""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from ..install import Installation, Runner
    from ..metrics import MetricsSnapshot
    from ..model import MadeModel
    from ..workload import Workload

FlagValue = Any  # bool | int | float | str | dict (JSON) | list


@dataclass(frozen=True)
class FlagSet:
    """Engine flags as a mapping ``name -> value`` (names without leading dashes, as the engine spells them)
    plus ``raw`` arguments passed verbatim after them. Rendering to argv is the adapter's job
    (:meth:`EngineAdapter.render_flag`)."""

    flags: tuple[tuple[str, FlagValue], ...] = ()
    raw: tuple[str, ...] = ()

    @classmethod
    def of(cls, flags: Optional[Mapping[str, FlagValue]] = None, raw: Sequence[str] = ()) -> "FlagSet":
        items = []
        for k, v in (flags or {}).items():
            name = str(k).lstrip("-")
            if not name:
                raise ValueError("empty flag name")
            items.append((name, _freeze(v)))
        return cls(tuple(sorted(items)), tuple(str(a) for a in raw))

    def as_dict(self) -> dict[str, FlagValue]:
        return {k: _thaw(v) for k, v in self.flags}

    def merged(self, other: "FlagSet") -> "FlagSet":
        """``self`` overridden by ``other`` (the configuration's flags over the server's common flags)."""
        d = self.as_dict()
        d.update(other.as_dict())
        return FlagSet.of(d, (*self.raw, *other.raw))

    def canonical(self) -> str:
        return json.dumps({"flags": self.as_dict(), "raw": list(self.raw)}, sort_keys=True, separators=(",", ":"))

    def __bool__(self) -> bool:
        return bool(self.flags or self.raw)

    def describe(self) -> str:
        parts = [f"--{k} {json.dumps(_thaw(v)) if isinstance(v, tuple) else v}" for k, v in self.flags]
        return " ".join(parts + list(self.raw)) or "(engine defaults)"


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return ("__dict__",) + tuple(sorted((str(k), _freeze(x)) for k, x in v.items()))
    if isinstance(v, list):
        return ("__list__",) + tuple(_freeze(x) for x in v)
    return v


def _thaw(v: Any) -> Any:
    if isinstance(v, tuple) and v and v[0] == "__dict__":
        return {k: _thaw(x) for k, x in v[1:]}
    if isinstance(v, tuple) and v and v[0] == "__list__":
        return [_thaw(x) for x in v[1:]]
    return v


@dataclass(frozen=True)
class EffectiveConfig:
    """What the running engine says it runs with: flat ``key -> value`` (dotted keys name the source, e.g.
    ``args.max_num_seqs``, ``engine.enable_prefix_caching``, ``cache.cache_dtype``, ``props.total_slots``)."""

    values: Mapping[str, Any]
    version: str = ""
    sources: tuple[str, ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "sources": list(self.sources),
                "values": {k: _jsonable(v) for k, v in sorted(self.values.items())}}


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


@dataclass
class LaunchEvidence:
    """Everything one launch showed about itself: the inputs of the treatment-delivery judgement."""

    effective: EffectiveConfig
    metrics_before: "MetricsSnapshot"
    metrics_after: "MetricsSnapshot"
    gauge_maxima: dict[str, float] = field(default_factory=dict)
    requests_sent: int = 0
    workload: Optional["Workload"] = None

    def delta(self, name: str) -> Optional[float]:
        return self.metrics_after.delta(self.metrics_before, name)


@dataclass(frozen=True)
class Finding:
    """Treatment delivery of one flag: ``delivered`` True (evidence seen), False (evidence against: refused),
    None (this adapter knows no evidence for the flag beyond the effective configuration)."""

    flag: str
    delivered: Optional[bool]
    evidence: str

    def to_json(self) -> dict[str, Any]:
        return {"flag": self.flag, "delivered": self.delivered, "evidence": self.evidence}


class EngineAdapter(abc.ABC):
    #: the engine's name in declarations, node ids, provenance and ``autotune engine install NAME``
    name: ClassVar[str]
    title: ClassVar[str]
    #: set where the adapter has never run: the reason (e.g. SGLang here: CUDA-only wheel, AVX-512 CPU backend)
    untested_reason: ClassVar[str] = ""
    #: "hf" (a Hugging Face folder) or "gguf" (llama.cpp)
    model_format: ClassVar[str] = "hf"
    health_path: ClassVar[str] = "/health"
    metrics_path: ClassVar[Optional[str]] = "/metrics"
    #: gauges the load generator samples while a window runs (their maxima are delivery evidence)
    load_gauges: ClassVar[tuple[str, ...]] = ()
    #: environment every launch gets (the declaration's ``[server].env`` is added on top)
    base_env: ClassVar[Mapping[str, str]] = {}

    # -------------------------------------------------------------------------------- install
    @abc.abstractmethod
    def recipe(self) -> str:
        """A text that changes whenever the install would produce something else (pinned versions, steps)."""

    @abc.abstractmethod
    def build(self, root: Path, run: "Runner") -> dict[str, Path]:
        """Build the engine under ``root``; returns the paths the launch needs (e.g. ``{"python": ...}``)."""

    @abc.abstractmethod
    def check_installation(self, inst: "Installation") -> str:
        """Raise :class:`~pytest_autotune.engines.install.EngineInstallError` if the installation cannot serve;
        return the engine's version."""

    def install_unsupported_reason(self) -> str:
        """Non-empty when this machine cannot install the engine at all (and why)."""
        return ""

    # -------------------------------------------------------------------------------- launch
    def render_flag(self, name: str, value: FlagValue) -> list[str]:
        """One flag as argv: ``True`` → ``--name``, ``False`` → ``--no-name``, a table → JSON, else
        ``--name value``."""
        if value is True:
            return [f"--{name}"]
        if value is False:
            return [f"--no-{name}"]
        if isinstance(value, dict):
            return [f"--{name}", json.dumps(value, sort_keys=True, separators=(",", ":"))]
        if isinstance(value, list):
            return [f"--{name}", *[str(v) for v in value]]
        return [f"--{name}", str(value)]

    def render(self, flags: FlagSet) -> list[str]:
        out: list[str] = []
        for k, v in flags.as_dict().items():
            out += self.render_flag(k, v)
        return out + list(flags.raw)

    @abc.abstractmethod
    def command(self, inst: "Installation", model: "MadeModel", served_name: str, port: int,
                flags: FlagSet) -> list[str]:
        """argv that serves ``model`` as ``served_name`` on 127.0.0.1:``port`` with ``flags``."""

    def env(self, inst: "Installation", workdir: Path) -> dict[str, str]:
        return dict(self.base_env)

    # -------------------------------------------------------------------------------- read back
    @abc.abstractmethod
    def effective_config(self, base_url: str, log_text: str, metrics: "MetricsSnapshot") -> EffectiveConfig:
        """Read the running server's effective configuration (after it is healthy)."""

    def findings(self, flag: str, value: FlagValue, evidence: LaunchEvidence,
                 default: LaunchEvidence) -> Finding:
        """Evidence that ``--flag value`` took effect in this launch (``default``: the default's launch of the same
        pair, for comparison). The default rule: the effective configuration must show the value under
        ``args.<flag>`` (a flag the engine did not even parse is not delivered)."""
        key = "args." + flag.replace("-", "_")
        if key not in evidence.effective.values:
            return Finding(flag, False, f"{key} is not in the effective configuration: the engine did not take "
                                        "the flag")
        got = evidence.effective.values[key]
        if not values_equal(got, value):
            return Finding(flag, False, f"{key} = {got!r}, not the requested {value!r}")
        return Finding(flag, None, f"{key} = {got!r} (read back; no behavioural evidence for this flag)")

    def compared_keys(self, cfg: EffectiveConfig) -> dict[str, Any]:
        """The part of the effective configuration that says what the engine *does* (not how it was asked):
        two launches with equal compared keys run the same configuration."""
        return {k: v for k, v in cfg.values.items() if not k.startswith("args.")}


def values_equal(got: Any, want: Any) -> bool:
    """Compare a read-back value with a requested one across spellings (4 vs '4', True vs 'True', JSON)."""
    if isinstance(want, bool) or isinstance(got, bool):
        return str(got).lower() == str(want).lower()
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        try:
            return float(got) == float(want)
        except (TypeError, ValueError):
            return False
    if isinstance(want, (dict, list)):
        if isinstance(got, str):
            try:
                got = json.loads(got)
            except ValueError:
                return False
        return _norm(got) == _norm(want)
    return str(got) == str(want)


def _norm(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _norm(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return v
