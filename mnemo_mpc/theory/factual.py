"""The factual-recall toy model (seed 004, slides "Toy model of factual recall" and "How many parameters do we
need?"; Nichani, Lee & Bietti 2024, "Understanding factual recall in transformers via associative memories", §4).

A fact is a triple (s, r, a*(s, r)) with subject s in S, relation r in R and attribute a*(s, r) in A_r, where the
answer sets A_r (D answers each) are disjoint. A prompt is a length-T sequence of noise tokens z_i in N into which
s and r are written at two distinct random positions among the first T-1, followed by an EOS token; the target
is a*(s, r). Vocabulary layout: subjects [0, S), relations [S, S+R), noise [S+R, S+R+|N|), EOS = S+R+|N|.
Answers are a separate output vocabulary [0, R*D) with A_r = [r*D, (r+1)*D).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mnemo_mpc.errors import InputError


@dataclass(frozen=True)
class FactualTask:
    n_subjects: int
    n_relations: int
    answers_per_relation: int
    n_noise: int
    seq_len: int
    facts: np.ndarray  # (S, R) int64: a*(s, r), in A_r

    @property
    def vocab_size(self) -> int:
        return self.n_subjects + self.n_relations + self.n_noise + 1

    @property
    def n_answers(self) -> int:
        return self.n_relations * self.answers_per_relation

    @property
    def n_facts(self) -> int:
        return self.n_subjects * self.n_relations

    @property
    def eos(self) -> int:
        return self.vocab_size - 1

    def answer_set(self, r: int) -> np.ndarray:
        d = self.answers_per_relation
        return np.arange(r * d, (r + 1) * d)


def make_factual_task(
    n_subjects: int,
    n_relations: int,
    answers_per_relation: int,
    n_noise: int | None = None,
    seq_len: int = 32,
    rng: np.random.Generator | None = None,
) -> FactualTask:
    """Random facts a*(s, r) ~ Unif(A_r), independently per (s, r) (Nichani et al.'s released task). The default
    noise vocabulary |N| = S + R follows their experiments."""
    for name, v in (
        ("n_subjects", n_subjects),
        ("n_relations", n_relations),
        ("answers_per_relation", answers_per_relation),
    ):
        if v < 1:
            raise InputError(f"make_factual_task: {name} must be >= 1, got {v}")
    n_noise = n_subjects + n_relations if n_noise is None else n_noise
    if n_noise < 1:
        raise InputError(f"make_factual_task: n_noise must be >= 1, got {n_noise}")
    if seq_len < 3:
        raise InputError(f"make_factual_task: seq_len must be >= 3 (subject, relation, EOS), got {seq_len}")
    rng = rng or np.random.default_rng(0)
    d = answers_per_relation
    facts = np.arange(n_relations)[None, :] * d + rng.integers(0, d, size=(n_subjects, n_relations))
    return FactualTask(n_subjects, n_relations, d, n_noise, seq_len, facts.astype(np.int64))


def sample_prompts(
    task: FactualTask,
    batch: int,
    rng: np.random.Generator,
    subjects: np.ndarray | None = None,
    relations: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(tokens (B, T), answers (B,), s (B,), r (B,)); (s, r) uniform unless given."""
    if batch < 1:
        raise InputError(f"sample_prompts: batch must be >= 1, got {batch}")
    s = rng.integers(0, task.n_subjects, size=batch) if subjects is None else np.asarray(subjects, dtype=np.int64)
    r = rng.integers(0, task.n_relations, size=batch) if relations is None else np.asarray(relations, dtype=np.int64)
    if s.shape != (batch,) or r.shape != (batch,):
        raise InputError(f"sample_prompts: subjects/relations must have shape ({batch},)")
    t = task.seq_len
    first = task.n_subjects + task.n_relations
    tokens = rng.integers(first, first + task.n_noise, size=(batch, t))
    # Two distinct positions among the first T-1: a random permutation's first two entries, vectorised.
    pos = np.argsort(rng.random((batch, t - 1)), axis=1)[:, :2]
    rows = np.arange(batch)
    tokens[rows, pos[:, 0]] = s
    tokens[rows, pos[:, 1]] = task.n_subjects + r
    tokens[:, -1] = task.eos
    return tokens, task.facts[s, r], s, r


def read_subject_relation(task: FactualTask, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Recover (s, r) from prompts; raises if a prompt does not hold exactly one subject and one relation."""
    tokens = np.asarray(tokens)
    is_s = tokens < task.n_subjects
    is_r = (tokens >= task.n_subjects) & (tokens < task.n_subjects + task.n_relations)
    if not ((is_s.sum(1) == 1).all() and (is_r.sum(1) == 1).all()):
        raise InputError("read_subject_relation: every prompt must contain exactly one subject and one relation")
    return tokens[is_s], tokens[is_r] - task.n_subjects


def relation_prior(task: FactualTask) -> np.ndarray:
    """p(a | r) = P_s(a*(s, r) = a) under uniform subjects: (R, n_answers). The "hallucination" predictor of the
    intermediate training phase (Nichani et al. 2024, Thm. on sequential learning; seed 004 "Training dynamics")."""
    prior = np.zeros((task.n_relations, task.n_answers))
    for r in range(task.n_relations):
        prior[r] = np.bincount(task.facts[:, r], minlength=task.n_answers) / task.n_subjects
    return prior


@torch.no_grad()
def recall_metrics(logits: Tensor, task: FactualTask, s: np.ndarray, r: np.ndarray) -> dict[str, float]:
    """Accuracy on facts and closeness to the relation-only predictor p(a|r):

    - acc: argmax = a*(s, r);
    - tv_truth / tv_prior: mean total variation of p_hat(.|prompt) to the one-hot truth and to p(.|r);
    - mass_relation: mean p_hat mass on the answer set A_r (knowing r, ignoring s);
    - prior_agreement: 1 - tv_prior (1 when the model predicts exactly with p(a|r))."""
    p_hat = logits.softmax(-1).double().cpu().numpy()
    truth = task.facts[s, r]
    prior = relation_prior(task)[r]
    onehot = np.zeros_like(p_hat)
    onehot[np.arange(len(truth)), truth] = 1.0
    d = task.answers_per_relation
    in_set = (np.arange(task.n_answers)[None, :] // d) == r[:, None]
    tv_prior = 0.5 * np.abs(p_hat - prior).sum(1).mean()
    return {
        "acc": float((p_hat.argmax(1) == truth).mean()),
        "tv_truth": float(0.5 * np.abs(p_hat - onehot).sum(1).mean()),
        "tv_prior": float(tv_prior),
        "prior_agreement": float(1.0 - tv_prior),
        "mass_relation": float((p_hat * in_set).sum(1).mean()),
    }
