"""The one place that reaches into TransformerLens's bridge internals: the native modules the
bridge wraps, and the switches it exposes only on its components. Everything else goes through the
bridge's public interface (hooks, `cfg`, weight views)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:  # TransformerLens is imported where a model is built, not by every `import models`
    from transformer_lens import TransformerBridge

# What every `model` argument is: a TransformerLens 4 bridge, as build_model makes it.
Model: TypeAlias = "TransformerBridge"


def native(component):
    """The TransformerLens module a bridge component wraps (a Linear, LayerNorm, attention ...)."""
    return component.original_component


def native_attention(block):
    """The bridge wraps the native attention module; its `scale` lives on the wrapped one."""
    return native(block.attn)


def attention_adds_residual(block) -> bool:
    """False for a block built with residual=False, whose attention output replaces the stream
    (`models.variants.ReplacingBlock`) instead of being added to it."""
    from models.variants import ReplacingBlock

    return not isinstance(native(block), ReplacingBlock)


def post_norm(model: Model) -> bool:
    """Whether some block normalises the stream after its residual add (`models.variants.PostNormBlock`)."""
    from models.variants import PostNormBlock

    return any(isinstance(native(block), PostNormBlock) for block in model.blocks)


def stream_is_a_sum(model: Model) -> bool:
    """Whether every block reads the residual stream through its own pre-norm and adds its writes to
    it, so the stream entering a block is the sum of every earlier component's write: what the
    edge oracle and path patching decompose. False for post-norm blocks and for a block whose
    attention replaces the stream."""
    return not post_norm(model) and all(attention_adds_residual(block) for block in model.blocks)


def use_fused_layer_norm(model: Model) -> None:
    """TL's NormalizationBridge rebuilds LayerNorm from its parts (mean, pow, sqrt, div) so that
    hook_scale / hook_normalized can be edited. Its `use_native_layernorm_autograd` switch (which TL
    sets for OPT, CLIP, ...) runs torch's fused layer_norm instead and still fires those hooks; an
    edit falls back to the parts with a warning. Measured: 6-15% of a training step on CPU.

    On that path the bridge still computes the statistics it would hand those two hooks (centring,
    variance, two square roots) when neither has a hook, then returns the wrapped LayerNorm's
    output: `lean_norm` returns that output at once in that case (bitwise the same), which a hooked
    forward's norms spent about a tenth of the edge oracle's CPU on (benchmarks/report_cost.py)."""
    from types import MethodType

    from transformer_lens.model_bridge.generalized_components.normalization import NormalizationBridge

    for module in model.modules():
        if isinstance(module, NormalizationBridge):
            module.use_native_layernorm_autograd = True
            # An instance attribute, so the bridge's own forward calls it; subclasses keep their class.
            module._hf_autograd_forward_with_hooks = MethodType(lean_norm, module)  # type: ignore[method-assign]


def lean_norm(bridge, x):
    """NormalizationBridge's native-autograd forward, without the hook statistics nobody reads."""
    import torch

    watched = (bridge.hook_scale, bridge.hook_normalized)
    if any(hook.fwd_hooks or hook.bwd_hooks for hook in watched) or isinstance(
        bridge.original_component, (torch.nn.Identity, type(None))
    ):
        return type(bridge)._hf_autograd_forward_with_hooks(bridge, x)
    result = bridge.original_component(x)
    return result if result.dtype == x.dtype else result.to(x.dtype)


def hook_free_forward(model: Model):
    """The model's own TransformerLens modules (NativeModel, its blocks, attention and MLP, and the
    very Linear / LayerNorm / Embedding leaves holding the parameters) with the bridge's hook
    wrappers peeled off: the same parameter and buffer objects and bitwise the same logits (tested),
    without the wrappers' per-call hook dispatch and LayerNorm bookkeeping, which cost up to a fifth
    of a training step on CPU (benchmarks/train_speed.py). Variants live in frozen weights and module
    constants, not hooks; a model with any hook attached is returned as it is, so none is skipped."""
    native = getattr(model, "original_model", None)
    if native is None or has_hooks(model):
        return model
    return unwrapped(native)


def has_hooks(model: Model) -> bool:
    """Whether any hook is attached besides the capture pre-hooks each block bridge wires onto its
    own LayerNorm wrappers at its first forward: those serve the bridge's wrappers only (which the
    hook-free forward does not run), and counting them made the choice depend on whether the model
    had been run before."""
    own = {
        handle.id for block in getattr(model, "blocks", ()) for handle in getattr(block, "_capture_hook_handles", ())
    }
    return any(
        set(m._forward_hooks) - own or set(m._forward_pre_hooks) - own or m._backward_hooks for m in model.modules()
    )


def unwrapped(module):
    """`module` with every bridge wrapper replaced by the module it wraps. Leaves are returned
    themselves; containers are shallow copies (sharing parameters and buffers) holding unwrapped
    children, so the bridge itself is left untouched."""
    import copy

    from transformer_lens.model_bridge.generalized_components.base import GeneralizedComponent

    while isinstance(module, GeneralizedComponent):
        module = native(module)
    if not module._modules:
        return module
    clone = copy.copy(module)
    clone._modules = {name: child if child is None else unwrapped(child) for name, child in module._modules.items()}
    return clone


def device_of(model: Model):
    """Where the model's weights live. Probes move their batches there and create every tensor they
    compute with there (bookkeeping they keep on the CPU says so), so a model moved to a GPU, or a
    CPU model in a notebook that called torch.set_default_device("cuda"), is probed the same way."""
    return next(model.parameters()).device
