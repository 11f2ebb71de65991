"""A GPT-2 bridge with the same weights as a native toylens model: the reference for TL functions
the native bridge cannot run. TransformerLens's split-QKV fork (get_act_patch_direct_path, edge
attribution patching) exists only on joint-QKV attention bridges such as GPT-2's, and boot_native's
attention refuses it. GPT-2 with exact GELU, no dropout and untied copies of our weights computes the
same function as the native model of a spec with learned positions, LayerNorm and MLPs (tests check
the logits). Built from a config and an in-memory word-level tokenizer: nothing loads from a hub.
"""

from __future__ import annotations

from models.hf_export import gpt2_config
from models.spec import Attention, ModelSpec, Norm, Positions, build_model


def gpt2_twin(spec: ModelSpec, seed: int = 0, init_range: float = 0.5):
    """(GPT-2 bridge, native model of `spec`) sharing one random set of weights, both in eval mode."""
    import torch
    from tokenizers import Tokenizer, models
    from transformer_lens import TransformerBridge
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    if not (
        spec.mlp
        and spec.norm == Norm.LN
        and spec.positions == Positions.LEARNED
        and spec.attention == Attention.SOFTMAX
        and spec.scale_scores
    ):
        raise ValueError(
            "a GPT-2 twin needs a softmax model with learned positions, LayerNorm, MLPs and "
            "scaled scores (GPT-2's only shape)"
        )
    torch.manual_seed(seed)
    config = gpt2_config(spec)
    config.initializer_range = init_range
    vocab = {f"t{i}": i for i in range(spec.d_vocab)}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")), unk_token="t0", pad_token="t0"
    )
    reference = TransformerBridge.boot_transformers(
        "gpt2", hf_model=GPT2LMHeadModel(config).eval(), tokenizer=tokenizer
    )
    reference.eval()
    native = build_model(spec, seed=seed)
    ours, theirs = native.state_dict(), reference.state_dict()
    # GPT-2's Conv1D stores [in, out]: the MLP's shapes show it, the square output projection's do not.
    native.load_state_dict(
        {
            name: theirs[name].T
            if ".attn.o." in name and name.endswith("weight") or theirs[name].shape != value.shape
            else theirs[name]
            for name, value in ours.items()
        }
    )
    return reference, native.eval()
