"""The ``ASTSource`` a real launch of a Triton kernel would compile, built from its argument values (no GPU needed).

Shared by the ahead-of-time gates of caovan's kernels (``gdn_spec_decode/aot.py``, ``gdn_prefill/aot.py``) so that
both compile exactly what users run. It follows Triton's launch-time specialisation (``JITFunction``'s binder):
pointers 16-byte aligned (``tt.divisibility=16``, as PyTorch allocates), integer arguments equal to 1 folded to
constexpr, integers divisible by 16 marked ``tt.divisibility=16``, ``None`` arguments and ``tl.constexpr``
parameters constexpr, floats ``fp32`` and bools ``u1`` without specialisation.
"""

from __future__ import annotations

from triton.compiler import ASTSource

#: Triton's name of each torch dtype a pointer argument may point to (``torch.bool`` tensors are ``*u1``).
TRITON_DTYPE = {
    "float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "int32": "i32",
    "int64": "i64",
    "bool": "u1",
}


class Ptr:
    """Stands for a tensor argument: only its dtype decides the signature."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype


def ast_source(fn, values: dict[str, object]) -> ASTSource:
    """ASTSource of ``fn`` specialised like a launch with these values (see the module docstring)."""
    signature: dict[str, str] = {}
    constexprs: dict[tuple[int, ...], object] = {}
    attrs: dict[tuple[int, ...], list] = {}
    constexpr_names = {p.name for p in fn.params if p.is_constexpr}
    for i, name in enumerate(fn.arg_names):
        if name not in values:
            raise KeyError(f"aot: no value for argument {name!r} of {fn.__name__}")
        value = values[name]
        if name in constexpr_names or value is None:
            signature[name] = "constexpr"
            constexprs[(i,)] = value
        elif isinstance(value, Ptr):
            signature[name] = "*" + TRITON_DTYPE[value.dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, bool):
            signature[name] = "u1"
        elif isinstance(value, int):
            if value == 1:
                signature[name] = "constexpr"
                constexprs[(i,)] = 1
            else:
                signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
                if value % 16 == 0:
                    attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            raise TypeError(f"aot: unsupported value {value!r} for {name!r}")
    return ASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
