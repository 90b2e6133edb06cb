"""The pretraining model: same names, shapes and outputs as transformers' BertForPreTraining; losses, sparse MLM head,
activation checkpointing, presets, FLOP count."""
import pytest
import torch
import transformers
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from wiki2bert_core.wordpiece import padded_vocab_size
from pretrain.config import ModelConfig, model_config
from pretrain.model.arch import spec
from pretrain.model.bert.model import BertForPreTraining

VOCAB = 203  # padded to 208


def make_batch(vocab_size=VOCAB, batch=3, length=24, predictions=5, seed=0):
    """Rows in NVIDIA's HDF5 layout: padding at the end, zero-padded masked positions, two segments."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (batch, length), generator=g)
    token_type_ids = torch.zeros(batch, length, dtype=torch.long)
    token_type_ids[:, length // 2:] = 1
    attention_mask = torch.ones(batch, length, dtype=torch.long)
    attention_mask[1, length - 7:] = 0
    input_ids[1, length - 7:] = 0
    token_type_ids[1, length - 7:] = 0
    positions = torch.zeros(batch, predictions, dtype=torch.long)
    positions[0] = torch.tensor([1, 4, 6, 9, 20])[:predictions]
    positions[1, :2] = torch.tensor([3, 11])  # a short sequence with fewer predictions
    positions[2] = torch.tensor([2, 5, 13, 17, 23])[:predictions]
    masked_lm_ids = torch.randint(5, vocab_size, (batch, predictions), generator=g) * (positions != 0)
    return dict(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask,
                masked_lm_positions=positions, masked_lm_ids=masked_lm_ids,
                next_sentence_labels=torch.tensor([0, 1, 1])[:batch])


def hf_twin(model: BertForPreTraining) -> transformers.BertForPreTraining:
    c = model.config
    hf_config = transformers.BertConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads, intermediate_size=c.intermediate_size,
        max_position_embeddings=c.max_position_embeddings, type_vocab_size=c.type_vocab_size,
        layer_norm_eps=c.layer_norm_eps, pad_token_id=c.pad_token_id, hidden_act="gelu",
        attn_implementation="eager")
    hf = transformers.BertForPreTraining(hf_config)
    hf.load_state_dict(model.state_dict(), strict=True)
    return hf.eval()


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return BertForPreTraining(model_config("tiny", VOCAB, pad_token_id=0)).eval()


def test_state_dict_names_and_shapes_are_transformers(tiny):
    hf = hf_twin(tiny)
    ours, theirs = tiny.state_dict(), hf.state_dict()
    assert list(ours) == list(theirs)
    assert {k: tuple(v.shape) for k, v in ours.items()} == {k: tuple(v.shape) for k, v in theirs.items()}
    assert "cls.predictions.decoder.weight" in ours and "cls.predictions.decoder.bias" in ours
    assert tiny.num_parameters() == sum(p.numel() for p in hf.parameters())


def test_outputs_agree_with_transformers(tiny):
    hf = hf_twin(tiny)
    batch = make_batch()
    with torch.no_grad():
        mlm, nsp = tiny.logits(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                               batch["masked_lm_positions"])
        out = hf(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                 attention_mask=batch["attention_mask"])
    index = batch["masked_lm_positions"].unsqueeze(-1).expand(-1, -1, tiny.config.vocab_size)
    torch.testing.assert_close(mlm, out.prediction_logits.gather(1, index), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(nsp, out.seq_relationship_logits, atol=1e-5, rtol=1e-5)


def test_losses_and_accuracy_counts_agree_with_transformers(tiny):
    hf = hf_twin(tiny)
    batch = make_batch()
    labels = torch.full_like(batch["input_ids"], -100)
    valid = batch["masked_lm_positions"] != 0
    for row in range(labels.size(0)):
        labels[row, batch["masked_lm_positions"][row][valid[row]]] = batch["masked_lm_ids"][row][valid[row]]
    with torch.no_grad():
        ours = tiny(**batch)
        theirs = hf(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                    attention_mask=batch["attention_mask"], labels=labels,
                    next_sentence_label=batch["next_sentence_labels"])
    torch.testing.assert_close(ours.loss, theirs.loss, atol=1e-5, rtol=1e-5)
    hf_nsp = torch.nn.functional.cross_entropy(theirs.seq_relationship_logits, batch["next_sentence_labels"])
    torch.testing.assert_close(ours.nsp_loss, hf_nsp, atol=1e-6, rtol=1e-6)
    assert ours.mlm_count.item() == 12 and ours.nsp_count.item() == 3
    hf_predicted = theirs.prediction_logits.argmax(-1)
    assert ours.mlm_correct.item() == ((hf_predicted == labels) & (labels != -100)).sum().item()
    assert ours.nsp_correct.item() == (theirs.seq_relationship_logits.argmax(-1)
                                       == batch["next_sentence_labels"]).sum().item()


def test_int32_inputs_as_stored_in_hdf5(tiny):
    batch = make_batch()
    with torch.no_grad():
        as_int64 = tiny(**batch)
        as_int32 = tiny(**{k: v.to(torch.int32) for k, v in batch.items()})
    assert torch.equal(as_int64.loss, as_int32.loss)


def test_a_batch_without_predictions_has_zero_mlm_loss(tiny):
    batch = make_batch()
    batch["masked_lm_positions"].zero_()
    batch["masked_lm_ids"].zero_()
    with torch.no_grad():
        out = tiny(**batch)
    assert out.mlm_loss.item() == 0.0 and out.mlm_count.item() == 0 and out.mlm_correct.item() == 0
    assert torch.isfinite(out.loss)


def test_decoder_is_tied_to_word_embeddings():
    torch.manual_seed(0)
    model = BertForPreTraining(model_config("tiny", VOCAB))
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.decoder.bias is model.cls.predictions.bias
    model(**make_batch()).loss.backward()
    grad = model.bert.embeddings.word_embeddings.weight.grad
    # the decoder's gradient reaches every vocabulary row, the lookup's only the rows of the input
    assert (grad.abs().sum(-1) > 0).all()


def test_init_is_transformers_init():
    torch.manual_seed(0)
    model = BertForPreTraining(model_config("small", 4000, pad_token_id=3))
    sd = model.state_dict()
    assert sd["bert.embeddings.word_embeddings.weight"][3].abs().sum() == 0  # padding row
    assert sd["bert.encoder.layer.0.intermediate.dense.weight"].std().item() == pytest.approx(0.02, rel=0.02)
    assert sd["bert.embeddings.position_embeddings.weight"].std().item() == pytest.approx(0.02, rel=0.05)
    for name, value in sd.items():
        if name.endswith("LayerNorm.weight"):
            assert torch.all(value == 1), name
        elif name.endswith("bias"):
            assert torch.all(value == 0), name


def test_activation_checkpointing_gives_the_same_loss_and_gradients():
    """In training mode, with dropout: recomputation replays the same dropout masks."""
    results = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = BertForPreTraining(model_config("tiny", VOCAB, activation_checkpointing=checkpointing)).train()
        torch.manual_seed(1)
        out = model(**make_batch())
        out.loss.backward()
        results.append((out.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert torch.equal(loss_a, loss_b)
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=1e-6, rtol=1e-5, msg=name)


def test_activation_checkpointing_keeps_fewer_activations():
    def saved_bytes(checkpointing):
        torch.manual_seed(0)
        model = BertForPreTraining(model_config("tiny", VOCAB, activation_checkpointing=checkpointing)).train()
        total = 0

        def pack(t):
            nonlocal total
            total += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(**make_batch(length=64))
        return total

    assert saved_bytes(True) < 0.5 * saved_bytes(False)


def test_flops_per_sequence_counts_the_matmuls():
    torch.manual_seed(0)
    model = BertForPreTraining(model_config("tiny", VOCAB))
    batch = make_batch()
    # the math backend decomposes attention into matmuls the counter sees
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(**batch).loss.backward()
    batch_size, length = batch["input_ids"].shape
    predictions = int((batch["masked_lm_positions"] != 0).sum())  # the head runs on the used slots only
    assert predictions < batch["masked_lm_positions"].numel()
    # the dense layers see the real tokens only, attention whole rows
    assert counter.get_total_flops() == pytest.approx(
        model.training_flops(int(batch["attention_mask"].sum()), batch_size * length ** 2, batch_size, predictions))


def test_flops_per_sequence_by_hand_for_base():
    class Shell:  # the formula needs only the config; a real base model would cost seconds to build
        flops_per_sequence = BertForPreTraining.flops_per_sequence
        training_flops = BertForPreTraining.training_flops
        config = model_config("base", 30522)
        nsp_head = True

    shell = Shell()
    s, h, v = 128, 768, 30528
    per_layer = 2 * s * (4 * h * h + 2 * h * 3072) + 4 * s * s * h
    expected = 3 * (12 * per_layer + 2 * h * h + 4 * h + 20 * (2 * h * h + 2 * h * v))
    assert shell.flops_per_sequence(128, 20) == expected
    # 6 * 85M encoder weights * 128 tokens = 65 GFLOP, plus attention scores and the 20-position MLM head
    assert expected == pytest.approx(69.9e9, rel=0.01)


def test_presets_and_config_errors():
    assert set(spec("bert").presets) == {"tiny", "mini", "small", "base", "large", "1.5b", "5b"}
    base = model_config("base", 30522)
    assert (base.num_hidden_layers, base.hidden_size, base.num_attention_heads, base.intermediate_size) == \
        (12, 768, 12, 3072)
    assert base.vocab_size == 30528
    large = model_config("large", 32000)
    assert (large.num_hidden_layers, large.hidden_size, large.num_attention_heads) == (24, 1024, 16)
    assert model_config("1.5b", 8).intermediate_size == 6400
    assert model_config("5b", 8).intermediate_size == 4 * 2560
    assert model_config("mini", 100, activation_checkpointing=True, hidden_dropout_prob=0.0).activation_checkpointing
    assert [padded_vocab_size(n) for n in (1, 8, 9, 30522)] == [8, 8, 16, 30528]
    with pytest.raises(ValueError, match="unknown model preset 'huge'"):
        model_config("huge", 100)
    with pytest.raises(ValueError, match="unknown model config key.*hidden_layers"):
        model_config("tiny", 100, hidden_layers=3)
    with pytest.raises(ValueError, match="not a multiple of num_attention_heads"):
        model_config("tiny", 100, num_attention_heads=3)
    with pytest.raises(ValueError, match="pad_token_id"):
        ModelConfig(vocab_size=8, pad_token_id=8)


def test_base_parameter_count_is_berts():
    torch.manual_seed(0)
    with torch.device("meta"):
        model = BertForPreTraining(model_config("base", 30522))
    assert model.num_parameters() == pytest.approx(110.1e6, rel=0.005)  # BERT-base: 110M


def test_the_mlm_loss_is_cross_entropy_with_its_gradient_and_counts_the_top_logits():
    """SummedCrossEntropy (one exponential pass for the masked-LM head): torch's summed cross-entropy and gradient,
    and the count of labels whose logit is the largest (argmax's, without ties)."""
    from pretrain.model.pretraining import SummedCrossEntropy

    torch.manual_seed(0)
    logits = (5 * torch.randn(40, 300, dtype=torch.float64)).requires_grad_()
    labels = torch.randint(0, 300, (40,))
    labels[:7] = logits.argmax(-1)[:7]  # some labels at the top logit
    loss, correct = SummedCrossEntropy.apply(logits, labels)
    (ours,) = torch.autograd.grad(0.5 * loss, logits)
    expected = torch.nn.functional.cross_entropy(logits, labels, reduction="sum")
    (theirs,) = torch.autograd.grad(0.5 * expected, logits)
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    assert correct.item() == (logits.argmax(-1) == labels).sum().item() >= 7 and not correct.requires_grad
