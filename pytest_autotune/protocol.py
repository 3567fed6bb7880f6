"""protocol.toml → a frozen, typed :class:`Protocol` with its sha256.

The loader is strict: an unknown key, a value of the wrong type or out of range is refused with an error that
names the key and the fix. Whether a protocol is *frozen* is decided by :mod:`pytest_autotune.protocol_registry`
(the digest pinned for its version), never by the file itself.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import hashlib
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Union

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .errors import ProtocolError
from .protocol_sections import (  # noqa: F401 - re-exported: the sections are part of this module's API
    AccuracySection,
    BandsSection,
    BarsSection,
    BreakerSection,
    BuildSection,
    ContractSection,
    CorrectnessSection,
    CpuSection,
    CudaSection,
    DevicesSection,
    EnginesSection,
    IntegritySection,
    KernelBenchSection,
    MemorySection,
    ProbesSection,
    ProtocolMeta,
    SandboxSection,
    SeedsSection,
    StatisticsSection,
    StudiesSection,
    SurfaceSection,
    TimingPlan,
    TimingSection,
    Tolerance,
    _f,  # noqa: F401
)

PACKAGED_PROTOCOL = Path(__file__).with_name("protocol.toml")

_FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Protocol:
    """The frozen measurement protocol. ``sha256`` is the digest of the file's exact bytes."""

    protocol: ProtocolMeta = _f()
    seeds: SeedsSection = _f()
    timing: TimingSection = _f()
    statistics: StatisticsSection = _f()
    correctness: CorrectnessSection = _f()
    tolerance: Mapping[str, Tolerance] = _f()
    breaker: BreakerSection = _f()
    probes: ProbesSection = _f()
    sandbox: SandboxSection = _f()
    integrity: IntegritySection = _f()
    devices: DevicesSection = _f()
    bars: BarsSection = _f()
    bands: BandsSection = _f()
    studies: StudiesSection = _f()
    surface: SurfaceSection = _f()
    engines: EnginesSection = _f()
    memory: MemorySection = _f(default=MemorySection())
    build: BuildSection = _f(default=BuildSection())
    accuracy: AccuracySection = _f(default=AccuracySection())
    contract: ContractSection = _f(default=ContractSection())
    kernelbench: KernelBenchSection = _f(default=KernelBenchSection())
    # not from the file:
    sha256: str = field(default="", compare=False)
    path: str = field(default="", compare=False)
    text: str = field(default="", compare=False, repr=False)

    @property
    def version(self) -> str:
        return self.protocol.version

    def tolerance_for(self, dtype_name: str) -> Tolerance | None:
        """Tolerance for a floating dtype name (``"float32"``); ``None`` for exact (integer/bool) dtypes."""
        return self.tolerance.get(dtype_name)

    def verify_rounds(self, device: str) -> int:
        """Timed rounds the timed-outputs gate checks against golden outputs on ``device``."""
        if device == "cpu" and self.devices.cpu.verify_rounds is not None:
            return self.devices.cpu.verify_rounds
        return self.integrity.verify_rounds

    def timing_plan(self, device: str) -> TimingPlan:
        t = self.timing
        plan = TimingPlan(order=t.order, warmup_calls=t.warmup_calls, calibration_calls=t.calibration_calls,
                          min_pairs=t.min_pairs, max_pairs=t.max_pairs, check_every=t.check_every,
                          min_sample_s=t.min_sample_s, max_calls_per_sample=t.max_calls_per_sample,
                          item_budget_s=t.item_budget_s, ci_target_rel_width=self.statistics.ci_target_rel_width,
                          process_pairs=t.process_pairs, k_recheck_ratio=t.k_recheck_ratio,
                          min_calls_per_sample=t.min_calls_per_sample,
                          sandbox_memory_bytes=self.sandbox.memory_mb << 20)
        if device == "cpu":
            cpu = self.devices.cpu
            plan = dataclasses.replace(plan, prints_per_group=cpu.prints_per_group,
                                       process_offset_sd=cpu.process_offset_sd,
                                       derive_spread=cpu.derived_spread if cpu.input_sets == "derived" else None)
        if device == "cuda":
            c = self.devices.cuda
            # CUDA samples hold milliseconds of GPU time and a call's first run is one of many: [timing]'s fewest
            # calls a sample does not apply there (its own sections set its sample)
            plan = dataclasses.replace(plan, min_sample_s=c.min_sample_s, max_calls_per_sample=c.max_calls_per_sample,
                                       min_calls_per_sample=1,
                                       item_budget_s=c.item_budget_s, ci_target_rel_width=c.ci_target_rel_width,
                                       process_pairs=c.process_pairs or t.process_pairs,
                                       fast_arm_sample_s=c.fast_arm_sample_s, max_speedup=self.breaker.max_speedup)
        return plan


# ---------------------------------------------------------------------------------------------- loading


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_protocol(path: str | Path) -> Protocol:
    """Read and validate a protocol file. Raises :class:`ProtocolError` naming the key and the fix."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ProtocolError(f"cannot read protocol file {p}: {e.strerror}; check the path or permissions") from e
    return parse_protocol(raw, source=str(p))


def parse_protocol(raw: bytes, source: str = "protocol.toml") -> Protocol:
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ProtocolError(f"{source} is not valid TOML: {e}; fix the syntax at the position given") from e
    values = _build(Protocol, data, source, prefix="", skip=("sha256", "path", "text"))
    proto = Protocol(**values, sha256=sha256_bytes(raw), path=source, text=text)
    _cross_checks(proto, source)
    return proto


def _cross_checks(proto: Protocol, source: str) -> None:
    if 0.0 < proto.timing.k_recheck_ratio <= 1.0:
        raise ProtocolError(
            f"{source}: [timing].k_recheck_ratio = {proto.timing.k_recheck_ratio:g} would find every k wrong and "
            "re-plan every item, then refuse it: use 0 (k never re-checked) or a ratio above 1, e.g. 2.0")
    if proto.timing.max_pairs < proto.timing.min_pairs:
        raise ProtocolError(
            f"{source}: [timing].max_pairs ({proto.timing.max_pairs}) is below [timing].min_pairs "
            f"({proto.timing.min_pairs}); raise max_pairs or lower min_pairs"
        )
    if "float32" not in proto.tolerance:
        raise ProtocolError(f"{source}: [tolerance.float32] is missing; add it with rtol and atol")
    e = proto.engines
    if e.launch_pairs * e.windows_per_launch < proto.timing.min_pairs:
        raise ProtocolError(
            f"{source}: [engines].launch_pairs x windows_per_launch ({e.launch_pairs} x {e.windows_per_launch}) is "
            f"below [timing].min_pairs ({proto.timing.min_pairs}): the database would refuse every engine result; "
            "raise windows_per_launch or launch_pairs"
        )
    if not proto.bars.fast_p_thresholds:
        raise ProtocolError(f"{source}: [bars].fast_p_thresholds is empty; list at least one threshold, e.g. [1.0]")


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp))


def _build(cls, data: Any, source: str, prefix: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    where = f"[{prefix}]" if prefix else "the top level"
    if not isinstance(data, dict):
        raise ProtocolError(f"{source}: {where} must be a table; write it as [{prefix}] with keys under it")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
        raise ProtocolError(
            f"{source}: unknown key '{key}' in {where}; remove it or fix its spelling "
            f"(known: {', '.join(sorted(fields))})"
        )
    out: dict[str, Any] = {}
    for name, f in fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if name not in data:
            if f.default is not dataclasses.MISSING:
                # an optional key added by a later protocol version: older files keep their meaning
                out[name] = f.default
                continue
            raise ProtocolError(f"{source}: missing key '{key}'; add it (see docs/reference/protocol.md)")
        out[name] = _convert(hints[name], data[name], source, key, f.metadata.get("rule", {}))
    return out


def _convert(tp, value: Any, source: str, key: str, rule: dict) -> Any:
    origin = typing.get_origin(tp)
    if origin is Union:  # Optional[X]: TOML has no null, so a value present is an X
        (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
        origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp(**_build(tp, value, source, key))
    if origin in (collections.abc.Mapping, dict):
        if not isinstance(value, dict):
            raise ProtocolError(f"{source}: '{key}' must be a table of [{key}.<name>] sections")
        _, vt = typing.get_args(tp)
        result = {}
        for k, v in value.items():
            if key == "tolerance" and k not in _FLOAT_DTYPES:
                raise ProtocolError(
                    f"{source}: unknown dtype '{key}.{k}'; use one of {', '.join(_FLOAT_DTYPES)}"
                )
            result[k] = _convert(vt, v, source, f"{key}.{k}", {})
        return types.MappingProxyType(result)
    if origin is tuple:
        (et, *_rest) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ProtocolError(f"{source}: '{key}' must be an array, got {type(value).__name__}; write [ ... ]")
        return tuple(_convert(et, v, source, f"{key}[{i}]", {}) for i, v in enumerate(value))
    # scalars
    if tp is bool:
        if not isinstance(value, bool):
            raise ProtocolError(f"{source}: '{key}' must be true or false, got {value!r}")
    elif tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError(f"{source}: '{key}' must be an integer, got {value!r} ({type(value).__name__})")
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(f"{source}: '{key}' must be a number, got {value!r} ({type(value).__name__})")
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise ProtocolError(f"{source}: '{key}' must be a finite number, got {value!r}")
    elif tp is str:
        if not isinstance(value, str) or not value:
            raise ProtocolError(f"{source}: '{key}' must be a non-empty string, got {value!r}")
    else:  # pragma: no cover - schema bug
        raise TypeError(f"unsupported protocol field type {_type_name(tp)}")
    ge, gt, le, choices = rule.get("ge"), rule.get("gt"), rule.get("le"), rule.get("choices")
    if choices is not None and value not in choices:
        raise ProtocolError(f"{source}: '{key}' = {value!r} is not supported; use one of {', '.join(choices)}")
    if ge is not None and value < ge:
        raise ProtocolError(f"{source}: '{key}' = {value!r} must be >= {ge}; set a value of at least {ge}")
    if gt is not None and value <= gt:
        raise ProtocolError(f"{source}: '{key}' = {value!r} must be > {gt}; set a larger value")
    if le is not None and value > le:
        raise ProtocolError(f"{source}: '{key}' = {value!r} must be <= {le}; set a value of at most {le}")
    return value


def find_protocol(rootdir: str | Path | None) -> Path:
    """The rootdir's protocol.toml if it has one, else the copy shipped in the package."""
    if rootdir is not None:
        candidate = Path(rootdir) / "protocol.toml"
        if candidate.is_file():
            return candidate
    return PACKAGED_PROTOCOL
