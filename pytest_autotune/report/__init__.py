"""Reports: terminal summary table and the JSON report (DESIGN §6)."""
