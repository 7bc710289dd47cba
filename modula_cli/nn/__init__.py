"""The modular-norm library: modules, atoms, bonds, compounds and the fast maps of docs/design.md."""

from .atom import Atom
from .atoms import Conv2D, Embed, Linear, MatrixAtom
from .bonds import (GELU, Abs, AddHeads, AvgPool, Enumerate, Flatten, FunctionalAttention, LayerNorm, MeanSubtract,
                    ReLU, RemoveHeads, RMSDivide, ScaledGELU, ScaledReLU)
from .compounds import GPT, Attention, Residual, ResMLP, ResNet, StandardGPT
from .module import Add, Bond, Composite, Identity, Module, Mul, TupleModule
from .orthogonalize import METHODS as ORTHOGONALIZE_METHODS
from .orthogonalize import orthogonalize
from .roles import layer_names, layer_roles, named, with_role
from .spectral import PowerIterationState

__all__ = [
    "Abs", "Add", "AddHeads", "Atom", "Attention", "AvgPool", "Bond", "Composite", "Conv2D", "Embed",
    "Enumerate", "Flatten", "FunctionalAttention", "GELU", "GPT", "Identity", "LayerNorm", "Linear",
    "MatrixAtom", "MeanSubtract", "Module", "Mul", "ORTHOGONALIZE_METHODS", "PowerIterationState", "ReLU",
    "RemoveHeads", "RMSDivide", "ResMLP", "ResNet", "Residual", "ScaledGELU", "ScaledReLU", "StandardGPT",
    "TupleModule", "layer_names", "layer_roles", "named", "orthogonalize", "with_role",
]
