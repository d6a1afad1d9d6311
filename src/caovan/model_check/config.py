"""Reading a model folder's ``config.json``: finding the folder, parsing the JSON, typed access to its fields.

Every problem is a :class:`ModelCheckError` whose one-line message names the file and the field or position, so
``caovan check-model`` and ``caovan serve`` refuse a bad folder with the same words.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CONFIG_FILE_NAME = "config.json"


class ModelCheckError(Exception):
    """The model folder or its config cannot be read or is malformed (exit code 2).

    The message is one line naming the file and the field or position.
    """


def read_json_file(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise ModelCheckError(f"{path} is a folder, not a JSON file") from None
    except OSError as error:
        raise ModelCheckError(f"cannot read {path}: {error.strerror or error}") from None
    return parse_json_bytes(raw, str(path))


def parse_json_bytes(raw: bytes, where: str) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ModelCheckError(f"{where}: not UTF-8 text (bad byte at offset {error.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ModelCheckError(
            f"{where}: invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None


#: How a local path starts: vLLM and Hugging Face never read such a name as a repository id.
LOCAL_PATH_PREFIXES = ("/", "./", "../", "~")


def is_local_path(model: str) -> bool:
    """Whether ``model`` names a local path (a folder, never a Hugging Face name): it starts like one or exists."""
    return model in (".", "..") or model.startswith(LOCAL_PATH_PREFIXES) or Path(model).exists()


def find_model_folder(model: str, revision: str | None = None) -> Path | None:
    """A local folder holding ``model``'s ``config.json``: the path itself (as vLLM will read it: no ``~``
    expansion), or the Hugging Face cache snapshot of ``model`` at ``revision`` (the default branch when None)."""
    path = Path(model)
    if path.is_dir():
        return path
    if is_local_path(model):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        cached = try_to_load_from_cache(repo_id=model, filename=CONFIG_FILE_NAME, revision=revision)
    except Exception:  # a name that is not a valid repo id: nothing cached under it
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def model_folder(model: str, revision: str | None = None) -> Path | None:
    """The folder ``model`` is read from, as ``caovan check-model`` and ``caovan serve`` both judge it.

    A local path must be a folder holding a readable ``config.json``: a :class:`ModelCheckError` names the path and
    what is wrong otherwise (vLLM could not load it either).  A Hugging Face name gives its cached snapshot, or None
    when its ``config.json`` is not in the cache.
    """
    if not is_local_path(model):
        return find_model_folder(model, revision)
    if model.startswith("~") and not Path(model).exists():
        raise ModelCheckError(f"model folder not found: {model} (vLLM does not expand ~: give the path without it)")
    load_config(model)
    return Path(model)


def load_config(model_dir: str | Path) -> tuple[Path, dict[str, Any]]:
    """Return (path of config.json, its top-level object); ModelCheckError on any problem."""
    folder = Path(model_dir)
    # Named as the user wrote it (Path drops a leading "./").
    if not folder.exists():
        raise ModelCheckError(f"model folder not found: {model_dir}")
    if not folder.is_dir():
        raise ModelCheckError(f"not a folder: {model_dir} (give the model folder holding config.json)")
    config_path = folder / CONFIG_FILE_NAME
    if config_path.is_symlink() and not config_path.exists():
        # exists() follows the link: a dangling one would otherwise read as a missing file
        raise ModelCheckError(f"{config_path}: a broken link to {os.readlink(config_path)}")
    if not config_path.exists():
        raise ModelCheckError(f"no {CONFIG_FILE_NAME} in {model_dir}")
    config = read_json_file(config_path)
    if not isinstance(config, dict):
        raise ModelCheckError(f"{config_path}: top level must be a JSON object, got {json_type_name(config)}")
    return config_path, config


def json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class Fields:
    """Typed access to one JSON object of the config; a wrong type is a ModelCheckError that names
    the file and the field path. JSON null counts as absent (transformers treats None as unset)."""

    def __init__(self, mapping: dict[str, Any], prefix: str, config_path: Path):
        self.mapping = mapping
        self.prefix = prefix
        self.config_path = config_path

    def where(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def has(self, key: str) -> bool:
        return self.mapping.get(key) is not None

    def _bad(self, key: str, expected: str) -> ModelCheckError:
        value = self.mapping[key]
        shown = json.dumps(value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        return ModelCheckError(
            f"{self.config_path}: {self.where(key)} must be {expected}, got {shown} ({json_type_name(value)})"
        )

    def get_int(self, key: str, *, minimum: int) -> int | None:
        value = self.mapping.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            expected = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self._bad(key, expected)
        return value

    def get_str(self, key: str) -> str | None:
        value = self.mapping.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._bad(key, "a string")
        return value

    def get_str_list(self, key: str) -> list[str] | None:
        value = self.mapping.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._bad(key, "an array of strings")
        return value

    def get_obj(self, key: str) -> dict[str, Any] | None:
        value = self.mapping.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._bad(key, "a JSON object")
        return value
