"""Study tools built on recorded results (held-out transfer ratios today; preregistration, saturation,
re-measurement and anchoring are later issues)."""
