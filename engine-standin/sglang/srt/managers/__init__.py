"""Subprocesses: schedulers (one per TP rank) and the detokenizer."""
