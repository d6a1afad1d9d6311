"""CPU tests of ``caovan bench kernels`` / ``caovan verify`` arguments and no-GPU exits."""

from __future__ import annotations

import argparse
import json

import pytest

from caovan.cli import bench as bench_cli
from caovan.cli import verify as verify_cli

torch = pytest.importorskip("torch", reason="the GPU check asks torch")


def _parse(module, argv):
    parser = argparse.ArgumentParser(prog=f"caovan {module.NAME}")
    module.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize("module", [bench_cli, verify_cli])
def test_subcommand_modules_follow_the_cli_contract(module):
    assert isinstance(module.NAME, str) and isinstance(module.HELP, str) and module.HELP
    assert module.ALIAS is None or module.ALIAS.startswith("caovan-sm75-")
    assert callable(module.add_arguments) and callable(module.run)


def test_verify_keeps_the_turbo3_alias():
    assert verify_cli.NAME == "verify" and verify_cli.ALIAS == "caovan-sm75-verify"
    # Turbo3's caovan-sm75-benchmark is the end-to-end HTTP benchmark, not this one.
    assert bench_cli.ALIAS is None


def test_bench_arguments(tmp_path):
    args = _parse(bench_cli, ["kernels", "--cases", "model", "--quick", "--json", "r.json"])
    assert (args.bench_target, args.cases, args.quick, str(args.json)) == (
        "kernels", "model", True, "r.json",
    )  # fmt: skip
    args = _parse(bench_cli, ["kernels"])
    assert args.cases == "all" and args.quick is False and args.json is None
    with pytest.raises(SystemExit):
        _parse(bench_cli, [])  # the target is required
    with pytest.raises(SystemExit):
        _parse(bench_cli, ["kernels", "--cases", "huge"])


def _no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_bench_without_gpu_exits_2_with_one_line(monkeypatch, capsys, tmp_path):
    _no_cuda(monkeypatch)
    rc = bench_cli.run(_parse(bench_cli, ["kernels", "--json", str(tmp_path / "r.json")]))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("caovan bench: error: no CUDA GPU visible")
    assert not (tmp_path / "r.json").exists()


def test_bench_json_into_missing_directory_exits_2(capsys, tmp_path):
    target = tmp_path / "nope" / "r.json"
    rc = bench_cli.run(_parse(bench_cli, ["kernels", "--json", str(target)]))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("caovan bench: error: --json") and "does not exist" in err


@pytest.mark.parametrize("target", ["kernels", "tune", "layer"])
@pytest.mark.parametrize("where", ["dir", "empty"])
def test_bench_json_that_is_a_directory_or_empty_exits_2_before_running(monkeypatch, capsys, tmp_path, target, where):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the run would start on a GPU: it must not
    value, expected = {
        "dir": (str(tmp_path), f"--json {tmp_path}: a directory, not a file to write the record to"),
        "empty": ("", "--json '': an empty file name"),
    }[where]
    rc = bench_cli.run(_parse(bench_cli, [target, "--json", value]))
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    assert captured.err == f"caovan bench: error: {expected}\n"


def test_verify_without_gpu_exits_2_with_one_line(monkeypatch, capsys):
    _no_cuda(monkeypatch)
    rc = verify_cli.run(_parse(verify_cli, []))
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("caovan verify: error: no CUDA GPU visible")
    # the verdict line Turbo3's gate greps for, with the reason
    assert captured.out.splitlines() == ["[Caovan] verify=FAIL (not run: " + err[0].split("error: ", 1)[1] + ")"]


def test_verify_refuses_a_non_cuda_device(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    rc = verify_cli.run(_parse(verify_cli, ["--device", "cpu"]))
    captured = capsys.readouterr()
    assert rc == 2 and captured.err.strip() == "caovan verify: error: --device 'cpu': verify runs on a CUDA device"
    assert captured.out == "[Caovan] verify=FAIL (not run: --device 'cpu': verify runs on a CUDA device)\n"


def test_verify_refuses_a_garbage_device(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    rc = verify_cli.run(_parse(verify_cli, ["--device", "gpu0"]))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("caovan verify: error: --device 'gpu0':")


def test_verify_refuses_an_unknown_launch_config_entry(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS

    assert "sm75" in LAUNCH_CONFIGS and "sm_75" not in LAUNCH_CONFIGS
    rc = verify_cli.run(_parse(verify_cli, ["--launch-config", "sm_75"]))
    captured = capsys.readouterr()
    known = ", ".join(sorted(LAUNCH_CONFIGS))
    message = f"--launch-config 'sm_75': launch_configs.json has no such entry ({known})"
    assert rc == 2 and captured.out == f"[Caovan] verify=FAIL (not run: {message})\n"
    assert captured.err.strip() == f"caovan verify: error: {message}"


def test_verify_names_an_unknown_launch_config_entry_on_a_machine_without_gpu(monkeypatch, capsys):
    # The entry is data, checkable anywhere: "no GPU" first would hide the typo until the GPU machine.
    _no_cuda(monkeypatch)
    rc = verify_cli.run(_parse(verify_cli, ["--launch-config", "sm_75"]))
    captured = capsys.readouterr()
    assert rc == 2 and captured.err.startswith("caovan verify: error: --launch-config 'sm_75': launch_configs.json")
    assert len(captured.err.splitlines()) == 1 and captured.out.startswith("[Caovan] verify=FAIL (not run: --launch")
    assert verify_cli.run(_parse(verify_cli, ["--launch-config", "sm75"])) == 2  # a known entry: no GPU is the error
    assert "no CUDA GPU visible" in capsys.readouterr().err


def _fake_gpu(monkeypatch, major, minor):
    props = type("Props", (), {"name": "Fake GPU", "major": major, "minor": minor})()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda idx: props)


def test_verify_on_a_gpu_without_an_entry_fails_every_case_and_says_why(monkeypatch, capsys):
    _fake_gpu(monkeypatch, 6, 1)
    monkeypatch.setattr(verify_cli, "verify_cases", lambda cases, device, kernel, reference: len(cases))
    rc = verify_cli.run(_parse(verify_cli, []))
    out = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert out[1].startswith("launch configuration: none (no launch configuration for sm61")
    assert out[-1].startswith("[Caovan] verify=FAIL cases=0/") and out[-1].endswith("launch_config=none")


def test_verify_without_launch_config_runs_this_gpus_entry(monkeypatch, capsys):
    from caovan.kernels.gdn_spec_decode import gdn_spec_decode

    _fake_gpu(monkeypatch, 8, 9)  # no sm89 entry: the nearest lower one, sm75, is this GPU's own
    seen = []
    monkeypatch.setattr(verify_cli, "verify_cases", lambda cases, device, kernel, reference: seen.append(kernel) or 0)
    rc = verify_cli.run(_parse(verify_cli, []))
    out = capsys.readouterr().out.splitlines()
    assert rc == 0 and seen == [gdn_spec_decode]
    assert out[1] == "launch configuration: sm75 (this GPU's entry)"
    assert out[-1].startswith("[Caovan] verify=PASS") and out[-1].endswith("launch_config=sm75")


def test_verify_with_another_entry_runs_the_kernels_with_it(monkeypatch, capsys):
    from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS

    _fake_gpu(monkeypatch, 9, 0)
    seen = []
    monkeypatch.setattr(
        verify_cli, "verify_cases", lambda cases, device, kernel, reference: seen.append(kernel.keywords) or 0
    )
    rc = verify_cli.run(_parse(verify_cli, ["--launch-config", "sm75"]))
    out = capsys.readouterr().out.splitlines()
    assert rc == 0 and seen == [{"launch_config": LAUNCH_CONFIGS["sm75"]}]
    assert out[1] == "launch configuration: sm75 (--launch-config; this GPU's own entry is sm90)"
    assert out[-1].startswith("[Caovan] verify=PASS") and out[-1].endswith("launch_config=sm75")


def test_verify_loop_prints_pass_and_fail_lines_on_cpu():
    from caovan.bench.cases import SpecDecodeCase
    from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference as reference

    cases = [
        SpecDecodeCase("tiny", 2, 1),
        SpecDecodeCase("tiny", 2, 2, null_seqs=1, padded_seqs=1, padded_tokens=1),
    ]
    lines: list[str] = []
    assert verify_cli.verify_cases(cases, "cpu", reference, reference, emit=lines.append) == 0
    assert [ln.split(":")[0] for ln in lines] == [f"PASS {c.id}" for c in cases]

    def output_off_by_half(*args, **kwargs):
        reference(*args, **kwargs)
        args[12].mul_(1.5)

    def crashes(*args, **kwargs):
        raise ValueError("ssm_state: expected 4 dims")

    lines.clear()
    assert verify_cli.verify_cases(cases[:1], "cpu", output_off_by_half, reference, lines.append) == 1
    assert lines[0].startswith(f"FAIL {cases[0].id}: out_err=") and "tolerance" in lines[0]
    lines.clear()
    assert verify_cli.verify_cases(cases[:1], "cpu", crashes, reference, lines.append) == 1
    assert lines == [f"FAIL {cases[0].id}: raised; ValueError: ssm_state: expected 4 dims"]


def _tune_run(monkeypatch, tmp_path):
    """``bench tune`` up to its record, on a CPU: the sweep and the GPU facts are stand-ins."""
    from caovan.bench import kernels as kb
    from caovan.bench import tune

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    monkeypatch.setattr(kb, "environment", lambda *a: {"gpu": {}, "versions": {}})
    best = {"label": "base", "geomean_graph_us": 5.0, "vs_base": 1.0}
    result = {"label": "base", "valid": True, "geomean_graph_us": 5.0, "problems": {}}
    monkeypatch.setattr(tune, "run_tune", lambda **kw: {"schema": tune.JSON_SCHEMA, "results": [result], "best": best})


def test_bench_record_replaces_the_file_whole(monkeypatch, capsys, tmp_path):
    _tune_run(monkeypatch, tmp_path)
    target = tmp_path / "tune.json"
    target.write_text("an older record\n")
    assert bench_cli.run(_parse(bench_cli, ["tune", "--json", str(target)])) == 0
    assert json.loads(target.read_text())["best"]["label"] == "base"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tune.json"]  # no temp file left behind
    assert capsys.readouterr().err.splitlines()[-1] == f"wrote {target}"


def _write_error(target, why):
    return f"caovan bench: error: --json {target}: cannot write the record: {why} (the results are in the table above)"


def test_bench_record_whose_folder_went_away_during_the_run_exits_2_with_one_line(monkeypatch, capsys, tmp_path):
    import shutil

    from caovan.bench import tune

    _tune_run(monkeypatch, tmp_path)
    folder = tmp_path / "records"
    folder.mkdir()
    sweep = tune.run_tune
    monkeypatch.setattr(tune, "run_tune", lambda **kw: shutil.rmtree(folder) or sweep(**kw))
    rc = bench_cli.run(_parse(bench_cli, ["tune", "--json", str(folder / "tune.json")]))
    captured = capsys.readouterr()
    assert rc == 2 and "best: base" in captured.out  # the results are printed before the write
    assert captured.err == _write_error(folder / "tune.json", "No such file or directory") + "\n"


def test_bench_record_cut_short_leaves_the_old_file_and_no_temp_file(monkeypatch, capsys, tmp_path):
    import os

    _tune_run(monkeypatch, tmp_path)
    target = tmp_path / "tune.json"
    target.write_text("an older record\n")

    def disk_full(fd):  # where a full disk or a network file system reports a write that did not land
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    rc = bench_cli.run(_parse(bench_cli, ["tune", "--json", str(target)]))
    assert rc == 2 and capsys.readouterr().err == _write_error(target, "No space left on device") + "\n"
    assert target.read_text() == "an older record\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tune.json"]


@pytest.mark.parametrize("target", ["kernels", "tune", "layer"])
def test_bench_with_kernels_not_importable_exits_2_with_one_line(monkeypatch, capsys, target):
    import sys

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    monkeypatch.setitem(sys.modules, "caovan.kernels.gdn_spec_decode", None)  # as a broken Triton leaves it
    rc = bench_cli.run(_parse(bench_cli, [target]))
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    assert captured.err.startswith("caovan bench: error: caovan's kernels are not importable (broken install?): ")
    assert len(captured.err.splitlines()) == 1


def _run_not_raising(module, argv):
    try:
        return module.run(_parse(module, argv))
    except KeyboardInterrupt:  # caught here, or it would stop the whole test session
        pytest.fail(f"KeyboardInterrupt escaped caovan {module.NAME}")


def test_verify_interrupted_ends_with_the_verdict_line_and_130(monkeypatch, capsys):
    _fake_gpu(monkeypatch, 7, 5)

    def interrupted(cases, device, kernel, reference):
        print(f"PASS {cases[0].id}: ...")
        raise KeyboardInterrupt

    monkeypatch.setattr(verify_cli, "verify_cases", interrupted)
    rc = _run_not_raising(verify_cli, [])
    captured = capsys.readouterr()
    assert rc == 130 and captured.err == "caovan verify: error: interrupted (Ctrl-C)\n"
    assert captured.out.splitlines()[-1] == "[Caovan] verify=FAIL (not run: interrupted (Ctrl-C))"


def test_bench_interrupted_is_one_line_130_and_no_record(monkeypatch, capsys, tmp_path):
    from caovan.bench import tune

    _tune_run(monkeypatch, tmp_path)

    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tune, "run_tune", interrupted)
    rc = _run_not_raising(bench_cli, ["tune", "--json", str(tmp_path / "tune.json")])
    assert rc == 130 and capsys.readouterr().err == "caovan bench: error: interrupted (Ctrl-C); no record written\n"
    assert list(tmp_path.iterdir()) == []


def test_verify_that_raises_outside_a_case_still_ends_with_the_verdict_line(monkeypatch, capsys):
    _fake_gpu(monkeypatch, 7, 5)

    def driver_error(idx):
        raise RuntimeError("CUDA error: unknown error")

    monkeypatch.setattr(torch.cuda, "get_device_properties", driver_error)
    with pytest.raises(RuntimeError, match="unknown error"):  # the traceback is kept: it is not a known failure
        verify_cli.run(_parse(verify_cli, []))
    assert capsys.readouterr().out.splitlines()[-1] == (
        "[Caovan] verify=FAIL (not run: RuntimeError: CUDA error: unknown error)"
    )


def test_tune_with_an_invalid_base_says_so_instead_of_a_zero_ratio(monkeypatch, capsys, tmp_path):
    from caovan.bench import tune

    _tune_run(monkeypatch, tmp_path)
    sweep = tune.run_tune
    monkeypatch.setattr(
        tune,
        "run_tune",
        lambda **kw: {**sweep(**kw), "best": {"label": "qk(w2)", "geomean_graph_us": 4.0, "vs_base": None}},
    )
    assert bench_cli.run(_parse(bench_cli, ["tune"])) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "best: qk(w2) (4.00 us geomean, the base is invalid)"


@pytest.mark.parametrize(
    ("value", "note"),
    [("", "; CUDA_VISIBLE_DEVICES='' hides every GPU"), ("-1", "; CUDA_VISIBLE_DEVICES='-1' hides every GPU"),
     ("3", "; CUDA_VISIBLE_DEVICES='3' is set"), (None, "")],
)  # fmt: skip
def test_no_gpu_names_cuda_visible_devices(monkeypatch, capsys, value, note):
    from caovan.cli import doctor

    _no_cuda(monkeypatch)
    if value is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert verify_cli.run(_parse(verify_cli, [])) == 2
    assert f"(torch.cuda.is_available() is False{note}); verify runs" in capsys.readouterr().err
    assert bench_cli.run(_parse(bench_cli, ["kernels"])) == 2
    assert f"(torch.cuda.is_available() is False{note}); bench kernels runs" in capsys.readouterr().err
    assert doctor.gpu_facts()["reason"] == "no CUDA device visible" + note.replace("; ", ": ")
