"""The two PragWorld prompts (reference facts: ``pragworld.md``, "Prompting and parsing").

- :func:`benchmark_prompt` — the evaluation prompt of the published code (``src/datautils.py``,
  ``PROMPT_FORMAT``), byte for byte: the conversation, the question, an instruction to answer
  "(yes)" or "(no)" on the first line and explain after, ending with an open "(". Models answer it
  by greedy generation; :func:`~interp.datasets.pragworld.parse.parse_yes_no` reads the answer.
  (The released outputs' ``prompt`` fields are exactly this string; a test checks all 500.)
- :func:`label_prompt` — the interpretability prompt of the layer analyses (``module_ablation.py``):
  the conversation, the question, "The answer should only be a label i.e. either yes or no.", then
  "Label:". It is scored by the two-way softmax over the " yes" / " no" logits at the last position
  (:mod:`interp.metrics.pragworld_eval`). The published template carries four spaces of
  source indentation on every line after the first (a triple-quoted string inside an ``if``
  block); they are left out here.
"""

from __future__ import annotations

BENCHMARK_TEMPLATE = """Read this conversation between Bob and Alice:
{context}

Now based on your understanding of the conversation, answer the question below:
{question}

Answer this with only a (yes) or (no) in the first line and then explain your answer from the next line onwards.
Your answer:
("""

LABEL_TEMPLATE = """Read this conversation between the two speakers:
{context}

Now based on your understanding of the conversation, answer the question below:
{question}

The answer should only be a label i.e. either yes or no.
Label:"""

PROMPTS = ("benchmark", "label")


def benchmark_prompt(context: str, question: str) -> str:
    """The published evaluation prompt (ends with an open "(")."""
    return BENCHMARK_TEMPLATE.format(context=context, question=question)


def label_prompt(context: str, question: str) -> str:
    """The interpretability prompt (ends with "Label:"); score it with the " yes"/" no" logits."""
    return LABEL_TEMPLATE.format(context=context, question=question)


def build_prompt(kind: str, context: str, question: str) -> str:
    """``kind`` = ``"benchmark"`` | ``"label"``."""
    if kind == "benchmark":
        return benchmark_prompt(context, question)
    if kind == "label":
        return label_prompt(context, question)
    raise ValueError(f"prompt must be one of {PROMPTS}, got {kind!r}")
