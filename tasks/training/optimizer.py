"""AdamW over one flat buffer: every trainable parameter is a view into one tensor, so each step
runs torch's AdamW (the same `foreach` update) on that one tensor instead of on ~20-40 small ones.

On CPU, torch's `foreach` AdamW loops over the parameters op by op, so a one-block model's update
(21 tensors, 0.2M floats) cost ~0.64 ms, half of it per-tensor dispatch: 1-2.5% of a training step
(benchmarks/train_speed.py). AdamW is elementwise, so the update of each element is the same
arithmetic either way and the weights are bitwise those of `torch.optim.AdamW` over the separate
parameters (tests/test_optimizer.py trains every model variant both ways). `fused=True` would be
faster still but rounds differently, which would change every trained model. No kept library
flattens parameters for a CPU optimizer (apex's flat optimizers are CUDA only), hence this module.

The state dict keeps AdamW's per-parameter layout ({index: {step, exp_avg, exp_avg_sq}}), so train
states written before this module existed resume unchanged. While the optimizer lives, the model's
parameter objects stay the same objects (the bridge and every hook still see them), only their
storage is shared; `release` gives each its own storage again.
"""

from __future__ import annotations

import torch


class FlatAdamW:
    """`torch.optim.AdamW(parameters, lr, weight_decay, foreach=True)`, stepping one flat buffer.
    The interface the training loop uses: `param_groups` (for the learning-rate schedule),
    `zero_grad`, `step`, `state_dict`, `load_state_dict`, and `parameters`, the model's own."""

    def __init__(self, parameters, lr: float, weight_decay: float):
        self.parameters = list(parameters)
        self.sizes = [p.numel() for p in self.parameters]
        self.flat = torch.nn.Parameter(torch.cat([p.detach().reshape(-1) for p in self.parameters]))
        for parameter, view in zip(self.parameters, self.flat.data.split(self.sizes)):
            parameter.data = view.view_as(parameter)
        self.adamw = torch.optim.AdamW([self.flat], lr=lr, weight_decay=weight_decay, foreach=True)

    @property
    def param_groups(self) -> list[dict]:
        return self.adamw.param_groups

    def zero_grad(self) -> None:
        for parameter in self.parameters:
            parameter.grad = None
        self.flat.grad = None

    def step(self) -> None:
        missing = [i for i, p in enumerate(self.parameters) if p.grad is None]
        if missing:
            # AdamW skips a parameter without a gradient; one buffer cannot skip part of itself.
            raise RuntimeError(
                f"FlatAdamW: trainable parameters {missing} got no gradient this step; "
                "every trainable parameter must take part in the loss"
            )
        self.flat.grad = torch.cat([p.grad.reshape(-1) for p in self.parameters])
        self.adamw.step()

    def state_dict(self) -> dict:
        """AdamW's per-parameter state dict: {"state": {index: {step, exp_avg, exp_avg_sq}}, ...}."""
        flat = self.adamw.state_dict()
        moments = flat["state"].get(0)
        state = {}
        if moments is not None:
            pieces = {key: moments[key].split(self.sizes) for key in ("exp_avg", "exp_avg_sq")}
            state = {
                index: {"step": moments["step"].clone(), **{key: pieces[key][index].view_as(p) for key in pieces}}
                for index, p in enumerate(self.parameters)
            }
        groups = [{**group, "params": list(range(len(self.parameters)))} for group in flat["param_groups"]]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """From AdamW's per-parameter layout, every parameter at the same step (what
        tasks.training.resume checks before calling this)."""
        state = state_dict["state"]
        flat_state = {}
        if state:
            flat_state = {
                0: {
                    "step": state[0]["step"].clone(),
                    **{
                        key: torch.cat([state[i][key].reshape(-1) for i in range(len(self.parameters))])
                        for key in ("exp_avg", "exp_avg_sq")
                    },
                }
            }
        groups = [{**group, "params": [0]} for group in state_dict["param_groups"]]
        self.adamw.load_state_dict({"state": flat_state, "param_groups": groups})

    def release(self) -> None:
        """Each parameter back in storage of its own (a model saved or copied later holds no views)."""
        for parameter in self.parameters:
            parameter.data = parameter.data.clone()
