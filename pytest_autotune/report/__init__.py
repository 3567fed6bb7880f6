"""Reports: terminal summary table and the JSON report (docs/reference/report.md)."""
