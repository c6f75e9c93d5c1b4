"""Reading the model's config.json, failing the way transformers' AutoConfig does.

SGLang loads the Hugging Face config in the launching process before it starts any
subprocess, so a wrong --model-path ends the start-up at once with an OSError traceback and
exit status 1. The stand-in never downloads: a Hub repo id fails as it would offline.
"""

from __future__ import annotations

import json
import logging
import os
import re

logger = logging.getLogger(__name__)

# What huggingface_hub accepts as a repo id ("name" or "namespace/name").
_REPO_ID = re.compile(r"^[\w][\w.-]{0,95}(/[\w][\w.-]{0,95})?$")


def get_config(model_path: str) -> dict:
    """The parsed config.json of a local model directory; OSError otherwise."""
    if os.path.isdir(model_path):
        config_file = os.path.join(model_path, "config.json")
        if not os.path.isfile(config_file):
            raise OSError(
                f"{model_path} does not appear to have a file named config.json. Checkout "
                f"'https://huggingface.co/{model_path}/tree/None' for available files."
            )
        try:
            with open(config_file, encoding="utf-8") as f:
                config = json.load(f)
        except (ValueError, UnicodeDecodeError):
            raise OSError(f"It looks like the config file at '{config_file}' is not a valid JSON file.")
        if not isinstance(config, dict):
            raise OSError(f"It looks like the config file at '{config_file}' is not a valid JSON file.")
        return config
    if _REPO_ID.match(model_path) and ".." not in model_path:
        # A Hub repo id: the stand-in has no network, like a node with HF_HUB_OFFLINE=1.
        raise OSError(
            "We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find "
            "them in the cached files.\nCheck your internet connection or see how to run the library "
            "in offline mode at 'https://huggingface.co/docs/transformers/installation#offline-mode'."
        )
    raise OSError(
        f"Incorrect path_or_model_id: '{model_path}'. Please provide either the path to a local "
        "folder or the repo_id of a model on the Hub."
    )


CONTEXT_LENGTH_KEYS = [
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
]


def get_context_length(config: dict) -> int:
    """The context length a config derives, as SGLang computes it (rope scaling included)."""
    text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    rope_scaling = text_config.get("rope_scaling")
    factor = 1
    if isinstance(rope_scaling, dict) and rope_scaling:
        factor = rope_scaling.get("factor", 1)
        if "original_max_position_embeddings" in rope_scaling or rope_scaling.get("rope_type") == "llama3":
            factor = 1
    for key in CONTEXT_LENGTH_KEYS:
        value = text_config.get(key)
        if value is not None:
            return int(factor * value)
    return 2048


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "y", "on")


def derive_context_length(config: dict, context_length) -> int:
    """--context-length if given, else the config's.

    Like SGLang 0.5.23, a --context-length above the derived one is refused with a
    ValueError unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (or SGLANG_IS_IN_CI) is
    set; then it is only a warning.
    """
    derived = get_context_length(config)
    if context_length is None:
        return derived
    if context_length > derived:
        msg = (
            f"Warning: User-specified context_length ({context_length}) is greater than the derived "
            f"context_length ({derived}). This may lead to incorrect model outputs or CUDA errors. "
            "Note that the derived context_length may differ from max_position_embeddings in the "
            "model's config."
        )
        if _env_flag("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN") or _env_flag("SGLANG_IS_IN_CI"):
            logger.warning(msg)
        else:
            raise ValueError(
                f"{msg} To allow overriding this maximum, set the env var "
                "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
            )
    return context_length
