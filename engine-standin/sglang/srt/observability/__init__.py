"""Prometheus metrics, as SGLang's sglang/srt/observability/ serves them."""
