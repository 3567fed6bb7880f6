"""The prompts of the LLM tuner (docs/guide/llm-tuner.md shows them in full): a system message that says what a candidate is
and what is refused, and a user message with the problem's source, the frozen baselines to beat and every earlier
iteration's outcome. One chat completion per iteration: the history travels in the prompt, not as a conversation,
so each call's request is complete in its log line.

The system messages carry :data:`MARKER`: an arm's registry entry can name it (``markers``) so the treatment
delivery check sees that every call of the arm was this tuner's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from .history import IterationOutcome, best

MARKER = "autotune-llm-tuner/1"

KERNEL_SYSTEM = """\
You write PyTorch kernels for pytest-autotune ({marker}).

A candidate is one Python module that defines `class ModelNew(torch.nn.Module)`: a drop-in replacement for the \
problem's `class Model`, with the same constructor arguments, whose `forward` returns the same outputs for the \
inputs `get_inputs()` makes. Before anything is timed, pytest-autotune runs it in a sandbox and compares its \
outputs with golden outputs it computed itself on fresh random inputs (within the protocol's tolerances), then \
tries adversarial probes (other values, shapes and memory layouts). Then it times the candidate, in alternating \
rounds on the same inputs, against the strongest frozen baseline: the fastest of the reference `Model` and the \
declared baselines. The result is a speedup with a 95% confidence interval.

{forms} Compiled code is built once per candidate, before \
correctness, in a sandbox of its own: call `load_inline` (or `load`) while the module is imported, the model is \
built or it first runs, with the same arguments in every process. A candidate that does not build is refused with \
the compiler's first error (the build gate), and the next prompt shows the compiler's output; no compiler runs \
after the build.

Refused, however fast: outputs that are wrong or computed at a lower precision; returning an input, or a cached \
or precomputed answer; writing to the inputs; work still running after `forward` returns (threads, streams); \
touching timers, the harness, files or the network; patching torch. A speedup above 10x is quarantined until a \
human has looked at it.

Reply with one fenced code block (```python ... ```) that holds the whole module, imports included; a short \
explanation before it is fine. The reply is cut off at {max_tokens} tokens, and a reply that is cut off is not \
measured."""

ENGINE_SYSTEM = """\
You tune the flags of a serving engine for pytest-autotune ({marker}).

A configuration is a set of flags chosen from the declared flag space below; every flag you do not set keeps the \
engine's default. pytest-autotune launches the engine with your configuration and with its default, in \
alternating launches that serve the same seeded requests of the workload, and reports the speedup (time per \
request of the default / of your configuration) with a 95% confidence interval. Before any timing counts, a \
quality gate checks that greedy answers agree with the default's, and treatment delivery checks that your flags \
show in the engine's effective configuration or metrics. A configuration that does not start is refused.

Reply with one fenced JSON block (```json ... ```) holding one object that maps flag names (without dashes) to \
values, each one of that flag's listed choices. A flag outside the space, or a value that is not listed, is not \
measured. The reply is cut off at {max_tokens} tokens, and a reply that is cut off is not measured."""


#: the forms a candidate may take, by the device the item is measured on
FORMS = {
    "cpu": "On the cpu a candidate may be plain PyTorch, or C++ compiled through "
           "`torch.utils.cpp_extension.load_inline` (`cpp_sources`; CPU code, e.g. `extra_cflags=[\"-O3\"]`).",
    "cuda": "On cuda a candidate may be plain PyTorch, CUDA C++ compiled through "
            "`torch.utils.cpp_extension.load_inline` (`cuda_sources`, with `cpp_sources` declaring the functions it "
            "binds), or Triton kernels (`@triton.jit`, launched from `forward`).",
}


def forms(device: str) -> str:
    return FORMS.get(device, f"On {device} a candidate is plain PyTorch; nothing is compiled.")


def _history(history: Sequence[IterationOutcome], lang: str) -> str:
    if not history:
        return "None yet: this is the first iteration."
    lines = [f"- {h.describe()}{h.compiler_output()}" for h in history]
    b = best(history)
    if b is not None:
        lines.append("")
        lines.append(f"Best so far: iteration {b.iteration}, {b.speedup:.3f}x. Its {'code' if lang == 'python' else 'flags'}:")
        lines.append(f"```{lang}\n{(b.artifact or '').rstrip()}\n```")
    else:
        lines.append("")
        lines.append("No iteration has been accepted yet.")
    return "\n".join(lines)


def _now(history: Sequence[IterationOutcome], iteration: int, position: int, budget: int, what: str,
         baseline: str) -> str:
    b = best(history)
    target = f"the best so far ({b.speedup:.3f}x, iteration {b.iteration})" if b is not None else baseline
    return (f"This is iteration {iteration} (call {position} of {budget} in this search). {what} that is faster "
            f"than {target}.")


def kernel_messages(*, problem: Path, problem_rel: str, device: str, baselines: Sequence[tuple[str, str, str]],
                    history: Sequence[IterationOutcome], iteration: int, position: int, budget: int,
                    max_tokens: int) -> list[dict[str, str]]:
    """``baselines``: (name, path as shown, source) of each declared frozen baseline."""
    source = problem.read_text(encoding="utf-8")
    parts = [f"# Problem `{problem.stem}` ({problem_rel}), measured on the {device}",
             f"```python\n{source.rstrip()}\n```", "", "# The frozen baselines to beat",
             "- `reference`: the problem's `Model` above"]
    for name, rel, text in baselines:
        parts.append(f"- `{name}` ({rel}):\n```python\n{text.rstrip()}\n```")
    parts += ["The harness times each candidate against the fastest of these on this device and names it in the "
              "outcome.", "", "# Your earlier iterations on this problem", _history(history, "python"), "",
              "# Now", _now(history, iteration, position, budget, "Write a correct `ModelNew`",
                                    "the strongest frozen baseline")]
    return [{"role": "system", "content": KERNEL_SYSTEM.format(marker=MARKER, max_tokens=max_tokens,
                                                               forms=forms(device))},
            {"role": "user", "content": "\n".join(parts)}]


def engine_messages(*, engine: str, description: str, server_flags: Mapping[str, Any], workload: Mapping[str, Any],
                    space: Mapping[str, Sequence[Any]], history: Sequence[IterationOutcome], iteration: int,
                    position: int, budget: int, max_tokens: int,
                    default_note: Optional[str] = None) -> list[dict[str, str]]:
    parts = [f"# Engine `{engine}`" + (f": {description}" if description else ""),
             f"Both arms (the default and your configuration) run with these flags: "
             f"{json.dumps(dict(server_flags), sort_keys=True)}", "",
             f"# Workload `{workload.get('name', '?')}`",
             f"```json\n{json.dumps(dict(workload), sort_keys=True)}\n```", "",
             "# The declared flag space (flag: its choices)",
             "```json\n{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(list(v))}" for k, v in space.items())
             + "\n}\n```"]
    if default_note:
        parts.append(default_note)
    parts += ["", "# Your earlier iterations", _history(history, "json"), "", "# Now",
              _now(history, iteration, position, budget, "Choose a configuration", "the engine's default")]
    return [{"role": "system", "content": ENGINE_SYSTEM.format(marker=MARKER, max_tokens=max_tokens)},
            {"role": "user", "content": "\n".join(parts)}]
