"""``caovan serve`` against the real vLLM of the row: its serve parser reads what caovan serve builds as intended.

caovan serve edits the user's ``vllm serve`` arguments following vLLM's ``FlexibleArgumentParser`` rules (flag
names with ``_`` or ``-``, ``=`` or a separate value, dotted keys gathered into one JSON object that replaces a
plain one, ``--config`` files below the command line).  Here every form goes through vLLM's own ``serve`` parser,
built as ``vllm serve`` builds it; a vLLM that reads these forms differently fails this test, not a user's start-up.

The parser is vLLM's, built once in a child process for the session (``helpers/vllm_serve_parser.py`` says why).
"""

from __future__ import annotations

import json

import pytest

from caovan.bench.model_folders import write_tiny_qwen3_next
from caovan.serving.serve_command import COLD_START_TIMEOUTS, VLLM_CLI_MODULE, plan_serve

pytestmark = [pytest.mark.discovery, pytest.mark.usefixtures("served_release")]

ENABLED = {"caovan": True, "caovan_mode": "auto"}
AUTOSPEC = {"method": "mtp", "num_speculative_tokens": 3}


def _cases(tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("port: 8123\nadditional_config:\n  gdn_prefill_backend: triton\n")
    user_spec = {"method": "mtp", "num_speculative_tokens": 1}
    return [
        ([], ENABLED, AUTOSPEC),
        (
            ["--additional-config", '{"a": 1}', '--additional_config={"gdn_prefill_backend": "triton"}'],
            {"gdn_prefill_backend": "triton", **ENABLED},
            AUTOSPEC,
        ),
        (["--additional-config.gdn_prefill_backend", "triton"], {"gdn_prefill_backend": "triton", **ENABLED}, AUTOSPEC),
        (["--additional-config", '{"caovan": false}'], {"caovan": False}, AUTOSPEC),
        (["--config", str(config)], {"gdn_prefill_backend": "triton", **ENABLED}, AUTOSPEC),
        (["-sc", json.dumps(user_spec)], ENABLED, user_spec),
        (
            ["--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens", "1"],
            ENABLED,
            user_spec,
        ),
    ]


#: ``-sc``, vLLM's short form of --speculative-config (not in vLLM 0.18 and before: there it is the user's error,
#: which vLLM reports, and caovan serve passes it on as written).
SHORT_SPEC_PROBE = ["/m", "-sc", '{"method": "mtp", "num_speculative_tokens": 1}']


def test_vllm_serve_parser_reads_what_caovan_serve_builds(tmp_path, vllm_serve_parser):
    model = write_tiny_qwen3_next(tmp_path / "model")
    cases = _cases(tmp_path)
    plans = [plan_serve(str(model), args, {}, vllm_env_names=set(COLD_START_TIMEOUTS)) for args, _, _ in cases]
    # vLLM's own reading of two forms, without caovan: where vLLM itself refuses one, the case that uses it is left
    # out (the user's command fails in vLLM whatever caovan serve does with it).
    config_file = ["/m", "--config", str(tmp_path / "serve.yaml")]
    *results, short_form, config_form = vllm_serve_parser.parse(
        [*(p.serve_args for p in plans), SHORT_SPEC_PROBE, config_file]
    )
    unread = {"-sc": "exit" in short_form, "--config": "exit" in config_form}
    for flag in (flag for flag, refused in unread.items() if refused):
        # -sc: before vLLM 0.19; a mapping under additional_config in a --config file: vLLM 0.12 cannot convert it.
        print(f"this vLLM refuses {flag} in the form the case uses: that case is left out")
    kept = [i for i, (args, _, _) in enumerate(cases) if not any(unread[flag] and flag in args for flag in unread)]
    for i in kept:
        (args, additional, speculative), plan, parsed = cases[i], plans[i], results[i]
        assert parsed["model"] == str(model), args
        assert parsed["additional_config"] == additional, (args, plan.vllm_args)
        assert parsed["speculative_config"] == speculative, (args, plan.vllm_args)
    if not unread["--config"]:
        assert results[4]["port"] == 8123  # the --config file's other values still reach vLLM


def test_vllm_serve_parser_serves_the_model_caovan_serve_checks(tmp_path, vllm_serve_parser):
    # --model M (the first one) or a --config file's model, where MODEL is not given: the arguments stay as the
    # user wrote them, caovan's additions still reach vLLM, and the model vLLM serves is the one AutoSpec checked.
    model = write_tiny_qwen3_next(tmp_path / "model")
    config = tmp_path / "serve.yaml"
    config.write_text(f"model: {model}\nport: 8125\n")
    forms = [
        ["--port", "8124", f"--model={model}"],
        ["--model", str(model), "--model", "/other"],
        ["--config", str(config)],
    ]
    plans = [plan_serve(None, form, {}, vllm_env_names=set(COLD_START_TIMEOUTS)) for form in forms]
    for plan, parsed in zip(plans, vllm_serve_parser.parse([p.serve_args for p in plans]), strict=True):
        # vllm serve's own rule (entrypoints/cli/serve.py): model_tag when parsed, else --model
        served = parsed["model"] if parsed["model"] is not None else parsed["model_option"]
        assert served == plan.model == str(model), plan.serve_args
        assert parsed["additional_config"] == ENABLED and parsed["speculative_config"] == AUTOSPEC, plan.serve_args


def test_vllm_refuses_model_and_model_option_together(vllm_serve_parser):
    # caovan serve refuses MODEL with --model (serve_flags.served_model) because vLLM does: once vLLM accepts
    # it, this fails and caovan serve must learn which of the two vLLM serves.
    (parsed,) = vllm_serve_parser.parse([["/m", "--model", "/other"]])
    assert parsed == {"exit": 2}


def test_the_forms_caovan_serve_refuses_still_mislead_vllm(tmp_path, vllm_serve_parser):
    # caovan serve refuses abbreviations of the flags it edits, "--config=FILE" and a config file's dotted
    # additional-config keys (serve_flags.py). Once vLLM stops taking the abbreviation, starts reading the file in
    # that form, or stops letting the file's dotted keys replace the command line's object, this fails: the refusal
    # can go.
    config = tmp_path / "serve.yaml"
    config.write_text("port: 8123\n")
    dotted = tmp_path / "dotted.yaml"
    dotted.write_text("additional-config.foo: 1\n")
    abbreviated, short, equals, file_dotted, short_form = vllm_serve_parser.parse(
        [
            ["/m", "--additional-conf", '{"caovan": false}'],
            ["/m", "-s", '{"method": "mtp", "num_speculative_tokens": 1}'],
            ["/m", f"--config={config}"],
            ["/m", "--config", str(dotted), "--additional-config", '{"caovan": true}'],
            SHORT_SPEC_PROBE,
        ]
    )
    assert abbreviated["additional_config"] == {"caovan": False}
    if "exit" in short_form:
        # No -sc to abbreviate (vLLM 0.18 and before): vLLM refuses -s itself, as caovan serve does.
        assert "exit" in short, short
    else:
        assert short["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 1}
    assert equals["port"] != 8123
    assert file_dotted["additional_config"] == {"foo": 1}


#: Cold-start timeouts vLLM stopped reading, and the release that did: caovan serve skips them there (it sets only
#: what the installed vLLM reads), and keeps them for the older rows that still read them.
DROPPED_TIMEOUTS = {"VLLM_RPC_TIMEOUT": "0.23.0", "VLLM_ENGINE_ITERATION_TIMEOUT_S": "0.33.0"}


def test_vllm_reads_the_timeouts_caovan_serve_raises():
    import vllm
    import vllm.envs
    from packaging.version import Version

    # Fails once vLLM stops reading another one: name it in DROPPED_TIMEOUTS, and drop it from COLD_START_TIMEOUTS
    # once no row of the matrix reads it.
    unread = set(COLD_START_TIMEOUTS) - set(vllm.envs.environment_variables)
    release = Version(Version(vllm.__version__).base_version)
    unexpected = [name for name in unread if name not in DROPPED_TIMEOUTS or release < Version(DROPPED_TIMEOUTS[name])]
    assert not unexpected, f"vLLM {vllm.__version__} no longer reads {unexpected}"
    assert set(COLD_START_TIMEOUTS) - unread, "this vLLM reads none of them: caovan serve raises nothing"


def test_vllm_cli_module_caovan_serve_runs_is_there():
    import importlib

    module = importlib.import_module(VLLM_CLI_MODULE)
    assert callable(module.main)


def test_vllm_serve_parser_reads_the_profiles_flags(tmp_path, vllm_serve_parser):
    """DynamicTP, AutoMem and Elastic-KV on two (fake) 22 GB RTX 2080 Tis, asking this row's vLLM which KV-cache
    dtypes it takes and how it plans the KV cache: vLLM's parser reads every flag they add, and the user's own forms
    they keep, as the profiles meant them."""
    from caovan.profiles import Gpu
    from caovan.serving.serve_flags import find_flag

    gpus = [Gpu(i, "NVIDIA GeForce RTX 2080 Ti", (7, 5), 22 << 30, 21 << 30) for i in (0, 1)]
    model = write_tiny_qwen3_next(tmp_path / "model")
    cases = [
        [],
        ["-tp", "2"],
        ["--gpu_memory_utilization=0.8"],
        ["--max-model-len", "32k", "--kv-cache-dtype", "auto", "--max-num-seqs", "4"],
        ["--max-model-len", "auto", "--max-num-batched-tokens", "4096"],
    ]
    plans = [
        plan_serve(str(model), args, {}, vllm_env_names=set(COLD_START_TIMEOUTS), measure_gpus=lambda: gpus)
        for args in cases
    ]
    # What the profiles meant by each flag (the last use is the one vLLM keeps), as vLLM's parser types it.
    meant = {
        "tensor_parallel_size": ("--tensor-parallel-size", "-tp", int),
        "gpu_memory_utilization": ("--gpu-memory-utilization", None, float),
        "kv_cache_dtype": ("--kv-cache-dtype", None, str),
        "max_num_seqs": ("--max-num-seqs", None, int),
        "max_num_batched_tokens": ("--max-num-batched-tokens", None, int),
    }
    for args, plan, parsed in zip(cases, plans, vllm_serve_parser.parse([p.serve_args for p in plans]), strict=True):
        assert "exit" not in parsed, (args, plan.vllm_args)
        for field, (flag, short, kind) in meant.items():
            uses = find_flag(plan.vllm_args, flag, short)
            assert uses, f"{flag} neither added nor kept: {plan.vllm_args}"
            assert parsed[field] == kind(uses[-1].value), (field, args, plan.vllm_args)
    added = [parsed for parsed in vllm_serve_parser.parse([plans[0].serve_args])][0]
    assert (added["tensor_parallel_size"], added["gpu_memory_utilization"]) == (1, 0.9)
    assert added["max_model_len"] == 4096  # the tiny model's own context, written out
    parsed_kept, parsed_auto = vllm_serve_parser.parse([plans[3].serve_args, plans[4].serve_args])
    assert parsed_kept["max_model_len"] == 32000 and parsed_kept["kv_cache_dtype"] == "auto"
    assert parsed_auto["max_model_len"] == -1


#: Token counts as users write them; the profiles read them with their own mirror of vLLM's reader.
TOKEN_COUNTS = ["32k", "32K", "1.5k", "131072", " 64k", "2M", "1t", "1T", "1.5K", "lots"]


def test_the_profiles_read_token_counts_as_vllm_does(vllm_serve_parser):
    from caovan.serving.serve_profiles import ServeArgsError, tokens_value

    parsed = vllm_serve_parser.parse([["/m", "--max-num-batched-tokens", text] for text in TOKEN_COUNTS])
    for text, theirs in zip(TOKEN_COUNTS, parsed, strict=True):
        try:
            ours = tokens_value(text, "--max-num-batched-tokens")
        except ServeArgsError:
            ours = None
        assert ours == theirs.get("max_num_batched_tokens"), (text, ours, theirs)
        assert (ours is None) == ("exit" in theirs), (text, theirs)
