"""Treatment delivery: did the configuration's flags take effect in the launch that was measured?

A flag that an engine parses but ignores (on this hardware, with this model, for this traffic) makes a
configuration identical to the default; measuring it would report noise as a result, and a flag search would
"find" it. So every launch of a configuration is judged, per flag that differs from the default:

* the adapter's evidence (:meth:`EngineAdapter.findings`): ``False`` — evidence against (speculation on but zero
  drafts; ``--max-num-seqs 4`` but 16 running at once; the flag absent from the effective configuration) —
  refuses the item with "treatment not delivered";
* ``True`` — behavioural evidence that it ran; ``None`` — the value is read back but nothing shows its effect;
* and when no flag has behavioural evidence, the effective configurations of the two arms must differ where it
  matters (:meth:`EngineAdapter.compared_keys`): identical effective configurations are "treatment not
  delivered" too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .adapters.base import EngineAdapter, Finding, FlagSet, LaunchEvidence, values_equal


@dataclass(frozen=True)
class DeliveryVerdict:
    delivered: bool
    findings: tuple[Finding, ...]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"delivered": self.delivered, "reason": self.reason, "flags": [f.to_json() for f in self.findings]}


def changed_flags(default: FlagSet, config: FlagSet) -> dict[str, Any]:
    """Flags whose value in ``config`` differs from ``default`` (both already merged with the common flags)."""
    d, c = default.as_dict(), config.as_dict()
    return {k: v for k, v in c.items() if k not in d or not values_equal(d[k], v)}


def judge_delivery(adapter: EngineAdapter, default: FlagSet, config: FlagSet, default_evidence: LaunchEvidence,
                   config_evidence: LaunchEvidence) -> DeliveryVerdict:
    changed = changed_flags(default, config)
    raw_changed = tuple(config.raw) != tuple(default.raw)
    if not changed and not raw_changed:
        return DeliveryVerdict(False, (), "treatment not delivered: the configuration sets no flag that differs "
                                          "from the default's (identical arms)")
    findings = tuple(adapter.findings(k, v, config_evidence, default_evidence) for k, v in sorted(changed.items()))
    refused = [f for f in findings if f.delivered is False]
    if refused:
        why = "; ".join(f"--{f.flag}: {f.evidence}" for f in refused)
        return DeliveryVerdict(False, findings, f"treatment not delivered: {why}")
    if not any(f.delivered for f in findings):
        a = adapter.compared_keys(default_evidence.effective)
        b = adapter.compared_keys(config_evidence.effective)
        if a == b:
            return DeliveryVerdict(False, findings, "treatment not delivered: the engine's effective configuration "
                                                    "is identical to the default's and no metric shows the flags "
                                                    f"({', '.join('--' + k for k in sorted(changed)) or 'raw args'}) "
                                                    "at work")
    shown = [f for f in findings if f.delivered]
    quiet = [f for f in findings if f.delivered is None]
    text = "; ".join(f"--{f.flag}: {f.evidence}" for f in shown or findings)
    if shown and quiet:
        text += f" (and {', '.join('--' + f.flag for f in quiet)}: read back, no evidence of their own)"
    return DeliveryVerdict(True, findings, text)
