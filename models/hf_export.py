"""A toylens model as a standard Hugging Face GPT-2 checkpoint (`GPT2LMHeadModel`, safetensors), which
`AutoModelForCausalLM` and `TransformerBridge.boot_transformers` load offline.

GPT-2 computes the native model's function exactly (the GPT-2 twin, models.gpt2_twin, rests on the
same fact) when each block has LayerNorm before attention and the MLP (exact GELU, eps 1e-5), learned
position vectors and softmax attention; the variants that live in weights carry over as weights
(uniform attention: W_Q zero; no positions: W_pos zero; sinusoidal: the table as W_pos; attention
"none": Q, K, V, O zero); unscaled scores become W_Q and b_Q times sqrt(d_head) under GPT-2's
scaling (TransformerLens's GPT-2 bridge ignores `scale_attn_weights=False`; measured). Shapes GPT-2
cannot hold are refused in one line naming why (`unmappable`).
"""

from __future__ import annotations

from models.spec import ModelSpec, NormPlace, Positions


def unmappable(spec: ModelSpec) -> str | None:
    """Why `spec` has no GPT-2 form, or None when it has one."""
    if spec.positions == Positions.ROTARY:
        return "rotary positions: GPT-2 has learned position vectors (a GPT-NeoX export is not built)"
    if spec.positions == Positions.ALIBI:
        return "ALiBi positions: GPT-2 has no attention bias by distance"
    if not spec.mlp:
        return "attention-only: every GPT-2 block has an MLP, and an exported model would gain MLP nodes"
    if spec.norm is None:
        return "no normalisation: every GPT-2 block normalises its inputs"
    if spec.norm_place == NormPlace.POST:
        return "post-norm: GPT-2 normalises before each sublayer"
    if not spec.residual:
        return "attention replacing the stream: GPT-2 adds each sublayer to the residual stream"
    return None


def gpt2_config(spec: ModelSpec):
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=spec.d_vocab,
        n_positions=spec.n_ctx,
        n_embd=spec.d_model,
        n_layer=spec.n_layers,
        n_head=spec.n_heads,
        n_inner=4 * spec.d_model,
        activation_function="gelu",
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=False,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
    )


def gpt2_state(state: dict, spec: ModelSpec) -> dict:
    """The native state dict (TransformerLens names, torch Linear [out, in]) as GPT2LMHeadModel's
    (Conv1D [in, out])."""
    import torch

    no_unembedding_bias(state["unembed.bias"])
    out = {
        "transformer.wte.weight": state["embed.weight"],
        "transformer.wpe.weight": state["pos_embed.weight"],
        "transformer.ln_f.weight": state["ln_final.weight"],
        "transformer.ln_f.bias": state["ln_final.bias"],
        "lm_head.weight": state["unembed.weight"],
    }
    for l in range(spec.n_layers):
        block, h = f"blocks.{l}.", f"transformer.h.{l}."
        qkv = [state[f"{block}attn.{p}.{kind}"] for kind in ("weight", "bias") for p in "qkv"]
        if not spec.scale_scores:  # GPT-2 divides q.k by sqrt(d_head): undone on the queries
            qkv[0], qkv[3] = qkv[0] * spec.d_head**0.5, qkv[3] * spec.d_head**0.5
        out |= {
            h + "ln_1.weight": state[block + "ln1.weight"],
            h + "ln_1.bias": state[block + "ln1.bias"],
            h + "attn.c_attn.weight": torch.cat(qkv[:3]).T,
            h + "attn.c_attn.bias": torch.cat(qkv[3:]),
            h + "attn.c_proj.weight": state[block + "attn.o.weight"].T,
            h + "attn.c_proj.bias": state[block + "attn.o.bias"],
            h + "ln_2.weight": state[block + "ln2.weight"],
            h + "ln_2.bias": state[block + "ln2.bias"],
            h + "mlp.c_fc.weight": state[block + "mlp.in.weight"].T,
            h + "mlp.c_fc.bias": state[block + "mlp.in.bias"],
            h + "mlp.c_proj.weight": state[block + "mlp.out.weight"].T,
            h + "mlp.c_proj.bias": state[block + "mlp.out.bias"],
        }
    return {name: tensor.detach().to("cpu", torch.float32).contiguous() for name, tensor in out.items()}


def no_unembedding_bias(b_U) -> None:
    """GPT-2's lm_head has no bias; toylens's unembedding bias is not a parameter (it stays 0), so a
    nonzero one means weights from elsewhere: refused rather than dropped."""
    from common.cli import UsageError

    if bool(b_U.any()):
        raise UsageError("the model has a nonzero unembedding bias, which GPT-2's lm_head cannot hold")


def gpt2_model(spec: ModelSpec, state: dict):
    """A GPT2LMHeadModel in eval mode holding the native model's weights, or a UsageError naming why not."""
    import torch
    from transformers import GPT2LMHeadModel

    from common.cli import UsageError

    why = unmappable(spec)
    if why is not None:
        raise UsageError(f"this run has no Hugging Face form: {why}")
    with torch.device("cpu"):
        model = GPT2LMHeadModel(gpt2_config(spec))
    model.load_state_dict(gpt2_state(state, spec), strict=True)
    return model.eval()


def word_tokenizer(vocabulary: list[str]):
    """A word-level tokenizer whose ids are the vocabulary's indices, words split at whitespace; a word
    outside the vocabulary is an error, never silently another id."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    inner = Tokenizer(models.WordLevel({word: i for i, word in enumerate(vocabulary)}, unk_token=None))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=inner)


def model_card(provenance: dict) -> str:
    """README.md of the exported folder: what it is, where it came from, how to load it."""
    lines = [
        "---",
        "library_name: transformers",
        "tags: [toylens, interpretability, gpt2]",
        "---",
        f"# {provenance['title']}",
        "",
        "A toylens run exported as a Hugging Face GPT-2 checkpoint (`toylens export hf`). It computes the",
        "toylens model's function: the export checks that its logits equal the run's on the run's own",
        "held-out inputs within the tolerance stated below.",
        "",
        "## Provenance",
    ]
    lines += [f"- {key}: `{value}`" for key, value in provenance["fields"].items()]
    lines += [
        "",
        "## Load (offline)",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        'model = AutoModelForCausalLM.from_pretrained(FOLDER, local_files_only=True, attn_implementation="eager")',
        "tokenizer = AutoTokenizer.from_pretrained(FOLDER, local_files_only=True)",
        "```",
        "or `toylens preflight FOLDER`, then `python -m probes.circuit report --model FOLDER --task TASK`.",
    ]
    return "\n".join(lines) + "\n"
