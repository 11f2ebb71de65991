"""A toylens model as a standard Hugging Face checkpoint (safetensors), which `AutoModelForCausalLM` and
`TransformerBridge.boot_transformers` load offline: GPT-2 (`GPT2LMHeadModel`), or GPT-NeoX
(`GPTNeoXForCausalLM`, sequential blocks) for rotary positions.

GPT-2 computes the native model's function exactly (the GPT-2 twin, models.gpt2_twin, rests on the
same fact) when each block has LayerNorm before attention and the MLP (exact GELU, eps 1e-5), learned
position vectors and softmax attention; the variants that live in weights carry over as weights
(uniform attention: W_Q zero; no positions: W_pos zero; sinusoidal: the table as W_pos; attention
"none": Q, K, V, O zero); unscaled scores become W_Q and b_Q times sqrt(d_head) under GPT-2's
scaling (TransformerLens's GPT-2 bridge ignores `scale_attn_weights=False`; measured). Shapes GPT-2
cannot hold are refused in one line naming why (`unmappable`).

Rotary positions map to GPT-NeoX with `use_parallel_residual=False` (x + attn(LN(x)), then + MLP(LN(.))
as toylens's blocks), LayerNorm with biases, exact GELU, rotary over the whole head (rotary_pct 1) with
the native base. The native rotary turns adjacent pairs (2i, 2i+1) and GPT-NeoX's turns halves (i, i +
d_head/2) at the same frequency i, so each head's query and key rows are reordered (even rows, then odd
ones): a query . key product is unchanged by reordering both alike. No toylens spec maps to Llama: its
MLP is gated SiLU without biases and its norm RMSNorm, where toylens has GELU(x W + b) and LayerNorm.
"""

from __future__ import annotations

from models.spec import ModelSpec, NormPlace, Positions


HF_FAMILIES = "GPT-2, GPT-NeoX and Llama"  # the architectures a spec is checked against


def architecture(spec: ModelSpec) -> str:
    """The HF architecture a spec exports as (when `unmappable` finds nothing)."""
    return "GPT-NeoX" if spec.positions == Positions.ROTARY else "GPT-2"


def unmappable(spec: ModelSpec) -> str | None:
    """Why `spec` has no Hugging Face form, or None when it has one."""
    if spec.positions == Positions.ALIBI:
        return f"ALiBi positions: none of {HF_FAMILIES} has an attention bias by distance"
    if not spec.mlp:
        return f"attention-only: every {HF_FAMILIES} block has an MLP, and an exported model would gain MLP nodes"
    if spec.norm is None:
        return f"no normalisation: every {HF_FAMILIES} block normalises its inputs"
    if spec.norm_place == NormPlace.POST:
        return f"post-norm: {HF_FAMILIES} normalise before each sublayer"
    if not spec.residual:
        return f"attention replacing the stream: {HF_FAMILIES} add each sublayer to the residual stream"
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


def neox_config(spec: ModelSpec):
    from transformers import GPTNeoXConfig

    from models.spec import ROTARY_BASE

    return GPTNeoXConfig(
        vocab_size=spec.d_vocab,
        hidden_size=spec.d_model,
        num_hidden_layers=spec.n_layers,
        num_attention_heads=spec.n_heads,
        intermediate_size=4 * spec.d_model,
        hidden_act="gelu",
        rope_parameters={"rope_type": "default", "rope_theta": ROTARY_BASE, "partial_rotary_factor": 1.0},
        max_position_embeddings=spec.n_ctx,
        layer_norm_eps=1e-5,
        use_parallel_residual=False,
        tie_word_embeddings=False,
        attention_bias=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bos_token_id=None,
        eos_token_id=None,
    )


def neox_state(state: dict, spec: ModelSpec) -> dict:
    """The native state dict as GPTNeoXForCausalLM's: Q, K, V fused per head ([q; k; v] rows of each
    head in turn), query and key rows reordered for GPT-NeoX's rotary (module docstring)."""
    import torch

    no_unembedding_bias(state["unembed.bias"])
    heads, d_head = spec.n_heads, spec.d_head
    halves = torch.cat([torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)])
    scale = 1.0 if spec.scale_scores else d_head**0.5  # GPT-NeoX divides q.k by sqrt(d_head)
    out = {
        "gpt_neox.embed_in.weight": state["embed.weight"],
        "gpt_neox.final_layer_norm.weight": state["ln_final.weight"],
        "gpt_neox.final_layer_norm.bias": state["ln_final.bias"],
        "lm_head.weight": state["unembed.weight"],
    }
    for l in range(spec.n_layers):
        block, h = f"blocks.{l}.", f"gpt_neox.layers.{l}."
        for kind in ("weight", "bias"):
            q, k, v = (state[f"{block}attn.{p}.{kind}"].reshape(heads, d_head, -1) for p in "qkv")
            fused = torch.stack([q[:, halves] * scale, k[:, halves], v], dim=1)  # [heads, 3, d_head, ...]
            out[f"{h}attention.query_key_value.{kind}"] = fused.reshape(3 * heads * d_head, *q.shape[2:]).squeeze(-1)
        out |= {
            h + "input_layernorm.weight": state[block + "ln1.weight"],
            h + "input_layernorm.bias": state[block + "ln1.bias"],
            h + "attention.dense.weight": state[block + "attn.o.weight"],
            h + "attention.dense.bias": state[block + "attn.o.bias"],
            h + "post_attention_layernorm.weight": state[block + "ln2.weight"],
            h + "post_attention_layernorm.bias": state[block + "ln2.bias"],
            h + "mlp.dense_h_to_4h.weight": state[block + "mlp.in.weight"],
            h + "mlp.dense_h_to_4h.bias": state[block + "mlp.in.bias"],
            h + "mlp.dense_4h_to_h.weight": state[block + "mlp.out.weight"],
            h + "mlp.dense_4h_to_h.bias": state[block + "mlp.out.bias"],
        }
    return {name: tensor.detach().to("cpu", torch.float32).contiguous() for name, tensor in out.items()}


def hf_model(spec: ModelSpec, state: dict):
    """The HF model (eval mode) holding the native model's weights, or a UsageError naming why not."""
    import torch
    from transformers import GPT2LMHeadModel, GPTNeoXForCausalLM

    from common.cli import UsageError

    why = unmappable(spec)
    if why is not None:
        raise UsageError(f"this run has no Hugging Face form: {why}")
    neox = architecture(spec) == "GPT-NeoX"
    with torch.device("cpu"):
        model = GPTNeoXForCausalLM(neox_config(spec)) if neox else GPT2LMHeadModel(gpt2_config(spec))
    model.load_state_dict(neox_state(state, spec) if neox else gpt2_state(state, spec), strict=True)
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
        f"tags: [toylens, interpretability, {provenance['architecture'].lower().replace('-', '_')}]",
        "---",
        f"# {provenance['title']}",
        "",
        f"A toylens run exported as a Hugging Face {provenance['architecture']} checkpoint (`toylens export hf`).",
        "It computes the toylens model's function: the export checks that its logits equal the run's on the",
        "run's own held-out inputs within the tolerance stated below.",
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
