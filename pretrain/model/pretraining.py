"""What the pretraining models (each arch's model.py) share: `PretrainingModel`, their interface to the runner;
their inputs' defaults for rows of one instance, where in the encoder's output the [CLS] and masked positions are,
and the losses and counts of a batch (`PretrainOutput`).

Inputs are the rows of NVIDIA's HDF5 files (wiki2bert_core/hdf5_format.py): `masked_lm_positions` is padded with unused
slots and `next_sentence_labels` is 1 where segment B is a random sentence. Packed rows add `position_ids`
(restarting at 0 for each instance) and `cls_positions` (the row-major position r * L + c of each instance's
[CLS]); `attention_mask` then numbers the instances of a row 1, 2, ..., and each instance's `masked_lm_positions`
stay relative to its own [CLS].
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from wiki2bert_core.hdf5_format import used_positions
from pretrain.model.attention import TokenLayout


@dataclass
class PretrainOutput:
    loss: Tensor  # mlm_loss + nsp_loss
    mlm_loss: Tensor  # mean over the valid masked positions of the batch
    nsp_loss: Tensor | None  # the nsp_* are None for a model without the NSP head
    mlm_correct: Tensor
    mlm_count: Tensor
    nsp_correct: Tensor | None
    nsp_count: Tensor | None


def instance_positions(input_ids: Tensor, position_ids: Tensor | None, cls_positions: Tensor | None
                       ) -> tuple[Tensor, Tensor, bool]:
    """(position_ids, cls_positions, packed): a batch's own when packed, else those of one instance a row."""
    if cls_positions is not None:
        return position_ids, cls_positions, True
    rows, length = input_ids.shape
    return (torch.arange(length, device=input_ids.device).expand(rows, -1),
            torch.arange(rows, device=input_ids.device) * length, False)


def output_index(layout: TokenLayout, cls_positions: Tensor, masked_lm_positions: Tensor) -> Tensor:
    """[K, 1 + P]: where each instance's [CLS] and masked positions are in the encoder's output [T, H]."""
    cls_positions = cls_positions.long()[:, None]
    return layout.flat_index(torch.cat([cls_positions, cls_positions + masked_lm_positions.long()], 1))


class SummedCrossEntropy(torch.autograd.Function):
    """F.cross_entropy(logits, labels, reduction="sum") of logits [M, V] and labels [M] (the same loss and
    gradient, to rounding), and how many labels have the top logit (a tie with another token counts). Made for the
    masked-LM head, whose [M, V] tensors dominate it on CPU: one exponential pass kept for backward (no log-softmax
    output, no zero-filled gradient of the loss), and the count from the maximum the loss needs anyway (no argmax
    pass)."""

    @staticmethod
    def forward(ctx, logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        top = logits.amax(-1, keepdim=True)
        exp = (logits - top).exp_()
        total = exp.sum(-1, keepdim=True)
        picked = logits.gather(1, labels[:, None])
        correct = (picked >= top).sum()
        ctx.save_for_backward(exp, total, labels)
        ctx.mark_non_differentiable(correct)
        return (total.log() + top - picked).sum(), correct

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_correct: Tensor) -> tuple[Tensor, None]:
        exp, total, labels = ctx.saved_tensors
        grad = exp * (grad_loss / total)  # softmax, scaled
        grad[torch.arange(labels.numel(), device=labels.device), labels] -= grad_loss
        return grad, None


def pretrain_output(mlm_logits: Tensor, mlm_labels: Tensor, nsp_logits: Tensor | None,
                    next_sentence_labels: Tensor) -> PretrainOutput:
    """The losses and counts of MLM logits [M, V] at the M used masked positions of a batch, whose tokens are
    `mlm_labels` [M] (and of NSP logits [K, 2], None without the NSP head)."""
    mlm_labels = mlm_labels.long()
    mlm_count = torch.tensor(mlm_labels.numel(), device=mlm_labels.device)
    # losses in fp32 whatever the compute precision: log-softmax over the vocabulary loses too much in 16 bits
    mlm_sum, mlm_correct = SummedCrossEntropy.apply(mlm_logits.float(), mlm_labels)
    mlm_loss = mlm_sum / mlm_count.clamp(min=1)
    if nsp_logits is None:  # next_sentence_labels are not used
        return PretrainOutput(loss=mlm_loss, mlm_loss=mlm_loss, nsp_loss=None, mlm_correct=mlm_correct,
                              mlm_count=mlm_count, nsp_correct=None, nsp_count=None)
    nsp_labels = next_sentence_labels.long().view(-1)
    nsp_loss = F.cross_entropy(nsp_logits.float(), nsp_labels)
    with torch.no_grad():
        nsp_correct = (nsp_logits.argmax(-1) == nsp_labels).sum()
    return PretrainOutput(loss=mlm_loss + nsp_loss, mlm_loss=mlm_loss, nsp_loss=nsp_loss, mlm_correct=mlm_correct,
                          mlm_count=mlm_count, nsp_correct=nsp_correct,
                          nsp_count=torch.tensor(nsp_labels.numel(), device=nsp_labels.device))


class PretrainingModel(nn.Module):
    """The interface of a pretraining model to the runner, the same for every arch: `logits` (MLM logits at every
    masked-position slot, NSP logits or None: evaluation), `forward` (the batch's losses and counts: training, with
    the masked-LM head on the used slots only), the attention kernel of its encoder, its parameters and training
    FLOPs. A subclass has `config`, `nsp_head` and `encoder` (its encoder module, which has an `attention`
    attribute), and defines `encode` (the encoder's output [T, H] at the real tokens and its layout),
    `mlm_logits` and `nsp_logits` (of gathered outputs) and `training_flops`."""
    nsp_head: bool

    @property
    def encoder(self) -> nn.Module:
        raise NotImplementedError

    def encode(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor, position_ids: Tensor,
               packed: bool) -> tuple[Tensor, TokenLayout]:
        raise NotImplementedError

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        raise NotImplementedError

    def nsp_logits(self, cls_hidden: Tensor) -> Tensor:
        raise NotImplementedError

    def training_flops(self, tokens: float, attention_pairs: float, instances: float, predictions: float) -> float:
        raise NotImplementedError

    @property
    def attention(self) -> str:
        return self.encoder.attention

    @attention.setter
    def attention(self, kernel: str) -> None:
        self.encoder.attention = kernel

    def _outputs(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor,
                 masked_lm_positions: Tensor, position_ids: Tensor | None, cls_positions: Tensor | None
                 ) -> tuple[Tensor, Tensor]:
        """The encoder's output [T, H] and where each instance's [CLS] and masked positions are in it [K, 1 + P]."""
        position_ids, cls_positions, packed = instance_positions(input_ids, position_ids, cls_positions)
        sequence, layout = self.encode(input_ids, token_type_ids, attention_mask, position_ids, packed)
        return sequence, output_index(layout, cls_positions, masked_lm_positions)

    def logits(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor, masked_lm_positions: Tensor,
               position_ids: Tensor | None = None, cls_positions: Tensor | None = None
               ) -> tuple[Tensor, Tensor | None]:
        """MLM logits [K, P, V] at the masked positions (slot order of masked_lm_positions; zero slots give
        [CLS]'s logits, to be ignored) and NSP logits [K, 2] (None without the NSP head), K instances (rows unless
        packed)."""
        sequence, index = self._outputs(input_ids, token_type_ids, attention_mask, masked_lm_positions,
                                        position_ids, cls_positions)
        nsp = self.nsp_logits(sequence[index[:, 0]]) if self.nsp_head else None
        return self.mlm_logits(sequence[index[:, 1:]]), nsp

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor, masked_lm_positions: Tensor,
                masked_lm_ids: Tensor, next_sentence_labels: Tensor, position_ids: Tensor | None = None,
                cls_positions: Tensor | None = None) -> PretrainOutput:
        """The losses and counts of a batch; the masked-LM head runs on the used slots of masked_lm_positions only
        (not on the padding slots of the instances with fewer positions to predict)."""
        sequence, index = self._outputs(input_ids, token_type_ids, attention_mask, masked_lm_positions,
                                        position_ids, cls_positions)
        used = used_positions(masked_lm_positions)
        nsp = self.nsp_logits(sequence[index[:, 0]]) if self.nsp_head else None
        return pretrain_output(self.mlm_logits(sequence[index[:, 1:][used]]), masked_lm_ids[used], nsp,
                               next_sentence_labels)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # parameters() lists a tied decoder weight once

    def flops_per_sequence(self, seq_len: int, num_predictions: int) -> float:
        """Training FLOPs of one sequence of `seq_len` positions (see `training_flops`)."""
        return self.training_flops(seq_len, seq_len ** 2, 1, num_predictions)
