"""The report's sublayer part: every MLP mean- and zero-ablated on the held-out ablation rows, and
where along the residual stream a linear probe reads the answer (probes.sublayers), so a run's
words can say whether an MLP computes the answer or only carries it on."""

from __future__ import annotations

from pathlib import Path

from models.spec import Attention
from probes.ablation import Ablation
from probes.report.parts import RunContext, Section
from probes.report.words import pct, verdict
from probes.settings import ReportSettings

DECODABLE = 0.95  # the probe's held-out accuracy from which the answer counts as readable there


def measure_sublayers(context: RunContext):
    from probes.sublayers import sublayers

    if context.spec.attention != Attention.SOFTMAX or not context.spec.residual:
        return None
    return (
        context.run.model_name,
        context.run.seed,
        sublayers(
            context.model,
            context.reference.batch,
            context.sample,
            context.reference,
            context.mlp_ablations,
            (context.reference.observed, context.clean.observed),
        ),
    )


def mlp_words(result, settings: ReportSettings) -> list[str]:
    out = []
    for mlp in (m for m in result.mlps if m.method is Ablation.MEAN):
        word, numbers = verdict(result.intact, mlp.scores, settings)
        zero = next(m for m in result.mlps if m.layer == mlp.layer and m.method is Ablation.ZERO)
        out.append(
            f"MLP{mlp.layer} {word}: mean-ablated it {numbers}; zero-ablated it keeps "
            f"{pct(zero.scores.accuracy)} accuracy"
        )
    return out


DISAGREE = 0.05  # the two probes' held-out accuracies this far apart at a stage are said


def first_decodable(result):
    """The first stage where the better of the two probes reads the answer."""
    return next((d for d in result.profile if d.best >= DECODABLE), None)


def profile_words(result, settings: ReportSettings) -> str:
    first = first_decodable(result)
    d0 = result.profile[0]
    steps = ", ".join(f"after {d.after} {pct(d.accuracy)} (ridge {pct(d.ridge)})" for d in result.profile)
    where = (
        f"decodable (>= {pct(DECODABLE)} by the better probe) from after {first.after}"
        if first
        else f"never decodable at {pct(DECODABLE)}"
    )
    apart = [d for d in result.profile if abs(d.accuracy - d.ridge) > DISAGREE]
    disagree = (
        "; the two probes disagree by more than "
        + pct(DISAGREE)
        + " after "
        + ", ".join(f"{d.after} (logistic {pct(d.accuracy)}, ridge {pct(d.ridge)})" for d in apart)
        if apart
        else ""
    )
    text = (
        f"answer read by a linear probe (logistic, fit on {d0.train_rows} training rows, scored on "
        f"{d0.heldout_rows} held-out positions, {d0.classes} answer tokens: chance {pct(1 / d0.classes)}), and "
        f"by a closed-form ridge probe (its penalty chosen on held-out training rows): {steps}; {where}{disagree}"
    )
    if first is None:
        return text
    stage = [d.after for d in result.profile].index(first.after)
    later = [
        m
        for m in result.mlps
        if m.method is Ablation.MEAN and [d.after for d in result.profile].index(f"MLP {m.layer}") >= stage
    ]
    for mlp in later:
        text += f"; MLP{mlp.layer}, after that point, " + mlp_role(result.intact, mlp.scores, settings)
    return text


def mlp_role(intact, ablated, settings: ReportSettings) -> str:
    """What an MLP after the point the answer is readable does, by the block rule (words.verdict),
    with the numbers the rule read: 'computes on it' only where ablating it costs answers."""
    word, numbers = verdict(intact, ablated, settings)
    drop = round(intact.accuracy - ablated.accuracy, 9)
    if word == "needed" and drop >= settings.needed_accuracy_drop:
        role = "computes on it"
    elif word == "needed":
        role = "strengthens it (the answers survive without it, the logit difference does not)"
    else:
        role = "amplifies or carries it"
    return f"{role} ({word}: mean-ablated it {numbers})"


def render_sublayers(results: list, out: Path, settings: ReportSettings) -> Section:
    lines, data = [], []
    for model_name, seed, result in results:
        words = [*mlp_words(result, settings), profile_words(result, settings)]
        lines.append(f"{model_name} seed {seed}: " + "; ".join(words))
        data.append(
            {
                "model_name": model_name,
                "seed": seed,
                "intact": vars(result.intact),
                "mlps": [{"layer": m.layer, "method": m.method.value, **vars(m.scores)} for m in result.mlps],
                "profile": [{**vars(d), "best": d.best} for d in result.profile],
            }
        )
    intro = (
        "Each MLP's output replaced by its mean over the training reference rows at each position (or zero), "
        "scored on the held-out ablation rows; verdicts by the block rule of Bases and scales. A linear probe "
        "for the answer token after the embeddings and each sublayer (fit on training rows, scored held-out): "
        "1 = the answer is linearly readable there."
    )
    return Section(
        "MLPs and where the answer appears", intro + "\n\n" + "\n".join(f"- {line}" for line in lines), lines, data
    )
