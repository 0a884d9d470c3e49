"""The contrastive fine-tuning step that CoDeR's compatibility encoder (:mod:`retrievers.coder_train`)
and COLT's semantic stage (:mod:`retrievers.colt_train`) share.

Both fine-tune a sentence-transformers model with ``MultipleNegativesRankingLoss`` (MNRL: cosine
similarity times ``scale``, cross-entropy over the batch's candidates with each anchor's own
positive as the target, every other candidate an in-batch negative): AdamW with weight decay on
every parameter but the biases and LayerNorm weights, a linear warm-up over the first ``warmup``
fraction of the steps then linear decay, gradients clipped to norm 1, and batches in which no text
appears twice (a repeated text would be its own in-batch negative). torch, transformers and
sentence-transformers are imported only when a step is set up, so importing this module is cheap.
"""

from __future__ import annotations

import math
import random
from typing import Any, Collection, Sequence


def mnrl_class() -> type:
    """sentence-transformers' ``MultipleNegativesRankingLoss`` (its module moved in release 6)."""
    try:  # sentence-transformers ≥ 6
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    except ImportError:  # pragma: no cover - older releases
        from sentence_transformers.losses import MultipleNegativesRankingLoss
    return MultipleNegativesRankingLoss


def no_duplicate_batches(texts: Sequence[Collection[str]], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled mini-batches of the indices of ``texts`` (the texts of each example) in which no
    text appears twice: an example whose texts clash with the current batch waits for a later one
    (the rule of sentence-transformers' NO_DUPLICATES batch sampler). The only draw from ``rng``
    is one ``rng.shuffle`` of ``range(len(texts))``."""
    order = list(range(len(texts)))
    rng.shuffle(order)
    out: list[list[int]] = []
    remaining = order
    while remaining:
        batch: list[int] = []
        seen: set[str] = set()
        rest: list[int] = []
        for i in remaining:
            mine = set(texts[i])
            if len(batch) < batch_size and not (mine & seen):
                batch.append(i)
                seen |= mine
            else:
                rest.append(i)
        out.append(batch)
        remaining = rest
    return out


class MnrlSteps:
    """The loss, optimiser and schedule of one MNRL fine-tuning run of ``model`` over ``steps``
    steps (built in that order); :meth:`step` takes one. ``weight_decay`` applies to every
    parameter except biases and LayerNorm weights; the learning rate warms up linearly over
    ``ceil(warmup · steps)`` steps, then decays linearly to 0 at ``steps``."""

    def __init__(self, model: Any, steps: int, *, lr: float, weight_decay: float, warmup: float, scale: float,
                 device: str):
        import torch
        from transformers import get_linear_schedule_with_warmup

        self.model, self.device = model, device
        self.loss_fn = mnrl_class()(model, scale=scale)
        decay, no_decay = [], []
        for n, prm in model.named_parameters():
            (no_decay if n.endswith("bias") or "LayerNorm" in n or "layer_norm" in n else decay).append(prm)
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}], lr=lr)
        self.sched = get_linear_schedule_with_warmup(self.opt, int(math.ceil(warmup * steps)), max(1, steps))

    def features(self, texts: Sequence[str]) -> dict[str, Any]:
        """``texts`` tokenised by the model, its tensors on the device."""
        m = self.model
        f = m.preprocess(texts) if hasattr(m, "preprocess") else m.tokenize(texts)
        return {k: (v.to(self.device) if hasattr(v, "to") else v) for k, v in f.items()}

    def step(self, columns: Sequence[Sequence[str]]) -> float:
        """One step on a batch given as columns (anchors first, then their positives, then any
        hard negatives, one text per example each): the loss, a gradient step with the gradients
        clipped to norm 1, the schedule's step. Returns the loss before the step."""
        import torch

        loss = self.loss_fn([self.features(col) for col in columns], None)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.sched.step()
        return float(loss.detach())
