"""``autotune audit CALLS.jsonl``: the plumbing audit of model-call logs (docs/guide/studies.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .common import protocol_of, root_arg
from .registry import EXIT_OK, EXIT_PROBLEMS, command


def _run(args: argparse.Namespace) -> int:
    from ..study.audit import audit_file

    protocol = protocol_of(args)
    flagged = False
    out = []
    for path in args.logs:
        rep = audit_file(path, protocol.studies)
        print(rep.render())
        flagged = flagged or rep.flagged
        out.append(rep.to_json())
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"schema": "pytest-autotune/audit/1", "protocol": protocol.version,
                                         "logs": out}, indent=2) + "\n")
    return EXIT_PROBLEMS if flagged else EXIT_OK


@command
def _audit(sub) -> None:
    p = sub.add_parser(
        "audit", help="plumbing audit of model-call logs: truncation, one token ceiling, errors, timeouts",
        description="Reads JSON-lines logs of OpenAI chat-completion calls (responses, or {request, response, "
                    "error, status, latency_s, arm} records). Exit 0 when every rate is within the protocol's "
                    "[studies] thresholds, 1 when a log is flagged (plumbing suspect), 2 on usage errors.")
    p.add_argument("logs", nargs="+", type=Path, metavar="CALLS.jsonl")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the audit as JSON")
    root_arg(p)
    p.set_defaults(func=_run)
