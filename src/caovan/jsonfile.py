"""JSON files of caovan's commands: reading one with one clear error naming the file (and line) for every way it
can be wrong, checking where a record will be written before the run that makes it, and writing it whole."""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_json(path: Path, error: Callable[[str], Exception], *, shown: str | None = None) -> Any:
    """The parsed content of ``path``; ``error(message)`` is raised for an unreadable, non-UTF-8 or malformed file.

    ``shown`` is how the message names the file (default: the path as given).
    """
    shown = shown or str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{shown}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{shown}: not UTF-8 text (bad byte at offset {exc.start})") from None
    if not text.strip():
        raise error(f"{shown}: empty file, no JSON in it (cut short?)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # Some of json's messages end in "at" and leave the place to str(exc) ("Invalid control character at").
        problem = f"{exc.msg} line {exc.lineno} column {exc.colno}" if exc.msg.endswith(" at") else exc.msg
        # json reports an unclosed string where it starts; its closing quote could only be missing at the end.
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            problem += " (the file ends before its JSON does: cut short?)"
        raise error(f"{shown}:{exc.lineno}:{exc.colno}: malformed JSON: {problem}") from None
    except ValueError as exc:  # not JSONDecodeError (a subclass, caught above): an integer of over 4300 digits
        # its advice (sys.set_int_max_str_digits) is for a programmer, not for whoever passed the file
        raise error(f"{shown}: malformed JSON: {str(exc).split(';')[0]}") from None
    except RecursionError:  # json's decoder recurses per level: a file of "[[[[..." deeper than Python's stack
        raise error(f"{shown}: JSON nested deeper than Python's parser goes") from None


def output_path_problem(option: str, target: str | None) -> str | None:
    """What is wrong with ``option FILE`` as a place to write a record, found before a run of minutes that would
    end unable to write it (None: nothing, or no FILE given)."""
    if target is None:
        return None
    # Kept as given, not a Path: Path("") is ".", a folder that would pass for a place to write to.
    if not target:
        return f"{option} '': an empty file name"
    path = Path(target)
    if path.is_dir():
        return f"{option} {target}: a directory, not a file to write the record to"
    try:
        os.stat(path)
    except OSError as exc:
        # A symlink loop passes every check below (realpath does not fail on one) and the write would replace the
        # link with a plain file; a missing file is what most records start as.
        if exc.errno == errno.ELOOP:
            return f"{option} {target}: a loop of symbolic links (replace it with a file name or a working link)"
    # The record is written atomically: a temp file in the folder of the file (of its target, for a symlink), then
    # renamed over it. So what matters is whether that folder can be written into, not whether an existing file is
    # writable (a read-only file in a writable folder is replaced all the same).
    folder = Path(os.path.realpath(path)).parent
    for shown in dict.fromkeys((path.parent, folder)):  # a dangling symlink's target folder may be missing too
        if not shown.is_dir():
            # lexists: "does not exist" for a file in the way would send the user looking for the wrong thing
            what = f"{shown} is not a directory" if os.path.lexists(shown) else f"directory {shown} does not exist"
            return f"{option} {target}: {what}"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{option} {target}: cannot write into directory {folder} (permission denied)"
    try:  # os.access passes for root everywhere, and knows nothing of file systems that refuse new files (/sys)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=folder)
    except OSError as exc:
        return f"{option} {target}: cannot write into directory {folder}: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(probe)
    return None


def _current_umask() -> int:
    # os.umask can only be read by setting it; set it straight back.
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def write_text_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` via a temp file + os.replace, as if written in place: a symlink stays a
    symlink (its target gets the text) and the file keeps its mode (a new file: 0o666 less the
    umask), not mkstemp's 0600.
    """
    path = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_current_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Put the folder's entry for a renamed file on disk: until then a crash can bring back the old file."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a folder; the file's own data was synced before the rename
    finally:
        os.close(fd)


def write_record(target: str, text: str) -> str | None:
    """``text`` written atomically to a command's output file ``target``; why it could not be, or None.

    For a record written after a run (the disk filled up, the folder became read-only): the caller prints the
    reason as its one error line, after the table it already printed.
    """
    try:
        write_text_atomic(Path(target), text)
    except OSError as exc:
        return f"cannot write the record: {exc.strerror or exc} (the results are in the table above)"
    return None
