"""Small GPTs as TransformerLens bridges: a spec, its builder, and safe checkpoints."""

from common.cli import UsageError
from models.spec import Model, ModelSpec, build_model

__all__ = ["Model", "ModelSpec", "UsageError", "build_model"]
