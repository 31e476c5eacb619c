"""Factual-recall toy model (seed 004; Nichani, Lee & Bietti 2024) and smoke runs of both theory studies."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from mnemo_mpc.errors import InputError
from mnemo_mpc.experiments.factual_recall import bracket_threshold, fit_exponent, params_needed, transition
from mnemo_mpc.theory.factual import (
    make_factual_task,
    read_subject_relation,
    recall_metrics,
    relation_prior,
    sample_prompts,
)
from mnemo_mpc.theory.transformer import Transformer, TransformerConfig


@pytest.fixture(scope="module")
def task():
    return make_factual_task(12, 5, 4, seq_len=10, rng=np.random.default_rng(0))


def test_every_fact_maps_to_one_answer_in_its_relation_set(task):
    assert task.facts.shape == (12, 5)
    for r in range(5):
        assert np.isin(task.facts[:, r], task.answer_set(r)).all()
    # answer sets are disjoint
    sets = [set(task.answer_set(r)) for r in range(5)]
    assert sum(len(s) for s in sets) == len(set().union(*sets)) == task.n_answers


def test_prompt_layout(task):
    tokens, answers, s, r = sample_prompts(task, 500, np.random.default_rng(1))
    assert tokens.shape == (500, 10)
    assert (tokens[:, -1] == task.eos).all()
    s2, r2 = read_subject_relation(task, tokens)
    np.testing.assert_array_equal(s2, s)
    np.testing.assert_array_equal(r2, r)
    np.testing.assert_array_equal(answers, task.facts[s, r])
    noise = (tokens >= task.n_subjects + task.n_relations) & (tokens != task.eos)
    assert (noise.sum(1) == task.seq_len - 3).all()
    # subject and relation land anywhere among the first T-1 positions, in either order
    pos_s = np.argmax(tokens < task.n_subjects, axis=1)
    assert set(pos_s) == set(range(task.seq_len - 1))


def test_noise_tokens_do_not_change_the_answer(task):
    """Same (s, r) in many different noise contexts and positions: always the same target."""
    rng = np.random.default_rng(2)
    s, r = np.full(300, 3), np.full(300, 1)
    tokens, answers, _, _ = sample_prompts(task, 300, rng, s, r)
    assert len({tuple(t) for t in tokens}) > 250  # the contexts really differ
    assert (answers == task.facts[3, 1]).all()
    # and a model's prediction depends on the noise (the task is not trivially noise-free)
    model = Transformer(TransformerConfig(vocab_size=task.vocab_size, dim=16, n_layers=1, out_size=task.n_answers))
    with torch.no_grad():
        logits = model(torch.from_numpy(tokens), last_only=True)
    assert logits.std(0).max() > 0


def test_relation_prior_is_a_distribution_on_the_answer_set(task):
    prior = relation_prior(task)
    np.testing.assert_allclose(prior.sum(1), 1.0)
    for r in range(task.n_relations):
        outside = np.setdiff1d(np.arange(task.n_answers), task.answer_set(r))
        assert (prior[r, outside] == 0).all()
        np.testing.assert_allclose(
            prior[r, task.facts[0, r]] * task.n_subjects, (task.facts[:, r] == task.facts[0, r]).sum()
        )


def test_recall_metrics_on_truth_and_on_the_prior(task):
    s = np.repeat(np.arange(task.n_subjects), task.n_relations)
    r = np.tile(np.arange(task.n_relations), task.n_subjects)
    truth = torch.full((len(s), task.n_answers), -30.0)
    truth[np.arange(len(s)), task.facts[s, r]] = 30.0
    m = recall_metrics(truth, task, s, r)
    assert m["acc"] == 1.0 and m["tv_truth"] < 1e-6 and m["mass_relation"] == pytest.approx(1.0)
    hallucinating = torch.log(torch.from_numpy(relation_prior(task)[r]) + 1e-12)
    m = recall_metrics(hallucinating, task, s, r)
    assert m["tv_prior"] < 1e-6 and m["prior_agreement"] == pytest.approx(1.0)
    assert m["mass_relation"] == pytest.approx(1.0) and m["tv_truth"] > m["tv_prior"]


def test_bad_arguments_raise(task):
    with pytest.raises(InputError, match="n_subjects"):
        make_factual_task(0, 2, 2)
    with pytest.raises(InputError, match="seq_len"):
        make_factual_task(2, 2, 2, seq_len=2)
    with pytest.raises(InputError, match="exactly one subject"):
        read_subject_relation(task, np.full((1, 10), task.eos))
    with pytest.raises(InputError, match="last_only"):
        Transformer(TransformerConfig(vocab_size=5, dim=8, n_layers=2))(
            torch.zeros(1, 3, dtype=torch.long), last_only=True
        )


def test_last_only_path_matches_full_forward(task):
    """The gathered per-vocabulary projections + single query give the full model's last-position logits."""
    cfg = TransformerConfig(
        vocab_size=task.vocab_size, dim=16, n_layers=1, n_heads=3, head_dim=4, mlp_width=8, out_size=task.n_answers
    )
    model = Transformer(cfg, seed=1)
    tokens = torch.from_numpy(sample_prompts(task, 7, np.random.default_rng(3))[0])
    full = model(tokens)[:, -1]
    assert torch.allclose(model(tokens, last_only=True), full, rtol=1e-5, atol=1e-5)


def test_one_layer_transformer_learns_a_small_fact_table():
    task = make_factual_task(6, 3, 3, seq_len=6, rng=np.random.default_rng(4))
    from mnemo_mpc.experiments.factual_recall import train

    model = Transformer(
        TransformerConfig(
            vocab_size=task.vocab_size, dim=32, n_layers=1, n_heads=4, head_dim=8, out_size=task.n_answers
        )
    )
    res = train(task, model, steps=300, batch=128, lr=2e-2, eval_every=50, seed=0, stop_at=1.0)
    assert res["best_acc"] == 1.0


def test_params_needed_interpolates_and_exponent_fit():
    rows = [{"acc": 0.5, "p": 100}, {"acc": 0.9, "p": 200}, {"acc": 1.0, "p": 400}]
    assert params_needed(rows, 0.95, "p") == pytest.approx(np.exp(np.log(200) + 0.5 * np.log(2)))
    assert params_needed(rows, 0.4, "p") == 100
    assert params_needed(rows[:2], 0.95, "p") is None
    assert fit_exponent([10, 20, 40], [30.0, 60.0, 120.0]) == pytest.approx(1.0)
    assert fit_exponent([10, 20], [5.0, None]) is None


def test_params_needed_uses_the_last_failure_below_the_first_stable_success():
    """A lucky small pass below a failure does not count: the crossing is above the largest failing size."""
    rows = [{"acc": 1.0, "p": 50}, {"acc": 0.5, "p": 100}, {"acc": 0.9, "p": 200}, {"acc": 1.0, "p": 400}]
    assert params_needed(rows, 0.95, "p") == pytest.approx(np.exp(np.log(200) + 0.5 * np.log(2)))
    tr = transition(rows, 0.95)
    assert (tr["last_fail"], tr["first_pass"], tr["n_below"], tr["n_above"]) == (2, 3, 2, 1)


def test_transition_is_resolved_only_when_the_failing_size_plateaued():
    rows = [{"acc": 0.8, "p": 1, "size": 1, "stop": "plateau"}, {"acc": 1.0, "p": 2, "size": 2, "stop": "threshold"}]
    assert transition(rows, 0.99)["resolved"]
    rows[0]["stop"] = "budget"
    tr = transition(rows, 0.99)
    assert not tr["resolved"] and "still improving" in tr["why"]
    assert not transition(rows[1:], 0.99)["resolved"]  # the smallest size passes: only an upper bound
    assert transition(rows[:1], 0.99)["first_pass"] is None
    rows.append({"acc": 0.97, "p": 4, "size": 4, "stop": "plateau"})  # a larger size falls back below it
    tr = transition(rows, 0.99)
    assert tr["first_pass"] is None and not tr["resolved"] and "not monotone" in tr["why"]


def test_bracket_threshold_trains_failures_below_and_successes_above():
    sizes = (1, 2, 3, 4, 6, 8, 11, 16)
    for start in (0, 3, 7):
        tried = []

        def passes(z, tried=tried):
            tried.append(z)
            return z >= 6

        bracket_threshold(sizes, start, passes, n_below=2, n_above=2)
        assert {3, 4, 6, 8} <= set(tried)
        assert not {1, 16} & set(tried) or start in (0, 7)  # the walk only goes where it has to
    tried = []
    bracket_threshold(sizes, 0, lambda z: tried.append(z) or False)
    assert tried == list(sizes)  # nothing passes: the whole grid is tried once per size


def _smoke(name, tmp_path, **overrides):
    from mnemo_mpc.experiments import get_study
    from mnemo_mpc.experiments.runner import RunContext

    study = get_study(name)
    cfg = dataclasses.replace(study.quick_config(), **overrides)
    ctx = RunContext(name=name, out_dir=tmp_path, mode="quick")
    per_seed = {0: study.run_seed(cfg, 0, ctx)}
    json.dumps(per_seed)  # seeds must be JSON-serialisable for the runner's resume files
    summary = study.summarize(cfg, per_seed, ctx)
    for fig in summary.figures:
        assert (tmp_path / fig).stat().st_size > 1000
    return summary


def test_factual_recall_study_smoke(tmp_path):
    s = _smoke(
        "factual_recall",
        tmp_path,
        subjects=(4, 8),
        mlp_widths=(8,),
        attn_heads=(4,),
        steps=20,
        eval_every=10,
        dyn_subjects=4,
        dyn_steps=20,
        dyn_eval_every=10,
    )
    assert set(s.claims) == {
        "params_linear_in_facts_attn_mlp",
        "params_linear_in_facts_attn_only",
        "hallucination_phase",
        "converges_to_facts",
    }
    assert all(isinstance(v, bool) for v in s.claims.values())


def test_induction_head_study_smoke(tmp_path):
    s = _smoke(
        "induction_head",
        tmp_path,
        seq_len=24,
        dim=32,
        steps=20,
        batch=8,
        eval_every=10,
        eval_batch=16,
        probe_dim=32,
        probe_seq_len=24,
        probe_steps=20,
        probe_batch=8,
        probe_every=10,
    )
    assert set(s.claims) == {"two_layer_solves", "one_layer_fails", "probe_order_wov2_wkq2_wkq1"}
    assert s.numbers["text_source"].startswith("CPython stdlib pydoc_data")
