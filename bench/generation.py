"""KV-cached vs full-recompute greedy generation on PragWorld-length prompts.

Both paths (:func:`interp.models.generate.greedy_generate`, ``use_cache=True`` / ``False``) run on
the same model and the same batch: the benchmark prompts (``benchmark_prompt``) of the first
``--rows`` rows of a PragWorld file, tokenized by a byte-level BPE trained here on that file's
conversations (the ``tokenizers`` package, ``--vocab`` tokens), right-padded in one batch, greedy
for ``--new`` tokens with no early stop (so both read exactly the same number of tokens). The
model is a GPT-2 built from a config (``--layers``, ``--d-model``; random weights, seed 0) and
wrapped in a TransformerBridge like any checkpoint. The same comparison runs again under an
intervention (``zero mlp_out:1``, hooks active in every forward).

Variants run in interleaved rounds (cached, full, cached, …) so drift on the machine hits both
alike; the script prints the median seconds of each and the ratio full / cached, and checks that
both produced the same token ids. (The demo checkpoint is a streets-world model with 2-digit
sequence lengths and a word-level vocabulary: PragWorld prompts do not apply to it.)

    python bench/generation.py [--rows 8] [--new 16] [--rounds 3] [--layers 4] [--d-model 256]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from interp.datasets.pragworld import benchmark_prompt, load_pragworld
from interp.hooks import intervene, zero
from interp.models import load_bridge
from interp.models.generate import greedy_generate

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "pragworld" / "Manual_Dataset_500_Final.csv"


def build_model(folder: Path, texts: list[str], vocab: int, layers: int, d_model: int):
    """A byte-level BPE trained on ``texts`` and a random GPT-2 over it, saved as an HF folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=vocab,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=core.get_vocab_size(),
            n_positions=1024,
            n_embd=d_model,
            n_layer=layers,
            n_head=max(1, d_model // 64),
            bos_token_id=0,
            eos_token_id=0,
        )
    )
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return tok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="PragWorld CSV (default: the manual split)")
    ap.add_argument("--rows", type=int, default=8, help="prompts in the batch (default 8)")
    ap.add_argument("--new", type=int, default=16, help="new tokens per prompt (default 16)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=2000, help="BPE vocabulary size (default 2000)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if not Path(args.data).is_file():
        sys.exit(f"no PragWorld file at {args.data} (pass --data)")
    data = load_pragworld(args.data)
    rows = data.rows.iloc[: args.rows]
    prompts = [benchmark_prompt(c, q) for c, q in zip(rows["context"], rows["question"])]
    texts = [f"{c}\n{q}" for c, q in zip(data.rows["context"], data.rows["question"])] + prompts
    with tempfile.TemporaryDirectory() as tmp:
        tok = build_model(Path(tmp), texts, args.vocab, args.layers, args.d_model)
        bridge = load_bridge(tmp)
    ids = [tok(p)["input_ids"] for p in prompts]
    lengths = [len(x) for x in ids]
    print(
        f"GPT-2 {args.layers} layers, d_model {args.d_model}, BPE vocab {len(tok)}; {len(ids)} benchmark "
        f"prompts of {min(lengths)}–{max(lengths)} tokens (mean {sum(lengths) / len(lengths):.0f}), right-padded "
        f"in one batch; {args.new} new tokens each; {args.rounds} interleaved rounds, 1 thread"
    )
    for label, ivs in (("no intervention", []), ("zero mlp_out:1 active", [zero("mlp_out:1")])):
        times: dict[str, list[float]] = {"cached": [], "full": []}
        outs: dict[str, list[list[int]]] = {}
        with intervene(bridge, ivs):
            greedy_generate(bridge, ids[:1], pad_id=tok.pad_token_id, max_new_tokens=2)  # warm-up
            for _ in range(args.rounds):
                for name in ("cached", "full"):
                    t0 = time.perf_counter()
                    outs[name] = greedy_generate(
                        bridge, ids, pad_id=tok.pad_token_id, max_new_tokens=args.new, use_cache=name == "cached"
                    )
                    times[name].append(time.perf_counter() - t0)
        same = outs["cached"] == outs["full"]
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"{label}: cached {med['cached']:.3f} s, full recompute {med['full']:.3f} s (medians); "
            f"full / cached = {med['full'] / med['cached']:.2f}x; identical token ids: {same}"
        )
        if not same:
            sys.exit("the two paths disagree")


if __name__ == "__main__":
    main()
