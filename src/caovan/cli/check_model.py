"""``caovan check-model MODEL [--json]`` (Turbo3 alias ``caovan-sm75-check-model``).

Static check that a model folder (or a Hugging Face name whose config.json is cached) has the structure caovan's
GDN + MTP spec-decode kernels need.
Exit codes: 0 candidate, 1 not a candidate, 2 the folder or its config cannot be read.
The logic lives in :mod:`caovan.model_check`; this module only parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import sys

from caovan.model_check import ModelCheckError, check_model_dir, format_report, model_folder

from . import prog

NAME = "check-model"
HELP = "static check: could caovan's GDN spec-decode kernels serve this model folder?"
ALIAS = "caovan-sm75-check-model"

EPILOG = "Exit status: 0 candidate; 1 not a candidate; 2 the folder or its config.json cannot be read."

EXIT_CANDIDATE = 0
EXIT_NOT_CANDIDATE = 1
EXIT_USAGE_ERROR = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read MODEL's config.json (text_config of Qwen3.5/3.6 multimodal configs, top level of "
        "Qwen3-Next) and report GDN layers, MTP depth, GDN head shapes per tensor-parallel rank, "
        "dtype and quantization advice for SM75, and a verdict. A candidate, not a guarantee: "
        "the start-up and dispatch logs decide. Exit 0 candidate, 1 not a candidate, 2 error."
    )
    parser.add_argument(
        "model_dir",
        metavar="MODEL",
        help="model folder holding config.json, or a Hugging Face name whose config.json is in the local cache "
        "(what `caovan serve` checks for AutoSpec)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one stable JSON object (verdict, reasons, facts, advice) instead of text",
    )


def run(args: argparse.Namespace) -> int:
    try:
        folder = model_folder(args.model_dir)
        if folder is None:
            raise ModelCheckError(
                f"model folder not found: {args.model_dir} (nor a Hugging Face name whose config.json is in the "
                "local cache)"
            )
        report = check_model_dir(folder)
    except ModelCheckError as error:
        print(f"{prog(args, NAME)}: error: {error}", file=sys.stderr)
        return EXIT_USAGE_ERROR
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report))
    return EXIT_CANDIDATE if report.is_candidate else EXIT_NOT_CANDIDATE
