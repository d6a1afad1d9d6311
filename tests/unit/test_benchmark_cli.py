"""``caovan benchmark`` and caovan.serving.benchmark: prompts, statistics, the record, --compare; against a fake server.

These check logic (counts, settings, percentiles on known numbers), never speed.
"""

from __future__ import annotations

import argparse
import json
import socket

import pytest

from caovan.cli import benchmark
from caovan.serving import benchmark as sb
from caovan.serving import client as sc
from caovan.serving import errors as se
from caovan.serving.protocol import Completion


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="caovan benchmark")
    benchmark.add_arguments(parser)
    return benchmark.run(parser.parse_args(argv))


pytestmark = pytest.mark.usefixtures("no_api_key_env")


SMALL = ["--max-tokens", "5", "--requests", "3", "--repeats", "2"]


def _bench(fake, tmp_path, name="r.json", extra=()) -> tuple[int, dict | None]:
    out = tmp_path / name
    rc = _run(["--api-base", fake.url, *SMALL, "--output", str(out), *extra])
    return rc, (json.loads(out.read_text()) if out.exists() else None)


# --- module, options -------------------------------------------------------------------------------------------------


def test_module_contract_and_defaults():
    assert (benchmark.NAME, benchmark.ALIAS) == ("benchmark", "caovan-sm75-benchmark")
    assert "caovan bench" in benchmark.HELP  # tells the two apart
    parser = argparse.ArgumentParser()
    benchmark.add_arguments(parser)
    args = parser.parse_args([])
    assert (args.max_tokens, args.repeats, args.requests, args.concurrency) == (768, 2, 8, 1)
    assert args.warmup_requests is None  # as many as --concurrency
    assert (args.load, args.output, args.compare, args.label, args.api_base) == (
        "decode-heavy", None, None, None, "http://127.0.0.1:8000",
    )  # fmt: skip
    args = parser.parse_args(["--model", "M", "--max-tokens", "768", "--repeats", "2", "--output", "result.json"])
    assert (args.model, args.max_tokens, args.repeats, args.output) == ("M", 768, 2, "result.json")


# --- prompts -----------------------------------------------------------------------------------------------------


def test_prompts_are_deterministic_distinct_and_sized_per_load():
    kwargs = {"max_tokens": 7, "requests": 6, "repeats": 2, "warmup_requests": 1}
    planned = sb.plan(list(sb.LOADS), **kwargs)
    assert sb.prompt_set_sha256(planned) == sb.prompt_set_sha256(sb.plan(list(sb.LOADS), **kwargs))
    assert sb.prompt_set_sha256(planned) != sb.prompt_set_sha256(sb.plan(list(sb.LOADS), **{**kwargs, "max_tokens": 8}))
    assert list(planned["mixed"]) == ["warmup", "repeat-1", "repeat-2"]
    every = [p.prompt for by_phase in planned.values() for reqs in by_phase.values() for p in reqs]
    assert len(every) == 3 * (1 + 2 * 6) and len(set(every)) == len(every)  # no prompt twice: no prefix-cache hit
    assert all(p.max_tokens == 1 for reqs in planned["prefill-heavy"].values() for p in reqs)
    assert all(p.max_tokens == 7 for reqs in planned["decode-heavy"].values() for p in reqs)
    assert len(planned["decode-heavy"]["repeat-1"][0].prompt.split()) < 16
    assert PREFILL_RANGE[0] < len(planned["prefill-heavy"]["repeat-1"][0].prompt.split()) < PREFILL_RANGE[1]
    mixed = [len(p.prompt.split()) for p in planned["mixed"]["repeat-1"]]
    assert [n - mixed[0] for n in mixed] == [n - sb.MIXED_WORDS[0] for n in sb.MIXED_WORDS]  # 50 … 800 words
    # fixed text, not just fixed within a process: the first decode-heavy prompt of the first repeat
    assert sb.prompt("decode-heavy", "repeat-1", 0) == (
        "[decode-heavy repeat-1 1] Write a long story about the friend and the river."
    )


PREFILL_RANGE = (2000, 2030)


# --- statistics ------------------------------------------------------------------------------------------------------


def test_percentile_by_linear_interpolation():
    assert sb.percentile([4, 1, 3, 2], 50) == 2.5
    assert sb.percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)
    assert sb.percentile([1, 2, 3, 4], 0) == 1 and sb.percentile([1, 2, 3, 4], 100) == 4
    assert sb.percentile([5.0], 95) == 5.0
    assert sb.percentile([], 50) is None
    assert sb.percentile(list(range(1, 21)), 95) == pytest.approx(19.05)


def test_repeat_stats_on_known_numbers():
    outcomes = [
        Completion(prompt_tokens=10, completion_tokens=10, latency_s=1.0, ttft_s=0.1),
        se.RequestFailed("HTTP 500: boom"),
        Completion(prompt_tokens=20, completion_tokens=10, latency_s=2.0, ttft_s=0.2),
        Completion(prompt_tokens=30, completion_tokens=1, latency_s=3.0, ttft_s=0.3),
    ]
    stats = sb.repeat_stats(outcomes, wall_s=2.0)
    assert (stats["requests"], stats["ok"], stats["errors"], stats["error_rate"]) == (4, 3, 1, 0.25)
    assert stats["first_errors"] == ["HTTP 500: boom"]
    assert (stats["output_tokens"], stats["prompt_tokens"], stats["output_tokens_per_s"]) == (21, 60, 10.5)
    assert stats["latency_mean_s"] == pytest.approx(2.0)
    assert (stats["latency_p50_s"], stats["latency_p95_s"]) == pytest.approx((2.0, 2.9))
    assert (stats["ttft_p50_s"], stats["ttft_p95_s"]) == pytest.approx((0.2, 0.29))
    # TPOT = (latency - TTFT) / (tokens - 1): 0.1 and 0.2; the one-token request has none
    assert (stats["tpot_p50_s"], stats["tpot_p95_s"]) == pytest.approx((0.15, 0.195))
    assert stats["per_request"][1] == {"error": "HTTP 500: boom"}
    assert stats["per_request"][0] == {"ttft_s": 0.1, "latency_s": 1.0, "prompt_tokens": 10, "completion_tokens": 10}


def test_repeat_stats_with_every_request_failed_and_kept_errors_capped():
    stats = sb.repeat_stats([se.RequestFailed(f"e{i}") for i in range(9)], wall_s=1.0)
    assert (stats["ok"], stats["error_rate"], stats["output_tokens_per_s"], stats["latency_p50_s"]) == (
        0,
        1,
        None,
        None,
    )
    assert stats["first_errors"] == ["e0", "e1", "e2", "e3", "e4"]


def test_summary_is_the_median_of_the_repeats_with_min_and_max():
    repeats = [
        {"requests": 4, "errors": 0, **dict.fromkeys(sb.SUMMARY_METRICS), "output_tokens_per_s": v, "error_rate": 0.0}
        for v in (90.0, 100.0, 300.0)
    ]
    summary = sb.summarize(repeats)
    assert summary["output_tokens_per_s"] == {"median": 100.0, "min": 90.0, "max": 300.0, "repeats": 3}
    assert summary["tpot_p50_s"] == {"median": None, "min": None, "max": None, "repeats": 0}
    assert (summary["requests"], summary["errors"]) == (12, 0)


# --- runs against the fake server ----------------------------------------------------------------------------------


def test_a_run_writes_the_record(fake_openai, tmp_path, capsys):
    rc, record = _bench(fake_openai, tmp_path, extra=["--load", "decode-heavy,prefill-heavy", "--label", "baseline"])
    out = capsys.readouterr().out
    assert rc == 0
    assert record["schema"] == "caovan-benchmark/2" and record["label"] == "baseline" and record["exit_status"] == 0
    assert record["caovan_version"] == __import__("caovan").__version__
    assert record["created_utc"].endswith("+00:00") and isinstance(record["argv"], list)
    assert record["server"] == {
        "api_base": fake_openai.url, "vllm_version": "0.21.0", "models": ["fake-model"], "max_model_len": 4096,
    }  # fmt: skip
    settings = record["settings"]
    assert {k: settings[k] for k in sb.COMPARED_SETTINGS} == {
        "model": "fake-model", "loads": ["decode-heavy", "prefill-heavy"], "max_tokens": 5, "requests": 3,
        "concurrency": 1, "repeats": 2, "warmup_requests": 1,
    }  # fmt: skip
    assert settings["output_tokens_per_load"] == {"decode-heavy": 5, "prefill-heavy": 1}
    assert settings["prompt_set"]["prompts"] == 2 * (1 + 2 * 3) and len(settings["prompt_set"]["sha256"]) == 64
    assert record["percentile_method"].startswith("linear interpolation")
    assert record["totals"] == {"requests": 14, "errors": 0, "error_rate": 0.0}

    decode = record["results"]["decode-heavy"]
    assert decode["warmup"]["requests"] == 1 and len(decode["repeats"]) == 2
    assert [(r["ok"], r["errors"], r["output_tokens"]) for r in decode["repeats"]] == [(3, 0, 15), (3, 0, 15)]
    assert decode["summary"]["output_tokens_per_s"]["repeats"] == 2
    assert decode["summary"]["tpot_p50_s"]["median"] is not None
    prefill = record["results"]["prefill-heavy"]
    assert [r["output_tokens"] for r in prefill["repeats"]] == [3, 3]
    assert prefill["summary"]["tpot_p50_s"]["median"] is None  # one token: no time per output token
    assert all(r["prompt_tokens"] > 3 * 2000 for r in prefill["repeats"])

    bodies = fake_openai.completion_bodies()
    assert len(bodies) == 14
    assert all(b["stream"] is True and b["stream_options"] == {"include_usage": True} for b in bodies)
    assert all(b["ignore_eos"] is True and b["temperature"] == 0 and b["model"] == "fake-model" for b in bodies)
    assert [b["max_tokens"] for b in bodies] == [5] * 7 + [1] * 7

    assert out.splitlines()[0] == f"[Caovan] benchmark: waiting up to 60 s for {fake_openai.url} ({sc.READY_PROBES})"
    assert "decode-heavy   median" in out and "[Caovan] benchmark: record written to" in out
    assert "decode-heavy: output tok/s median " in out and "over 2 repeat(s)" in out


def test_the_warmup_runs_at_the_repeats_concurrency_one_request_per_batch_size_by_default(fake_openai, tmp_path):
    fake_openai.stream_delay_s = 0.2  # the warmup's requests overlap only if they are sent together
    rc, record = _bench(fake_openai, tmp_path, extra=["--concurrency", "3", "--requests", "1", "--repeats", "1"])
    assert rc == 0 and record["settings"]["warmup_requests"] == 3
    assert record["results"]["decode-heavy"]["warmup"]["requests"] == 3
    assert fake_openai.in_flight_peaks == [1, 2, 3, 1]  # 3 warmup requests in flight at once, then the repeat's one
    _, record = _bench(fake_openai, tmp_path, extra=["--concurrency", "2", "--warmup-requests", "5"])
    assert record["settings"]["warmup_requests"] == 5 and max(fake_openai.in_flight_peaks[4:9]) == 2


def test_answers_shorter_than_asked_are_warned_about_once(fake_openai, tmp_path, capsys):
    fake_openai.tokens_cap = 2  # a server that stops early: it ignores ignore_eos
    rc, record = _bench(fake_openai, tmp_path, extra=["--load", "prefill-heavy,decode-heavy,mixed"])
    assert rc == 0 and record["results"]["decode-heavy"]["repeats"][0]["output_tokens"] == 3 * 2
    assert capsys.readouterr().err.splitlines() == [  # prefill-heavy asks for 1 token: not short
        "caovan benchmark: warning: decode-heavy warmup: 1 of 1 answers generated fewer tokens than asked (as few "
        "as 2; asked for 5: does the server ignore ignore_eos?); output tok/s and TPOT then measure less work than "
        "the settings say"
    ]
    fake_openai.tokens_cap = None
    assert _bench(fake_openai, tmp_path)[0] == 0 and capsys.readouterr().err == ""


def test_the_prompt_set_and_its_sha256_are_the_same_in_two_runs(fake_openai, tmp_path):
    _, first = _bench(fake_openai, tmp_path, "a.json", extra=["--load", "mixed"])
    first_prompts = [b["prompt"] for b in fake_openai.completion_bodies()]
    _, second = _bench(fake_openai, tmp_path, "b.json", extra=["--load", "mixed"])
    assert [b["prompt"] for b in fake_openai.completion_bodies()] == first_prompts * 2
    assert first["settings"] == second["settings"]
    _, other = _bench(fake_openai, tmp_path, "c.json", extra=["--load", "mixed", "--requests", "4"])
    assert other["settings"]["prompt_set"]["sha256"] != first["settings"]["prompt_set"]["sha256"]


def test_loads_run_in_one_order_whatever_order_they_are_given(fake_openai, tmp_path):
    _, given = _bench(fake_openai, tmp_path, "a.json", extra=["--load", "mixed,decode-heavy,mixed"])
    sent = [b["prompt"] for b in fake_openai.completion_bodies()]
    _, ordered = _bench(fake_openai, tmp_path, "b.json", extra=["--load", "decode-heavy,mixed"])
    assert (
        given["settings"]["loads"] == ["decode-heavy", "mixed"] and list(given["results"]) == given["settings"]["loads"]
    )
    assert given["settings"] == ordered["settings"]  # the prompt set's sha256 too
    assert [b["prompt"] for b in fake_openai.completion_bodies()] == sent * 2
    assert sent[0].startswith("[decode-heavy warmup 1]") and sent[-1].startswith("[mixed repeat-2 3]")


def test_loads_written_in_another_order_compare(fake_openai, tmp_path, capsys):
    _bench(fake_openai, tmp_path, "base.json", extra=["--load", "decode-heavy,mixed"])
    capsys.readouterr()
    rc, _ = _bench(
        fake_openai,
        tmp_path,
        "new.json",
        extra=["--load", "mixed,decode-heavy", "--compare", str(tmp_path / "base.json")],
    )
    assert rc == 0 and capsys.readouterr().err == ""


def _as_an_older_caovan_wrote_it(path, loads: list[str]) -> dict:
    """The record at ``path``, rewritten as a caovan that ran (and hashed) the loads in the order given wrote it."""
    data = json.loads(path.read_text())
    settings = data["settings"]
    kwargs = {k: settings[k] for k in ("max_tokens", "requests", "repeats", "warmup_requests")}
    settings["loads"] = loads
    settings["prompt_set"]["sha256"] = sb.prompt_set_sha256(sb.plan(loads, **kwargs))
    path.write_text(json.dumps(data))
    return data


def test_an_older_record_with_its_loads_in_another_order_compares(fake_openai, tmp_path, capsys):
    _bench(fake_openai, tmp_path, "base.json", extra=["--load", "decode-heavy,mixed"])
    old = _as_an_older_caovan_wrote_it(tmp_path / "base.json", ["mixed", "decode-heavy"])
    assert sb.run_order_sha256(old["settings"]) != old["settings"]["prompt_set"]["sha256"]
    capsys.readouterr()
    base = str(tmp_path / "base.json")
    rc, record = _bench(fake_openai, tmp_path, "new.json", extra=["--load", "mixed,decode-heavy", "--compare", base])
    assert rc == 0 and capsys.readouterr().err == ""
    assert sb.run_order_sha256(old["settings"]) == record["settings"]["prompt_set"]["sha256"]
    assert _run(["--compare", base, str(tmp_path / "new.json")]) == 0
    assert _run(["--compare", str(tmp_path / "new.json"), base]) == 0
    # prompts this caovan would not send (another prompt set) still differ, whatever the order
    old["settings"]["prompt_set"]["sha256"] = "0" * 64
    (tmp_path / "base.json").write_text(json.dumps(old))
    capsys.readouterr()
    assert _run(["--compare", base, str(tmp_path / "new.json")]) == 2
    assert "prompt set sha256 000000000000… (prompt set version 1) vs " in capsys.readouterr().err


def test_failed_requests_are_counted_the_record_written_and_exit_1(fake_openai, tmp_path, capsys):
    fake_openai.fail_requests = {1, 5}  # request 0 is the warmup; 1-3 repeat 1, 4-6 repeat 2
    fake_openai.stream_error_requests = {6}
    rc, record = _bench(fake_openai, tmp_path)
    err = capsys.readouterr().err
    assert rc == 1 and record["exit_status"] == 1
    first, second = record["results"]["decode-heavy"]["repeats"]
    assert (first["ok"], first["errors"], first["error_rate"]) == (2, 1, pytest.approx(1 / 3))
    assert (second["ok"], second["errors"], second["error_rate"]) == (1, 2, pytest.approx(2 / 3))
    assert first["first_errors"] == [f"POST {fake_openai.url}/v1/completions: HTTP 500: fake failure of request 1"]
    assert second["first_errors"][1].endswith("error in the stream: fake engine error")
    assert second["per_request"][0]["completion_tokens"] == 5 and "error" in second["per_request"][1]
    assert record["results"]["decode-heavy"]["summary"]["error_rate"]["median"] == pytest.approx(0.5)
    assert record["totals"] == {"requests": 7, "errors": 3, "error_rate": pytest.approx(3 / 7)}
    assert err.splitlines() == [
        "caovan benchmark: error: 3 of 7 requests failed (3 distinct errors; the record's per_request has every "
        "request's)",
        f"caovan benchmark: error:   POST {fake_openai.url}/v1/completions: HTTP 500: fake failure of request 1 "
        "(1 request)",
        f"caovan benchmark: error:   POST {fake_openai.url}/v1/completions: HTTP 500: fake failure of request 5 "
        "(1 request)",
        f"caovan benchmark: error:   POST {fake_openai.url}/v1/completions: error in the stream: fake engine error "
        "(1 request)",
    ]


def test_without_output_the_failures_are_explained_on_stderr(fake_openai, capsys):
    fake_openai.fail_requests = set(range(11))  # 1 warmup request and 2 repeats of 5
    assert _run(["--api-base", fake_openai.url, *SMALL, "--requests", "5"]) == 1
    err = capsys.readouterr().err.splitlines()
    failure = f"POST {fake_openai.url}/v1/completions: HTTP 500: fake failure of request"
    assert err[0] == "caovan benchmark: error: 11 of 11 requests failed (11 distinct errors, the first 3 below)"
    assert err[1:] == [f"caovan benchmark: error:   {failure} {n} (1 request)" for n in range(3)]


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("", "--output '': an empty file name"),
        ("{tmp}", "--output {tmp}: a directory, not a file"),
        ("{tmp}/missing/r.json", "--output {tmp}/missing/r.json: directory {tmp}/missing does not exist"),
        ("/sys/caovan-r.json", "--output /sys/caovan-r.json: cannot write into directory /sys"),  # root too
    ],
)
def test_output_is_checked_before_any_request(fake_openai, tmp_path, capsys, target, problem):
    target, problem = target.format(tmp=tmp_path), problem.format(tmp=tmp_path)
    assert _run(["--api-base", fake_openai.url, "--output", target]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"caovan benchmark: error: {problem}")
    assert fake_openai.requests == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--load", "decode-heavy,long"], "--load 'decode-heavy,long': 'long' is not one of decode-heavy, prefill"),
        (["--repeats", "0"], "--repeats 0: must be 1 or more"),
        (["--concurrency", "0"], "--concurrency 0: must be 1 or more"),
        (["--warmup-requests", "-1"], "--warmup-requests -1: must be 0 or more"),
        (["--compare", "a", "b", "c"], "--compare takes BASELINE.json, or BASELINE.json RECORD.json; got 3 files"),
    ],
)
def test_usage_errors_before_any_request(fake_openai, capsys, argv, message):
    assert _run(["--api-base", fake_openai.url, *argv]) == 2
    assert capsys.readouterr().err.startswith(f"caovan benchmark: error: {message}")
    assert fake_openai.requests == []


def test_a_record_that_cannot_be_written_after_the_run_is_one_error_after_the_table(
    fake_openai, tmp_path, capsys, monkeypatch
):
    def refused(path, text):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("caovan.jsonfile.write_text_atomic", refused)
    fake_openai.fail_requests = {1}
    rc, record = _bench(fake_openai, tmp_path)
    captured = capsys.readouterr()
    assert rc == 2 and record is None
    assert any(line.split()[:2] == ["decode-heavy", "median"] for line in captured.out.splitlines())
    assert "record written" not in captured.out
    err = captured.err.splitlines()
    assert err[0] == (
        f"caovan benchmark: error: --output {tmp_path / 'r.json'}: cannot write the record: Permission denied "
        "(the results are in the table above)"
    )
    assert err[1] == "caovan benchmark: error: 1 of 7 requests failed (1 distinct error)"  # no record to point to
    assert "Traceback" not in captured.err


def test_model_choice_and_a_server_never_ready(fake_openai, tmp_path, capsys):
    fake_openai.models = ["a", "b"]
    assert _run(["--api-base", fake_openai.url, *SMALL]) == 2
    assert "serves 2 models (a, b): choose one with --model" in capsys.readouterr().err
    assert _run(["--api-base", fake_openai.url, *SMALL, "--model", "c", "--output", str(tmp_path / "r.json")]) == 1
    assert "model 'c' is not served by" in capsys.readouterr().err
    assert fake_openai.completion_bodies() == [] and not (tmp_path / "r.json").exists()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert _run(["--api-base", f"http://127.0.0.1:{port}", "--wait-s", "0.05"]) == 2
    assert capsys.readouterr().err.rstrip().endswith(f"GET http://127.0.0.1:{port}/health: connection refused")


def _longest_in_words(load: str, max_tokens: int = 5) -> int:
    """The fake server's token count (words) of ``load``'s longest prompt in a run of SMALL."""
    planned = sb.plan([load], max_tokens=max_tokens, requests=3, repeats=2, warmup_requests=1)
    return len(sb.longest_prompts(planned)[load].prompt.split())


def test_a_load_that_cannot_fit_max_model_len_is_refused_before_any_completion(fake_openai, tmp_path, capsys):
    prefill = _longest_in_words("prefill-heavy")
    fake_openai.max_model_len = prefill  # the prompt fits, its one token out does not
    out = tmp_path / "r.json"
    assert _run(["--api-base", fake_openai.url, *SMALL, "--load", "mixed,prefill-heavy", "--output", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"caovan benchmark: error: --load prefill-heavy: its longest prompt is {prefill} tokens and asks for 1 token "
        f"out, {prefill + 1} in all, more than the max_model_len {prefill} of fake-model on {fake_openai.url}: start "
        "the server with a larger --max-model-len, or leave prefill-heavy out with --load\n"
    )
    assert fake_openai.completion_bodies() == [] and not out.exists()
    assert [path for _, path, _ in fake_openai.requests][-2:] == ["/version", "/tokenize"]  # prefill-heavy first

    mixed = _longest_in_words("mixed", max_tokens=100)
    fake_openai.max_model_len = mixed + 99
    assert _run(["--api-base", fake_openai.url, *SMALL, "--max-tokens", "100", "--load", "mixed"]) == 2
    assert capsys.readouterr().err.endswith(
        f"{mixed} tokens and asks for 100 tokens out, {mixed + 100} in all, more than the max_model_len {mixed + 99} "
        "of fake-model on " + fake_openai.url + ": start the server with a larger --max-model-len, pass --max-tokens "
        "99 or less, or leave mixed out with --load\n"
    )
    assert fake_openai.completion_bodies() == []
    fake_openai.max_model_len = mixed + 100  # exactly full still fits, as vLLM has it
    assert _run(["--api-base", fake_openai.url, *SMALL, "--max-tokens", "100", "--load", "mixed"]) == 0


@pytest.mark.parametrize(
    ("knob", "line"),
    [
        ({"tokenize": False}, "not checked against max_model_len 4096: POST {url}/tokenize: HTTP 404: Not Found"),
        ({"max_model_len": None}, "not checked: /v1/models gives no max_model_len for fake-model"),
    ],
)
def test_without_tokenize_or_max_model_len_the_check_is_skipped_in_one_line(fake_openai, capsys, knob, line):
    for key, value in knob.items():
        setattr(fake_openai, key, value)
    assert _run(["--api-base", fake_openai.url, *SMALL, "--load", "prefill-heavy"]) == 0
    captured = capsys.readouterr()
    skipped = [text for text in captured.out.splitlines() if "prompt lengths" in text]
    assert skipped == [f"[Caovan] benchmark: prompt lengths {line.format(url=fake_openai.url)}"]
    assert captured.err == "" and len(fake_openai.completion_bodies()) == 7


def test_ctrl_c_is_130_and_writes_no_record(fake_openai, tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(benchmark, "run_concurrently", interrupted)
    rc, record = _bench(fake_openai, tmp_path)
    assert rc == 130 and record is None
    assert capsys.readouterr().err == "caovan benchmark: error: interrupted (Ctrl-C); no record written\n"


# --- --compare ------------------------------------------------------------------------------------------------------


def _table_rows(out: str, load: str) -> dict[str, list[str]]:
    """The comparison table's rows of ``load``, by metric label."""
    rows = {}
    for line in out.splitlines():
        cells = [c for c in line.split("  ") if c.strip()]
        if cells and cells[0].strip() == load and len(cells) == 6:
            rows[cells[1].strip()] = [c.strip() for c in cells[2:]]
    return rows


def test_compare_after_a_run_prints_the_side_by_side_table(fake_openai, tmp_path, capsys):
    _, baseline = _bench(fake_openai, tmp_path, "base.json", extra=["--label", "baseline"])
    capsys.readouterr()
    rc, record = _bench(fake_openai, tmp_path, "new.json", extra=["--compare", str(tmp_path / "base.json")])
    captured = capsys.readouterr()
    assert rc == 0 and "warning" not in captured.err
    assert f"this run compared with baseline {tmp_path / 'base.json'}" in captured.out
    rows = _table_rows(captured.out, "decode-heavy")
    assert [label for label, _, _, _ in sb.COMPARE_METRICS] == list(rows)
    base_rate = baseline["results"]["decode-heavy"]["summary"]["output_tokens_per_s"]
    rate = record["results"]["decode-heavy"]["summary"]["output_tokens_per_s"]
    before, after = base_rate["median"], rate["median"]
    assert rows["output tok/s"][2] == f"{after / before:.3f}"
    if base_rate["min"] <= rate["max"] and rate["min"] <= base_rate["max"]:
        assert rows["output tok/s"][3] == "within spread"
    else:
        assert rows["output tok/s"][3] == ("this run" if after > before else "baseline")
    assert "better: named only when the two runs' min-max ranges over the repeats do not overlap" in captured.out
    assert rows["error rate"] == ["0.0000", "0.0000", "-", "same"]


def test_compare_rows_on_known_records():
    def record(rate, p50):
        summary = {m: {"median": None} for m in sb.SUMMARY_METRICS}
        summary["output_tokens_per_s"] = {"median": rate}
        summary["ttft_p50_s"] = {"median": p50}
        return {"settings": {"loads": ["mixed"]}, "results": {"mixed": {"summary": summary}}}

    rows = {row[1]: row for row in sb.compare_rows(record(80.0, 0.2), record(88.0, 0.25))}
    assert rows["output tok/s"] == ["mixed", "output tok/s", "80.00", "88.00", "1.100", "this run"]
    assert rows["TTFT p50 (ms)"] == ["mixed", "TTFT p50 (ms)", "200.00", "250.00", "1.250", "baseline"]
    assert rows["TPOT p50 (ms)"][2:] == ["-", "-", "-", "-"]


def test_compare_names_no_winner_when_the_repeats_ranges_overlap():
    def record(rates, p50s):
        summary = {m: {"median": None, "min": None, "max": None} for m in sb.SUMMARY_METRICS}
        summary["output_tokens_per_s"] = {"median": rates[1], "min": rates[0], "max": rates[2]}
        summary["ttft_p50_s"] = {"median": p50s[1], "min": p50s[0], "max": p50s[2]}
        return {"settings": {"loads": ["mixed"]}, "results": {"mixed": {"summary": summary}}}

    # tok/s: 80 (75-90) vs 88 (85-95): the ranges overlap; TTFT: 200 (190-210) ms vs 250 (240-260) ms: they do not
    baseline, current = record((75.0, 80.0, 90.0), (0.19, 0.2, 0.21)), record((85.0, 88.0, 95.0), (0.24, 0.25, 0.26))
    rows = {row[1]: row for row in sb.compare_rows(baseline, current)}
    assert rows["output tok/s"] == ["mixed", "output tok/s", "80.00", "88.00", "1.100", "within spread"]
    assert rows["TTFT p50 (ms)"] == ["mixed", "TTFT p50 (ms)", "200.00", "250.00", "1.250", "baseline"]
    # ranges that only touch overlap too; ranges apart name the winner
    current = record((90.0, 92.0, 95.0), (0.17, 0.18, 0.19))
    rows = {row[1]: row for row in sb.compare_rows(baseline, current)}
    assert rows["output tok/s"][-1] == "within spread" and rows["TTFT p50 (ms)"][-1] == "within spread"
    current = record((91.0, 92.0, 95.0), (0.15, 0.16, 0.18))
    rows = {row[1]: row for row in sb.compare_rows(baseline, current)}
    assert rows["output tok/s"][-1] == "this run" and rows["TTFT p50 (ms)"][-1] == "this run"


def test_compare_refuses_different_settings_before_any_request(fake_openai, tmp_path, capsys):
    _bench(fake_openai, tmp_path, "base.json")
    sent = len(fake_openai.requests)
    capsys.readouterr()
    base = tmp_path / "base.json"
    assert _run(["--api-base", fake_openai.url, *SMALL, "--max-tokens", "6", "--compare", str(base)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"caovan benchmark: error: --compare {base}: refusing to compare runs with different")
    assert "max_tokens 5 vs 6" in err and "same model, flags, prompts and output length" in err
    assert len(fake_openai.requests) == sent  # not even the readiness probe
    # the model is known only once the server names it: refused after /v1/models, before any completion
    fake_openai.models = ["fake-model", "other"]
    assert _run(["--api-base", fake_openai.url, *SMALL, "--model", "other", "--compare", str(base)]) == 2
    assert "model 'fake-model' vs 'other'" in capsys.readouterr().err
    assert len(fake_openai.completion_bodies()) == 7  # the baseline run's only


def test_output_over_the_compare_baseline_is_refused_before_any_request(fake_openai, tmp_path, capsys, monkeypatch):
    _bench(fake_openai, tmp_path, "base.json")
    before = (tmp_path / "base.json").read_text()
    sent = len(fake_openai.requests)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.json").symlink_to(tmp_path / "base.json")
    monkeypatch.chdir(tmp_path / "sub")
    for output in ("../base.json", str(tmp_path / "link.json")):
        capsys.readouterr()
        assert _run(["--api-base", fake_openai.url, *SMALL, "--output", output, "--compare", "../base.json"]) == 2
        assert capsys.readouterr().err == (
            f"caovan benchmark: error: --output {output} is the --compare baseline ../base.json: the run would "
            "overwrite the record it is compared with; write this run's record to another file\n"
        )
    assert len(fake_openai.requests) == sent and (tmp_path / "base.json").read_text() == before


def test_compare_refuses_a_different_prompt_set(fake_openai, tmp_path, capsys):
    _bench(fake_openai, tmp_path, "base.json")
    data = json.loads((tmp_path / "base.json").read_text())
    data["settings"]["prompt_set"]["sha256"] = "0" * 64
    (tmp_path / "base.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert _run(["--api-base", fake_openai.url, *SMALL, "--compare", str(tmp_path / "base.json")]) == 2
    assert "prompt set sha256 000000000000… (prompt set version 1) vs " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"schema": "caovan-benchmark/2", ', ":1:34: malformed JSON: Expecting property name enclosed"),
        ("[]", ': not a caovan benchmark record (no "schema": "caovan-benchmark/2")'),
        ('{"schema": "caovan-benchmark/9"}', ": a record of schema 'caovan-benchmark/9'; this caovan compares"),
        ('{"schema": "caovan-benchmark/2", "settings": {}}', ": settings lack 'model'"),
    ],
)
def test_a_bad_baseline_file_is_one_error_naming_it(fake_openai, tmp_path, capsys, content, problem):
    base = tmp_path / "base.json"
    base.write_text(content)
    assert _run(["--api-base", fake_openai.url, *SMALL, "--compare", str(base)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"caovan benchmark: error: --compare {base}{problem}")
    assert fake_openai.requests == []
    missing = tmp_path / "missing.json"
    assert _run(["--api-base", fake_openai.url, "--compare", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"caovan benchmark: error: --compare {missing}: cannot read")


def test_a_record_of_the_first_schema_is_refused_with_what_to_do(fake_openai, tmp_path, capsys):
    _bench(fake_openai, tmp_path, "base.json")
    data = json.loads((tmp_path / "base.json").read_text())
    data["schema"] = "caovan-benchmark/1"  # itl_p50_s, itl_p95_s then
    for load in data["results"].values():
        for metric in ("p50", "p95"):
            load["summary"][f"itl_{metric}_s"] = load["summary"].pop(f"tpot_{metric}_s")
    (tmp_path / "base.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert _run(["--api-base", fake_openai.url, *SMALL, "--compare", str(tmp_path / "base.json")]) == 2
    assert capsys.readouterr().err == (
        f"caovan benchmark: error: --compare {tmp_path / 'base.json'}: a record of schema 'caovan-benchmark/1'; "
        "this caovan compares 'caovan-benchmark/2' records only (the layouts differ): run that benchmark again with "
        "this caovan\n"
    )


def test_a_truncated_record_is_refused(fake_openai, tmp_path, capsys):
    _bench(fake_openai, tmp_path, "base.json")
    data = json.loads((tmp_path / "base.json").read_text())
    del data["results"]["decode-heavy"]["summary"]["ttft_p95_s"]
    (tmp_path / "base.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert _run(["--compare", str(tmp_path / "base.json"), str(tmp_path / "base.json")]) == 2
    assert "results.decode-heavy.summary.ttft_p95_s is not" in capsys.readouterr().err
    data["results"]["decode-heavy"]["summary"]["ttft_p95_s"] = {"median": 0.1, "max": 0.2, "repeats": 2}
    (tmp_path / "base.json").write_text(json.dumps(data))
    assert _run(["--compare", str(tmp_path / "base.json"), str(tmp_path / "base.json")]) == 2
    assert capsys.readouterr().err.endswith(
        'results.decode-heavy.summary.ttft_p95_s is not {"median": number, "min": number, "max": number, ...}\n'
    )


def test_compare_two_records_contacts_no_server_and_warns_on_another_vllm(fake_openai, tmp_path, capsys):
    _bench(fake_openai, tmp_path, "base.json")
    fake_openai.version = "0.22.0"
    _bench(fake_openai, tmp_path, "new.json", extra=["--label", "caovan"])
    sent = len(fake_openai.requests)
    capsys.readouterr()
    assert _run(["--compare", str(tmp_path / "base.json"), str(tmp_path / "new.json")]) == 0
    captured = capsys.readouterr()
    assert len(fake_openai.requests) == sent
    assert captured.err == (
        "caovan benchmark: warning: the servers' vLLM versions differ (baseline 0.21.0, record 0.22.0); "
        "Turbo3's rule: same vLLM version\n"
    )
    assert f"record: {tmp_path / 'new.json'}" in captured.out and "record (caovan)" in captured.out
    assert len(_table_rows(captured.out, "decode-heavy")) == len(sb.COMPARE_METRICS)


def test_compare_two_records_refuses_different_settings(fake_openai, tmp_path, capsys):
    _bench(fake_openai, tmp_path, "base.json")
    _bench(fake_openai, tmp_path, "more.json", extra=["--repeats", "3"])
    capsys.readouterr()
    assert _run(["--compare", str(tmp_path / "base.json"), str(tmp_path / "more.json")]) == 2
    assert "(baseline vs record: repeats 2 vs 3)" in capsys.readouterr().err


def test_compare_two_records_writes_nothing(fake_openai, tmp_path, capsys):
    _bench(fake_openai, tmp_path, "base.json")
    capsys.readouterr()
    base = str(tmp_path / "base.json")
    assert _run(["--compare", base, base, "--output", str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err.startswith("caovan benchmark: error: --output: nothing is run when --compare")
    assert not (tmp_path / "x.json").exists()


# --- secrets stay out of the record and the output -------------------------------------------------------------------


def test_the_api_key_and_url_userinfo_are_neither_recorded_nor_printed(fake_openai, tmp_path, capsys, monkeypatch):
    fake_openai.fail_requests = {1}  # a failed request's message names the URL
    api_base = fake_openai.url.replace("http://", "http://user:pw-secret@")
    out = tmp_path / "r.json"
    argv = ["--api-base", api_base, *SMALL, "--api-key", "sekret", "--output", str(out)]
    monkeypatch.setattr("sys.argv", ["caovan-sm75-benchmark", *argv, "--api-key=sekret2", "--api-k", "sekret3"])
    assert _run(argv) == 1
    captured = capsys.readouterr()
    text = out.read_text()
    for secret in ("sekret", "pw-secret", "user:"):
        assert secret not in text and secret not in captured.out and secret not in captured.err
    record = json.loads(text)
    assert record["server"]["api_base"] == fake_openai.url
    assert record["argv"] == [
        "caovan-sm75-benchmark", "--api-base", fake_openai.url, *SMALL, "--api-key", "<redacted>", "--output",
        str(out), "--api-key=<redacted>", "--api-k", "<redacted>",
    ]  # fmt: skip
    assert record["results"]["decode-heavy"]["repeats"][0]["first_errors"][0].startswith(f"POST {fake_openai.url}/v1")
    assert fake_openai.headers[-1]["Authorization"].startswith("Basic ")  # the userinfo still reaches the server
