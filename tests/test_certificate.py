"""Certificates (probes.circuits.certificate): a circuit checked on every input of a domain catches
a case a 64-pair faithfulness misses; task domains (tasks.base.Domain) through the plugin interface."""

from __future__ import annotations

import pytest
import torch

from models import ModelSpec
from models.graph import Edge, Embed, Head, Input, Logits, graph_of
from probes.circuits.certificate import CertificateBudget, Inputs, certify, task_inputs
from probes.circuits.truth.planted import LOUD, Weights, attend_position, pairs_batch

WORDS = 64  # the last word is the rare case: its own head carries it


def case_split():
    """`f w ?` -> w. L0H0 copies words 0..62 from position 1 to the answer dims, L0H1 copies word
    63 alone: a case split whose second case is 1 input in 64."""
    spec = ModelSpec(
        n_layers=1,
        d_model=2 * WORDS + 4,
        n_heads=2,
        mlp=False,
        norm=None,
        scale_scores=False,
        n_ctx=3,
        d_vocab=WORDS + 1,
    )
    w = Weights(spec)
    position, answer = list(range(WORDS + 1, WORDS + 4)), list(range(WORDS + 4, 2 * WORDS + 4))
    w.state["embed.weight"][:, : WORDS + 1] = torch.eye(WORDS + 1)
    w.state["pos_embed.weight"][:, position] = torch.eye(3)
    for head, words in ((0, range(WORDS - 1)), (1, [WORDS - 1])):
        attend_position(w, 0, head, position, position[1])
        for i, word in enumerate(words):
            w.head(0, head, "v")[i, word] = 1.0
            w.head(0, head, "o")[answer[word], i] = 1.0
    w.state["unembed.weight"][:WORDS, answer[0] : answer[-1] + 1] = LOUD * torch.eye(WORDS)
    return spec, w.load()


def pairs(indices: list[int]):
    """Input i: filler i // WORDS, word i % WORDS; its partner another word."""
    index = torch.tensor(indices)
    filler, word = index // WORDS, index % WORDS
    other = (word + 1 + filler % (WORDS - 1)) % WORDS
    ask = torch.full_like(word, WORDS)
    tokens = torch.stack([filler, word, ask, word], 1)
    counterfactual = torch.stack([filler, other, ask, other], 1)
    return pairs_batch(tokens, counterfactual, 2, word, other)


def test_certificate_catches_the_case_the_64_pairs_miss():
    from probes.circuits.faithfulness import normalised
    from probes.circuits.oracle import circuit_outcomes

    spec, model = case_split()
    graph = graph_of(spec)
    missing = {Edge(Embed(), Input(Head(0, 0), "v")), Edge(Head(0, 0), Input(Logits()))}  # no L0H1 edges
    sample = pairs(torch.randperm(WORDS * WORDS, generator=torch.Generator().manual_seed(0))[:64].tolist())
    empty, full, circuit = circuit_outcomes(model, sample, graph, [[], graph.edges, missing])
    assert normalised([circuit.metric], empty.metric, full.metric)[0] >= 0.9  # holds on 64 pairs

    inputs = Inputs(WORDS * WORDS, pairs, lambda i: f"filler {i // WORDS} word {i % WORDS}", "every filler x word")
    found = certify(model, graph, missing, inputs)
    assert found.exhaustive and not found.certified
    # every input whose word is the rare one, but filler 63 x word 63: its partner's run leaks e^-30 of
    # the filler (token 63) into the answer, a top token kept by a hair (its deviation is still 10)
    assert found.failing >= WORDS - 1 and found.worst == pytest.approx(LOUD)
    assert all(f.text.endswith(f"word {WORDS - 1}") or f.deviation > 0 for f in found.failures)
    whole = certify(
        model, graph, missing | {Edge(Embed(), Input(Head(0, 1), "v")), Edge(Head(0, 1), Input(Logits()))}, inputs
    )
    assert whole.certified and whole.share == 1.0 and whole.worst < 1e-4 * whole.scale


def test_a_domain_beyond_the_budget_is_an_estimate_with_a_bound():
    spec, model = case_split()
    graph = graph_of(spec)
    inputs = Inputs(WORDS * WORDS, pairs, str, "every filler x word")
    found = certify(model, graph, graph.edges, inputs, budget=CertificateBudget(inputs=100, sample=200))
    assert not found.exhaustive and found.checked == 200 and found.failing == 0
    assert not found.certified  # a sample never certifies
    assert 0 < found.failing_bound < 0.05  # 95% Wilson upper bound on the failing share


@pytest.mark.parametrize("task_name", ["winograd", "induction"])
def test_task_domains_are_checked_examples(task_name):
    from tasks.registry import get_task_class
    from tasks.validate import validate_domain

    task = get_task_class(task_name)()
    domain = validate_domain(task)
    assert domain is not None and domain.size > 0
    inputs = task_inputs(task, domain)
    batch = inputs.batch(domain.sample(4, 1))
    assert len(batch) == 4 and batch.counterfactual is not None


def test_winograd_domain_is_every_sentence_of_every_split():
    from tasks.winograd import WinogradTask

    task = WinogradTask()
    domain = task.domain()
    every = {domain.example(i).tokens for i in range(domain.size)}
    splits = task.generate(0)
    assert {e.tokens for split in splits.values() for e in split} == every
    assert len(every) == domain.size


def test_a_broken_domain_is_one_line():
    from models import UsageError
    from tasks.base import Domain
    from tasks.validate import validate_domain
    from tasks.winograd import WinogradTask

    class Broken(WinogradTask):
        name = "broken-domain"

        def domain(self):
            return Domain(3, lambda i: 1 / 0)

    with pytest.raises(UsageError, match="domain\\(\\)\\.example\\(0\\) raised ZeroDivisionError"):
        validate_domain(Broken())


def test_the_report_sentence_says_certified_or_where_it_fails():
    from probes.report.certificate_part import CertificateRun, sentence

    spec, model = case_split()
    graph = graph_of(spec)
    inputs = Inputs(WORDS * WORDS, pairs, lambda i: f"word {i % WORDS}", "every filler x word")
    one = [e for e in graph.edges if e.sender != Head(0, 1)]
    failing = sentence(CertificateRun("m", 0, 64, 0.97, certify(model, graph, one, inputs)))
    assert (
        "holds on 64 pairs (97% of the gap); fails on " in failing
        and f'of 4096 inputs (every filler x word; e.g. "word {WORDS - 1}"' in failing
    )
    whole = sentence(CertificateRun("m", 0, 64, 1.0, certify(model, graph, graph.edges, inputs)))
    assert "certified on all 4096 inputs (every filler x word): every answer kept" in whole


def test_a_domain_chunk_is_made_once_per_process(monkeypatch):
    """The report's workers certify several runs of one task: a chunk of its domain is made (through
    the plugin guard and the example contract) once, for a task of the same class and params."""
    import tasks.validate
    from tasks.winograd import WinogradParams, WinogradTask

    made = []
    real = tasks.validate.domain_examples

    def counted(task, domain, indices):
        made.append(list(indices))
        return real(task, domain, indices)

    monkeypatch.setattr(tasks.validate, "domain_examples", counted)
    first, again, other = WinogradTask(), WinogradTask(), WinogradTask(WinogradParams(nouns=8))
    batch = task_inputs(first, first.domain()).batch([3, 5, 7])
    assert task_inputs(again, again.domain()).batch([3, 5, 7]) is batch
    assert made == [[3, 5, 7]]
    task_inputs(other, other.domain()).batch([3, 5, 7])  # other params: other examples
    assert made == [[3, 5, 7], [3, 5, 7]]
