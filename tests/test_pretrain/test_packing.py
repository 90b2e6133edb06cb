"""Packed micro-batches: the planner, the packed layout, and the model on it -- same losses and gradients as the
same instances unpacked, and no attention across instances, for every attention kernel that runs on CPU."""
import numpy as np
import pytest
import torch

from pretrain.model.attention import instance_lengths, token_layout
from pretrain.config import model_config
from pretrain.model.bert.model import BertForPreTraining
from pretrain.data.packing import pack_batch, plan_rows
from pretrain_batches import nvidia_rows

VOCAB, LENGTH, PREDICTIONS = 203, 32, 6
LENGTHS = [32, 9, 20, 5, 12, 30, 3, 17, 8, 24]


def hdf5_batch(lengths=LENGTHS, seed=0):
    return nvidia_rows(lengths, LENGTH, PREDICTIONS, VOCAB, seed)


def test_first_fit_decreasing_places_every_instance_once_within_capacity():
    row, offset = plan_rows([6, 5, 4, 3, 2, 2], capacity=8)
    rows = [sorted((offset[i], i) for i in range(6) if row[i] == r) for r in range(row.max() + 1)]
    assert [[i for _, i in r] for r in rows] == [[0, 4], [1, 3], [2, 5]]  # 6+2, 5+3, 4+2: three rows, not four
    lengths = np.array([6, 5, 4, 3, 2, 2])
    for r in range(row.max() + 1):
        members = np.nonzero(row == r)[0]
        ends = sorted((offset[i], offset[i] + lengths[i]) for i in members)
        assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:])) and ends[-1][1] <= 8  # no overlap, fits


def test_packed_layout_keeps_each_instance_whole_with_its_own_positions():
    batch = hdf5_batch()
    packed = pack_batch(batch)
    assert packed["input_ids"].shape[0] == 6  # 160 tokens: at least 5 rows of 32; first-fit decreasing needs 6
    assert packed["cls_positions"].tolist() == sorted(packed["cls_positions"].tolist())  # row-major
    seen = []
    for k, start in enumerate(packed["cls_positions"].tolist()):
        r, c = divmod(start, LENGTH)
        n = int((packed["attention_mask"][r] == packed["attention_mask"][r, c]).sum())
        i = LENGTHS.index(n)  # the lengths are all different
        seen.append(i)
        assert torch.equal(packed["input_ids"][r, c:c + n], batch["input_ids"][i, :n])
        assert packed["position_ids"][r, c:c + n].tolist() == list(range(n))
        assert torch.equal(packed["token_type_ids"][r, c:c + n], batch["token_type_ids"][i, :n])
        assert torch.equal(packed["masked_lm_positions"][k], batch["masked_lm_positions"][i])
        assert packed["next_sentence_labels"][k] == batch["next_sentence_labels"][i]
    assert sorted(seen) == list(range(len(LENGTHS)))
    assert int((packed["attention_mask"] != 0).sum()) == sum(LENGTHS)
    assert instance_lengths(packed["attention_mask"]).tolist() == [LENGTHS[i] for i in seen]
    assert instance_lengths(batch["attention_mask"]).tolist() == LENGTHS


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    config = model_config("tiny", VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                          max_position_embeddings=LENGTH)
    return BertForPreTraining(config).train()  # train mode: dropout is off, but the training path runs


def losses_and_gradients(model, batch):
    model.zero_grad()
    out = model(**batch)
    out.loss.backward()
    return out, {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("kernel", ["mask", "nested"])
def test_packed_batch_gives_the_losses_and_gradients_of_the_same_instances_unpacked(tiny, kernel):
    batch = hdf5_batch()
    tiny.attention = "mask"
    expected, expected_grads = losses_and_gradients(tiny, batch)
    tiny.attention = kernel
    for layout in (batch, pack_batch(batch)):
        out, grads = losses_and_gradients(tiny, layout)
        for name in ("loss", "mlm_loss", "nsp_loss"):
            torch.testing.assert_close(getattr(out, name), getattr(expected, name), rtol=1e-5, atol=1e-6)
        for name in ("mlm_correct", "mlm_count", "nsp_correct", "nsp_count"):
            assert getattr(out, name).item() == getattr(expected, name).item(), name
        for name, grad in expected_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    tiny.attention = "mask"


def test_block_diagonal_mask_lets_no_query_see_another_instance():
    packed = pack_batch(hdf5_batch())
    mask = token_layout(packed["attention_mask"], packed=True, kernel="mask").mask[:, 0]
    number = packed["attention_mask"]
    for r in range(number.size(0)):
        for i in range(LENGTH):
            for j in range(LENGTH):
                assert mask[r, i, j].item() == (number[r, i] == number[r, j]).item()


@pytest.mark.parametrize("kernel", ["mask", "nested"])
def test_no_attention_weight_crosses_instances(tiny, kernel):
    """Changing every token of one instance changes no output of the other instances in its row (and the
    gradient of their outputs with respect to its embeddings is zero)."""
    tiny.attention = kernel
    packed = pack_batch(hdf5_batch())
    row = int(torch.nonzero((packed["attention_mask"].amax(1) >= 3))[0])  # a row with three instances or more
    number = packed["attention_mask"][row]
    changed = packed["input_ids"].clone()
    changed[row][number == 2] = torch.randint(5, VOCAB, (int((number == 2).sum()),))
    args = ("token_type_ids", "attention_mask", "position_ids")

    def encode(input_ids):
        hidden, layout = tiny.bert(input_ids, *(packed[k] for k in args), packed=True)
        rows, length = input_ids.shape  # padding positions read the first token: not compared
        return hidden[layout.flat_index(torch.arange(rows * length))].view(rows, length, -1)

    with torch.no_grad():
        before, after = encode(packed["input_ids"]), encode(changed)
    others = (number != 2) & (number != 0)
    assert torch.equal(before[row][others], after[row][others])
    assert not torch.allclose(before[row][number == 2], after[row][number == 2])

    embeddings = tiny.bert.embeddings.word_embeddings
    captured = []

    def keep_grad(module, inputs, output):
        output.retain_grad()
        captured.append(output)

    hook = embeddings.register_forward_hook(keep_grad)
    try:
        hidden = encode(packed["input_ids"])
        hidden[row][others].sum().backward()
    finally:
        hook.remove()
        tiny.attention = "mask"
    grad = captured[0].grad  # the real tokens', row-major
    grad = torch.zeros(*packed["input_ids"].shape, grad.size(-1)).view(-1, grad.size(-1)).index_copy(
        0, torch.nonzero(packed["attention_mask"].reshape(-1), as_tuple=True)[0], grad).view(
        *packed["input_ids"].shape, -1)
    assert grad[row][number == 2].abs().max() == 0
    assert grad[row][others].abs().max() > 0



def test_packed_loader_reads_the_same_instances_and_positions_as_the_unpacked_one(tmp_path, write_dataset):
    from wiki2bert_core.wordpiece import read_vocab
    from pretrain.data.loader import make_loader, open_data

    variant = write_dataset(tmp_path, [40, 30])
    vocab_size = len(read_vocab(variant / "vocab.txt"))
    data = open_data(variant, 32, vocab_size)
    for plain, packed, _ in zip(make_loader(data, 16, vocab_size, seed=3, workers=0),
                                make_loader(data, 16, vocab_size, seed=3, workers=0, pack=True), range(6)):
        assert packed["data_state"] == plain["data_state"]
        assert packed["input_ids"].shape[0] < 16  # the instances are 8..32 tokens long: several share a row
        assert torch.equal(packed["input_ids"], pack_batch(plain)["input_ids"])
        assert sorted(packed["next_sentence_labels"].tolist()) == sorted(plain["next_sentence_labels"].tolist())
        assert int((packed["attention_mask"] != 0).sum()) == int(plain["attention_mask"].sum())


def test_choose_attention_keeps_the_fastest_kernel_that_runs():
    import time

    from pretrain.model.attention import choose_attention

    def run_step(kernel):
        if kernel == "nested":
            raise RuntimeError("no backend")  # a kernel the device cannot run is left out
        time.sleep(0.001)

    kernel, seconds = choose_attention(run_step, torch.device("cpu"), repeats=1)
    assert kernel == "mask" and set(seconds) == {"mask"}
    kernel, seconds = choose_attention(lambda k: time.sleep(0.02 if k == "mask" else 0.001), torch.device("cpu"))
    assert kernel == "nested" and seconds["nested"] < seconds["mask"]
