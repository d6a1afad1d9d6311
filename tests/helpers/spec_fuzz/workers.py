"""A fuzz run split over worker processes (``--workers N``): each runs its own index range of the same seed
(``--start`` / ``--cases``) into its own record and log, the parent shows their progress and joins the records with
``merge``. The records and logs stay in ``<out>.parts/``, so a worker's failure lines can be read in full.

Why processes: the interpreter runs one case on one core, and on a GPU most of a case is Python (the oracle's loop,
Triton's launches), so one process per core is what makes 10,000 cases fit in one call.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from .merge import MergeError, merge_records

#: Seconds between progress lines.
POLL_S = 30.0


def split_range(start: int, count: int, workers: int) -> list[tuple[int, int]]:
    """(first index, cases) of each worker: consecutive ranges covering ``start .. start + count - 1``, sizes
    differing by at most one, none empty."""
    if count < 1 or workers < 1:
        raise ValueError(f"need at least one case and one worker, got {count} cases and {workers} workers")
    workers = min(workers, count)
    size, extra = divmod(count, workers)
    ranges, first = [], start
    for i in range(workers):
        n = size + (i < extra)
        ranges.append((first, n))
        first += n
    return ranges


def _cases_done(part: Path) -> int:
    """Cases a worker's record counts so far (it rewrites the record every few cases); 0 before its first write."""
    try:
        return json.loads(part.read_text()).get("summary", {}).get("cases", 0)
    except (OSError, ValueError):
        return 0  # not written yet, or being replaced


def run_workers(
    script: Path,
    worker_args: list[str],
    *,
    seed: int,
    start: int,
    count: int,
    workers: int,
    out: Path,
    poll_s: float = POLL_S,
) -> tuple[dict | None, int]:
    """Run ``script`` once per range of ``split_range``, each with ``worker_args`` plus its range, the seed and its
    own ``--out``. Returns (the joined record, exit status): status 1 when a case failed, 2 when a worker died
    (no joined record then: its log is printed)."""
    parts_dir = out.with_name(out.name + ".parts")
    parts_dir.mkdir(parents=True, exist_ok=True)
    running = []
    for i, (first, n) in enumerate(split_range(start, count, workers)):
        part, log = parts_dir / f"part-{i}.json", parts_dir / f"part-{i}.log"
        part.unlink(missing_ok=True)  # a record left by an earlier run must not count as this one's
        cmd = [sys.executable, str(script), *worker_args]
        cmd += ["--seed", str(seed), "--start", str(first), "--cases", str(n), "--out", str(part)]
        with log.open("w") as sink:
            running.append((subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT), part, log))
    print(f"{len(running)} workers, records and logs in {parts_dir}", flush=True)
    t0 = last = time.perf_counter()
    while any(proc.poll() is None for proc, _, _ in running):
        time.sleep(min(1.0, poll_s))
        if time.perf_counter() - last >= poll_s:
            last = time.perf_counter()
            done = sum(_cases_done(part) for _, part, _ in running)
            print(f"{done}/{count} cases, {last - t0:.0f} s", flush=True)
    died = [(proc.returncode, log) for proc, _, log in running if proc.returncode not in (0, 1)]
    for _, _, log in running:
        for line in log.read_text().splitlines():
            if line.startswith(("FAIL", "  replay", "  shrunk")):
                print(line)
    if died:
        for rc, log in died:
            tail = "\n".join(log.read_text().splitlines()[-20:])
            print(f"worker {log.stem} exited {rc}; the end of {log}:\n{tail}", file=sys.stderr)
        return None, 2
    try:
        records = [(part.name, json.loads(part.read_text())) for _, part, _ in running]
        skipped = next((record for _, record in records if "skip" in record), None)
        if skipped is not None:  # nothing of caovan's runs on this release: every worker says so
            return skipped, 0
        record = merge_records(records)
    except (OSError, ValueError, MergeError) as exc:
        print(f"the workers' records do not join: {exc}", file=sys.stderr)
        return None, 2
    record["wall_s"] = round(time.perf_counter() - t0, 1)
    return record, 1 if record["summary"]["failed"] else 0
