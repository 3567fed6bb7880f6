"""Reports: terminal summary table and the JSON report (docs/report.md)."""
