"""Training's AdamW over one flat buffer (`tasks.training.optimizer.FlatAdamW`): for every model
variant, steps bitwise like `torch.optim.AdamW(foreach=True)` over the separate parameters; its state
dict is AdamW's per-parameter one (so stored train states load either way); a gradient-less
parameter is refused rather than updated; `release` leaves no shared storage behind."""

from __future__ import annotations

import pytest
import torch

from models.fused import training_forward
from tasks.training.optimizer import FlatAdamW
from tests.test_fused import VARIANTS, model_of, tokens

LR, DECAY = 3e-3, 0.01


def trained(variant: str, flat: bool, steps: int = 6):
    """(model, optimizer) after `steps` AdamW steps on a fixed next-token loss, through training's forward."""
    model = model_of(**VARIANTS[variant])
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = (
        FlatAdamW(trainable, LR, DECAY)
        if flat
        else torch.optim.AdamW(trainable, lr=LR, weight_decay=DECAY, foreach=True)
    )
    forward, x = training_forward(model), tokens(8)
    forward.train()
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(forward(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model, optimizer


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_flat_update_is_bitwise_torch_s_adamw(variant):
    (stock, stock_optimizer), (flat, flat_optimizer) = trained(variant, False), trained(variant, True)
    for (name, a), b in zip(stock.state_dict().items(), flat.state_dict().values()):
        assert torch.equal(a, b), f"{variant}: {name} differs by {(a - b).abs().max().item():.1e}"
    for index, moments in stock_optimizer.state_dict()["state"].items():
        for key, value in moments.items():
            assert torch.equal(value, flat_optimizer.state_dict()["state"][index][key]), (variant, index, key)


def test_a_state_dict_round_trip_continues_bitwise():
    """Stop after 3 steps, load model and optimizer state into fresh ones, take 3 more: the same as 6 straight."""
    straight, _ = trained("softmax, learned positions", True, steps=6)
    first, first_optimizer = trained("softmax, learned positions", True, steps=3)
    second = model_of()
    second.load_state_dict(first.state_dict())
    trainable = [p for p in second.parameters() if p.requires_grad]
    optimizer = FlatAdamW(trainable, LR, DECAY)
    optimizer.load_state_dict(first_optimizer.state_dict())
    forward, x = training_forward(second), tokens(8)
    forward.train()
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(forward(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for name, value in straight.state_dict().items():
        assert torch.equal(value, second.state_dict()[name]), name


def test_a_parameter_without_gradient_is_refused_not_updated():
    used, unused = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    optimizer = FlatAdamW([used, unused], LR, DECAY)
    (used * 2).sum().backward()
    with pytest.raises(RuntimeError, match=r"parameters \[1\] got no gradient"):
        optimizer.step()
    assert torch.equal(unused.detach(), torch.ones(2))


def test_release_gives_each_parameter_its_own_storage():
    model, optimizer = trained("softmax, learned positions", True, steps=1)
    trainable = [p for p in model.parameters() if p.requires_grad]
    before = {id(p): p.detach().clone() for p in trainable}
    assert len({p.untyped_storage().data_ptr() for p in trainable}) == 1
    optimizer.release()
    assert len({p.untyped_storage().data_ptr() for p in trainable}) == len(trainable)
    assert all(torch.equal(p.detach(), before[id(p)]) for p in trainable)
