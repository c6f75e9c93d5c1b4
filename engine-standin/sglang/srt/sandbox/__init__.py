"""Parts that exist only in the stand-in: knobs, failure injection, process titles,
NCCL confirmation lines, the opt-in real NCCL check and the token generator."""
