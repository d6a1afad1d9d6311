"""A word-level tokenizer for the tiny model folders, so ``vllm serve`` can take text prompts with no network.

The serve tier's engines run with ``skip_tokenizer_init`` and token-id prompts; an OpenAI-API server needs a
tokenizer for the text prompts ``caovan warmup`` and ``caovan benchmark`` send.  This one is built in place with
the ``tokenizers`` library (a vLLM dependency): whitespace-split words, ``w0 … wN`` plus the words of
:data:`KNOWN_WORDS`, everything else ``[UNK]``, written as ``tokenizer.json`` + ``tokenizer_config.json`` that
``transformers.AutoTokenizer`` (and so vLLM) loads as a ``PreTrainedTokenizerFast``.
"""

from __future__ import annotations

import json
from pathlib import Path

UNK, EOS = "[UNK]", "[EOS]"
#: Words given their own ids (the rest of the vocabulary is ``w0``, ``w1``, …).
KNOWN_WORDS = ("the", "a", "of", "and", "to", "in", "is", "model", "token", "decode", "prefill", "caovan")


def write_word_tokenizer(directory: str | Path, vocab_size: int) -> Path:
    """Write the tokenizer files into ``directory`` (the model folder); ids stay below ``vocab_size``."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = [UNK, EOS]
    if vocab_size < len(specials) + len(KNOWN_WORDS):
        raise ValueError(f"tiny tokenizer: vocab_size={vocab_size} is smaller than its fixed words")
    words = [*specials, *KNOWN_WORDS]
    words += [f"w{i}" for i in range(vocab_size - len(words))]
    tokenizer = Tokenizer(models.WordLevel(vocab={word: i for i, word in enumerate(words)}, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": UNK,
        "eos_token": EOS,
        "model_max_length": 1 << 20,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return folder
