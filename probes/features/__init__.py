"""Sparse dictionaries on the toy models, graded against the variables the task planted.

- `dictionary`: TopK SAEs (residual stream at one hook) and TopK transcoders (an MLP's input ->
  its output), trained by hand on activations (why: the module docstring there).
- `activations`: the activations a dictionary reads and writes, at every real position of a batch.
- `store`: SAELens's on-disk layout (`cfg.json` + `sae_weights.safetensors` per hook folder),
  checksummed and tied to the run it was trained on.
- `variables`: what the task planted (answers, foils, groups, roles; Tracr's `variable:value`
  residual labels) as binary labels over positions.
- `grade`: per variable, the best-matching feature's MCC and AUROC, and the cosine of its decoder
  direction to the variable's mean-difference direction; typed results, no prose.
- `render`: the markdown section (the only place here that writes sentences).
- `splice`: the dictionary spliced into the model with its error node; reproduces the logits.
"""
