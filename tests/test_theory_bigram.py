"""In-context bigram task (seed 004 / Birth of a Transformer): text source, generator statistics, probes, models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from mnemo_mpc.errors import InputError
from mnemo_mpc.theory.bigram import (
    InContextBigramTask,
    bigram_model_from_text,
    default_bigram_model,
    in_context_accuracy,
    induction_probes,
    load_english_text,
    memory_recall,
)
from mnemo_mpc.theory.transformer import Transformer, TransformerConfig


@pytest.fixture(scope="module")
def bigrams():
    return default_bigram_model()


@pytest.fixture(scope="module")
def batch(bigrams):
    task = InContextBigramTask(bigrams, n_triggers=5, seq_len=256)
    return task, task.sample(400, np.random.default_rng(0))


def test_text_source_loads_offline_and_is_english():
    text = load_english_text()
    assert len(text) > 100_000
    assert text.isascii()
    words = text.lower().split()
    # English function words dominate a documentation corpus.
    for w in ("the", "of", "is", "and"):
        assert words.count(w) > 500


def test_bigram_counts_match_definition():
    m = bigram_model_from_text("abab" + "c", source="toy")
    assert m.chars == "abc"
    np.testing.assert_allclose(m.unigram, [2 / 5, 2 / 5, 1 / 5])
    # a->b twice; b->a once, b->c once; c has no successor: falls back to the unigram.
    np.testing.assert_allclose(m.cond[0], [0, 1, 0])
    np.testing.assert_allclose(m.cond[1], [0.5, 0, 0.5])
    np.testing.assert_allclose(m.cond[2], m.unigram)
    np.testing.assert_allclose(m.cond.sum(1), 1.0)


def test_triggers_are_most_frequent_tokens(bigrams):
    task = InContextBigramTask(bigrams, n_triggers=5)
    top = np.sort(bigrams.unigram)[::-1][:5]
    np.testing.assert_allclose(np.sort(bigrams.unigram[task.triggers])[::-1], top)
    assert bigrams.decode(task.triggers[:1]) == " "


def test_each_trigger_always_followed_by_its_output(batch):
    task, b = batch
    tok = b.tokens
    for k, q in enumerate(task.triggers):
        rows, cols = np.nonzero(tok[:, :-1] == q)
        np.testing.assert_array_equal(tok[rows, cols + 1], b.outputs[rows, k])
    assert not np.isin(b.outputs, task.triggers).any()


def test_occurrence_counts_trigger_repeats(batch):
    task, b = batch
    is_trig = np.isin(b.tokens[:, :-1], task.triggers)
    assert ((b.occurrence[:, :-1] > 0) == is_trig).all()
    row = b.tokens[0, :-1]
    for q in task.triggers:
        pos = np.nonzero(row == q)[0]
        np.testing.assert_array_equal(b.occurrence[0, pos], np.arange(1, len(pos) + 1))


def _chi2_pvalue(observed: np.ndarray, expected_p: np.ndarray) -> float:
    n = observed.sum()
    exp = expected_p * n
    big = exp >= 5  # merge sparse cells so the chi-square approximation is valid
    obs_c = np.append(observed[big], observed[~big].sum())
    exp_c = np.append(exp[big], exp[~big].sum())
    keep = exp_c > 0
    return float(stats.chisquare(obs_c[keep], exp_c[keep]).pvalue)


def test_non_trigger_transitions_follow_global_bigrams(bigrams, batch):
    """Transitions out of non-trigger tokens are pi_b: chi-square goodness of fit per frequent source token,
    Bonferroni-corrected at family-wise level 1e-3 (fixed seed, so the test is deterministic)."""
    task, b = batch
    prev, nxt = b.tokens[:, :-1].ravel(), b.tokens[:, 1:].ravel()
    sources = [i for i in np.argsort(-bigrams.unigram) if i not in task.triggers][:10]
    pvals = []
    for i in sources:
        obs = np.bincount(nxt[prev == i], minlength=bigrams.n_tokens)
        assert obs.sum() > 500
        pvals.append(_chi2_pvalue(obs, bigrams.cond[i]))
    assert min(pvals) > 1e-3 / len(sources), pvals
    # The same test rejects a wrong model: the bigram row of another source token.
    i = sources[0]
    obs = np.bincount(nxt[prev == i], minlength=bigrams.n_tokens)
    assert _chi2_pvalue(obs, bigrams.cond[sources[1]]) < 1e-6


def test_first_token_follows_unigram(bigrams):
    task = InContextBigramTask(bigrams, n_triggers=3, seq_len=2)
    b = task.sample(20_000, np.random.default_rng(1))
    obs = np.bincount(b.tokens[:, 0], minlength=bigrams.n_tokens)
    assert _chi2_pvalue(obs, bigrams.unigram) > 1e-4


def test_bigram_output_law_draws_from_pi_b(bigrams):
    task = InContextBigramTask(bigrams, n_triggers=2, seq_len=4, output_law="bigram")
    out = task.sample_outputs(20_000, np.random.default_rng(2))
    q = task.triggers[0]
    p = bigrams.cond[q, task.non_triggers] / bigrams.cond[q, task.non_triggers].sum()
    obs = np.bincount(np.searchsorted(task.non_triggers, out[:, 0]), minlength=len(task.non_triggers))
    assert _chi2_pvalue(obs, p) > 1e-4


def test_bad_task_arguments_raise(bigrams):
    with pytest.raises(InputError, match="n_triggers"):
        InContextBigramTask(bigrams, n_triggers=0)
    with pytest.raises(InputError, match="output_law"):
        InContextBigramTask(bigrams, output_law="zipf")
    with pytest.raises(InputError, match="at least 2"):
        bigram_model_from_text("a")


def test_in_context_accuracy_counts_second_occurrences_only():
    logits = torch.zeros(1, 4, 3)
    logits[0, :, 0] = 1.0  # always predicts token 0
    targets = torch.tensor([[0, 1, 0, 2]])
    occ = torch.tensor([[1, 2, 3, 0]])
    assert in_context_accuracy(logits, targets, occ, 2) == pytest.approx(0.5)
    assert in_context_accuracy(logits, targets, occ, 1) == pytest.approx(2 / 3)


def test_memory_recall_of_outer_product_memory():
    """R(W_*, W_*) = 1 for W_* = sum_i u_i e_i^T with near-orthonormal random embeddings (seed 004, "Transformer
    weights as associative memories"), and R of a zero memory is chance-level."""
    g = torch.Generator().manual_seed(0)
    d, m = 256, 40
    e, u = torch.randn(m, d, generator=g) / d**0.5, torch.randn(m, d, generator=g) / d**0.5
    w = u.T @ e
    assert memory_recall(w, e, u, torch.arange(m)) == 1.0
    assert memory_recall(torch.randn(d, d, generator=g), e, u, torch.arange(m)) < 0.3


def test_induction_probes_read_the_construction(bigrams):
    """Plant the slides' induction-head memories (W_KQ^1 = sum_t p_t p_{t-1}^T, W_KQ^2 = sum_k e_k tilde-e_k^T,
    W_OV^2 = sum_k u_k e_k^T) in the simplified model: every probe reads 1; at random init they read ~chance."""
    n, d, t = bigrams.n_tokens, 256, 64
    cfg = TransformerConfig(vocab_size=n, dim=d, n_layers=2, max_len=t, identity_query=True)
    model = Transformer(cfg, seed=0)
    task = InContextBigramTask(bigrams, n_triggers=5, seq_len=t)
    before = induction_probes(model, task.triggers, t)
    assert before["wov2"] < 0.2 and before["wkq1"] < 0.3
    e, u, p = model.tok_emb, model.unembed, model.pos_emb
    q = torch.as_tensor(task.triggers)
    with torch.no_grad():
        a0, a1 = model.layers[0].attn, model.layers[1].attn
        a0.wk.copy_(p[1:].T @ p[:-1])  # W_KQ = W_K^T (W_Q = I) = sum_t p_{t-1} p_t^T
        remapped = e @ model.w_ov(0).T
        a1.wk.copy_(e[q].T @ remapped[q])  # W_KQ^2 = sum_k tilde-e_k e_k^T
        a1.wo.copy_(u.T @ e @ torch.linalg.pinv(a1.wv))
    after = induction_probes(model, task.triggers, t)
    assert after == {"wov2": 1.0, "wkq2": 1.0, "wkq2_triggers": 1.0, "wkq1": 1.0, "wkq1_first_half": 1.0}


def test_transformer_shapes_and_kq_ov_readouts():
    cfg = TransformerConfig(vocab_size=11, dim=16, n_layers=2, n_heads=2, max_len=9, mlp_width=32)
    model = Transformer(cfg, seed=3)
    x = torch.randint(0, 11, (4, 9))
    logits, attns = model(x, return_attn=True)
    assert logits.shape == (4, 9, 11)
    assert attns[0].shape == (4, 2, 9, 9)
    # causal: no weight on future positions; rows sum to one
    assert torch.all(attns[0].triu(1) == 0)
    assert torch.allclose(attns[1].sum(-1), torch.ones(4, 2, 9))
    # W_KQ reproduces the head's pre-softmax scores
    h = model.embed(x)
    a = model.layers[0].attn
    scores = h @ model.w_kq(0, 1).T @ h.transpose(1, 2) / (a.d_head**0.5)  # [b, t, s]
    ref = torch.softmax(scores.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float("-inf")), -1)
    assert torch.allclose(ref, attns[0][:, 1], atol=1e-6)
    assert model.w_ov(1, 0).shape == (16, 16)
    # frozen embeddings are buffers, not trained
    assert "tok_emb" not in dict(model.named_parameters())
    with pytest.raises(InputError, match="max_len"):
        model(torch.zeros(1, 10, dtype=torch.long))


def test_frozen_parameters_and_unknown_names():
    cfg = TransformerConfig(vocab_size=5, dim=8, n_layers=2, identity_query=True, frozen=("layers.0.attn.wv",))
    model = Transformer(cfg)
    assert not model.layers[0].attn.wv.requires_grad and model.layers[0].attn.wq is None
    assert model.n_trainable() == 2 * 64 + 3 * 64  # layer 0: wk, wo; layer 1: wk, wv, wo
    with pytest.raises(InputError, match="unknown parameter"):
        Transformer(TransformerConfig(vocab_size=5, dim=8, frozen=("layers.9.attn.wv",)))
    with pytest.raises(InputError, match="divisible"):
        TransformerConfig(vocab_size=5, dim=10, n_heads=3)
