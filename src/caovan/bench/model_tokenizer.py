"""A tokenizer for a model folder served with dummy weights, so that ``vllm serve`` takes text prompts offline.

It is a Qwen-style byte-level BPE, built in place with the ``tokenizers`` library (a vLLM dependency): Qwen's
pre-tokenizer regex and byte-level alphabet, merges trained on the words of caovan benchmark's prompts (each of
them one token after a space), so any text encodes and decodes back exactly. A Qwen tokenizer has to be, as
transformers 5 gives a ``qwen3_next`` or ``qwen3_5`` folder its own byte-level BPE class whatever
``tokenizer_config.json`` names (a word-level vocabulary read by it encodes nothing), and Hugging Face's
Qwen3VLProcessor, which vLLM builds for a Qwen3.5 folder, accepts only a Qwen tokenizer.

The ids fill the model's vocabulary without holes: ``<|endoftext|>`` (end of text and padding), the trained
tokens, unused ``<|reserved_N|>`` tokens up to the config's vision tokens, then those at the config's ids
(Qwen3.5; ``<|image_pad|>`` … ``<|vision_end|>``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from caovan.bench.model_folders import (
    CONFIG_FILE_NAME,
    vision_special_tokens,
    write_architecture_config,
)

#: Qwen2's pre-tokenizer split (its ``tokenization_qwen2.PRETOKENIZE_REGEX``): words with their leading space,
#: single digits, punctuation runs, newlines.
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
END_OF_TEXT = "<|endoftext|>"
#: Words besides the benchmark's that the tests send.
EXTRA_WORDS = ("model", "token", "decode", "prefill", "caovan")
TRAINING_ROUNDS = 20


def _vocabulary_size(config: dict[str, Any]) -> int:
    return int(config.get("text_config", config)["vocab_size"])


def _train(size: int) -> dict[str, Any]:
    """The trained tokenizer as ``tokenizer.json`` data, at most ``size`` ids."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    from caovan.serving.benchmark import WORDS

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    text = " " + " ".join(dict.fromkeys([*WORDS, *EXTRA_WORDS]))
    trainer = trainers.BpeTrainer(
        vocab_size=size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([text] * TRAINING_ROUNDS, trainer)
    return json.loads(tokenizer.to_str())


def _special(token: str, token_id: int) -> dict[str, Any]:
    return {"id": token_id, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}  # fmt: skip


def write_tokenizer(directory: str | Path) -> Path:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` for the model in ``directory`` (its ``config.json``
    gives the vocabulary size and any vision tokens); returns the folder."""
    folder = Path(directory)
    config = json.loads((folder / CONFIG_FILE_NAME).read_text())
    size = _vocabulary_size(config)
    vision = vision_special_tokens(config)
    first_vision = min(vision.values(), default=size)
    if (
        sorted(vision.values()) != list(range(first_vision, first_vision + len(vision)))
        or first_vision + len(vision) != size
    ):
        raise ValueError(f"tokenizer: the vision tokens {vision} are not the last ids of the vocabulary ({size})")
    data = _train(first_vision)
    vocab = data["model"]["vocab"]
    if len(vocab) > first_vision:
        raise ValueError(f"tokenizer: vocab_size={size} leaves too few ids for the byte alphabet ({len(vocab)})")
    vocab.update({f"<|reserved_{i}|>": i for i in range(len(vocab), first_vision)})
    vocab.update(vision)
    data["added_tokens"] += [_special(token, token_id) for token, token_id in vision.items()]
    (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8")
    settings = {
        # Transformers 4 reads tokenizer.json through this class (and the Qwen3VLProcessor accepts it).
        "tokenizer_class": "Qwen2TokenizerFast",
        "eos_token": END_OF_TEXT,
        "pad_token": END_OF_TEXT,
        "unk_token": None,
        "model_max_length": 1 << 20,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    return folder


def write_architecture(name: str, directory: str | Path) -> Path:
    """Write ``config.json`` of a released architecture (:data:`ARCHITECTURES`) and a tokenizer into
    ``directory``, for serving with ``--load-format dummy``; returns the folder."""
    return write_tokenizer(write_architecture_config(name, directory))
