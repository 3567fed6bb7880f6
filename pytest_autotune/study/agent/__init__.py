"""The LLM tuner (``autotune search --tuner=llm``, docs/guide/llm-tuner.md): an adaptive loop in which a model behind any
OpenAI-compatible endpoint writes each candidate (kernel code, or an engine flag set), every call is logged for
the plumbing audit, and every iteration -- usable or not -- is measured and recorded through the same gates, store
and verdicts as any other arm's."""
