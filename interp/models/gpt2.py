"""Build a GPT-2 sized for a world's vocabulary.

The paper trains GPT-2 from scratch by next-token prediction (Vafa et al. 2024, §3.1, App. F);
we do the same with Hugging Face's ``GPT2LMHeadModel`` so that a trained model is an ordinary HF
checkpoint that ``TransformerBridge.boot_transformers`` wraps exactly like a user's pretrained
model. Dropout is 0 by default (small synthetic worlds do not need it, and it keeps training
deterministic and the bridge's eval-mode logits identical to training-mode ones).
"""

from __future__ import annotations

from dataclasses import dataclass

from interp.worlds.base import Vocab


@dataclass(frozen=True)
class ModelConfig:
    """Size of a from-scratch GPT-2. ``n_ctx`` must cover ``<bos>`` + the longest sequence."""

    n_layer: int = 4
    d_model: int = 128
    n_head: int = 4
    n_ctx: int = 128
    dropout: float = 0.0
    #: seed of the weight initialisation
    seed: int = 0

    def __post_init__(self) -> None:
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        for name in ("n_layer", "d_model", "n_head", "n_ctx"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be ≥ 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")


def gpt2_config(vocab: Vocab, cfg: ModelConfig):
    """The ``transformers.GPT2Config`` for ``cfg`` and ``vocab`` (pad = 0, bos = 1)."""
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=len(vocab),
        n_positions=cfg.n_ctx,
        n_embd=cfg.d_model,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout,
        bos_token_id=vocab.bos_id,
        eos_token_id=vocab.bos_id,
        pad_token_id=vocab.pad_id,
        tie_word_embeddings=True,
        # GPT-2's tanh-approximated GELU as one fused torch kernel: the same function as
        # "gelu_new", without its seven elementwise kernels per call (training step ~20% faster)
        activation_function="gelu_pytorch_tanh",
    )


def build_gpt2(vocab: Vocab, cfg: ModelConfig = ModelConfig()):
    """A freshly initialised ``GPT2LMHeadModel`` (seeded by ``cfg.seed``) in train mode."""
    import torch
    from transformers import GPT2LMHeadModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = GPT2LMHeadModel(gpt2_config(vocab, cfg))
    return model.train()


def count_parameters(model) -> int:
    """Parameters counted once (tied embeddings are shared)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
