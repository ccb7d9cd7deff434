"""Hugging Face transformers models through the package, as users pass
them: a BertForSequenceClassification, DistilBertForSequenceClassification
and GPT2LMHeadModel built from a config (nothing is downloaded),
memfit.train(model=module, ...), and the trained weights back in the module
with load_state_dict(strict=True). Run by ctest (python_hf_models) with
PYTHONPATH at build/python and deps/hf-datasets (make deps-hf)."""
import copy

import numpy as np
import pytest

import memfit

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

# Plain SGD at a constant rate, nothing held out: the run's steps are the
# module's own training steps on the same batch.
SGD = dict(optimizer="sgd", lr=0.1, momentum=0.0, weight_decay=0, schedule="constant", eval_every=0,
           val_fraction=0, threads=2, progress=False)


def losses(run):
    return [h["train_loss"] for h in run.history if "train_loss" in h]


def classifier(kind):
    torch.manual_seed(0)
    if kind == "bert":
        return transformers.BertForSequenceClassification(transformers.BertConfig(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=32, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    return transformers.DistilBertForSequenceClassification(transformers.DistilBertConfig(
        vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=32, num_labels=3,
        dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0))


def torch_losses(module, x, y, steps, mask=None):
    opt = torch.optim.SGD(module.parameters(), lr=SGD["lr"])
    out = []
    kw = {} if mask is None else {"attention_mask": torch.from_numpy(mask)}
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(module(input_ids=torch.from_numpy(x), **kw).logits,
                                                 torch.from_numpy(y))
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_a_sequence_classifier_trains_as_in_pytorch_and_loads_back(kind, tmp_path):
    module = classifier(kind)
    reference = copy.deepcopy(module)
    rng = np.random.default_rng(0)
    # One padded batch of 4 with its attention mask, as a tokenizer gives
    # them, so that each step sees the same examples in any order. The
    # module is exported taking the mask (its forward's second argument),
    # and memfit's attention hides the padded keys as PyTorch's does.
    lengths = np.array([12, 5, 9, 3])
    mask = (np.arange(12)[None, :] < lengths[:, None]).astype(np.int64)
    x = rng.integers(1, 100, (4, 12)).astype(np.int64) * mask
    y = rng.integers(0, 3, 4).astype(np.int64)
    run = memfit.train(model=module, example_input=torch.zeros(4, 12, dtype=torch.long),
                       data=({"input_ids": x, "attention_mask": mask}, y), batch=4, steps=4, out=tmp_path / kind, **SGD)
    want = torch_losses(reference, x, y, 4, mask)
    # f32 sums in other orders through 4 steps: 1e-4 relative, where a
    # wrong mask, scale or embedding row is O(1e-2) by the second step
    # (the same batch unmasked differs by 4e-5 already at step 0).
    assert losses(run) == pytest.approx(want, rel=1e-4)
    unmasked = torch_losses(copy.deepcopy(classifier(kind)), x, y, 2)
    assert abs(unmasked[1] - want[1]) > 1e-5
    run.load_into(module)  # strict: every tensor of the module, with its shape
    for (name, got), (_, ref) in zip(module.state_dict().items(), reference.state_dict().items()):
        assert np.allclose(got.numpy(), ref.numpy(), atol=1e-4), name


def test_requires_grad_false_freezes_the_backbone(tmp_path):
    module = classifier("bert")
    for p in module.bert.parameters():
        p.requires_grad = False
    before = {k: v.clone() for k, v in module.state_dict().items()}
    rng = np.random.default_rng(1)
    x = rng.integers(1, 100, (8, 12)).astype(np.int64)
    y = rng.integers(0, 3, 8).astype(np.int64)
    run = memfit.train(model=module, example_input=torch.zeros(4, 12, dtype=torch.long), data=(x, y), batch=4,
                       steps=3, out=tmp_path / "frozen", **SGD)
    run.load_into(module)
    after = module.state_dict()
    changed = sorted(k for k in after if not torch.equal(after[k], before[k]))
    assert changed == ["classifier.bias", "classifier.weight"]


def test_gpt2_trains_on_text_and_loads_back(tmp_path):
    # A character corpus of exactly 32 symbols (31 letters and the
    # newline): the model's vocabulary.
    symbols = [chr(ord("a") + k) for k in range(26)] + list("ABCDE")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join("".join(symbols[(line * 7 + k) % 31] for k in range(20)) + "\n" for line in range(200)))
    torch.manual_seed(0)
    module = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=32, n_positions=32, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0))
    plan = memfit.plan(model=module, example_input=torch.zeros(4, 16, dtype=torch.long), batch=4, data=str(corpus))
    assert plan.peak_bytes > 0
    run = memfit.train(model=module, example_input=torch.zeros(4, 16, dtype=torch.long), data=str(corpus), batch=4,
                       steps=30, optimizer="adamw", lr=3e-3, eval_every=0, threads=2, progress=False,
                       out=tmp_path / "gpt2")
    got = losses(run)
    assert np.mean(got[-5:]) < 0.8 * np.mean(got[:5])
    run.load_into(module)  # the tied lm_head comes from transformer.wte
    assert torch.equal(module.lm_head.weight, module.transformer.wte.weight)


def test_attention_mask_used_elsewhere_is_refused(tmp_path):
    class MaskedMean(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(50, 8)
            self.fc = torch.nn.Linear(8, 2)

        def forward(self, input_ids, attention_mask=None):
            h = self.emb(input_ids) * attention_mask.unsqueeze(-1).float()
            return self.fc(h.mean(1))

    x = np.ones((4, 6), np.int64)
    with pytest.raises(memfit.ModelError, match=r"node '/Mul' \(Mul\): reads .* computed from attention_mask"):
        memfit.train(model=MaskedMean(), example_input=torch.zeros(2, 6, dtype=torch.long),
                     data=({"input_ids": x, "attention_mask": np.ones_like(x)}, np.zeros(4, np.int64)), batch=4,
                     steps=1, out=tmp_path / "mm", **SGD)
