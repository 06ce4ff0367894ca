"""The C ABI's one source: its enums, its structs and the KernelInfo every kernel registers.

From these tables come
- bindings/include/tiledispatch/abi_types.h (the C enums and structs, included by
  tiledispatch.h) and bindings/include/tiledispatch/kernel_info.hpp (KernelInfo):
  `python -m codegen abi --write` renders both; a test checks the files are current;
- the ctypes structs of the Python package (`_ffi.py` builds them with `ctypes_struct`);
- the KernelInfo initializer of each generated kernel source (frame.py).
The enums' values are the codes of the model's enums (model.py), so C range checks use the
*_COUNT constants rendered here.
"""
from __future__ import annotations

import ctypes

from .model import ABI_VERSION, Activation, Bias, Direction, DType, Feature, GemmVariant, Layout, OutDType, Reduction

# C type -> ctypes type
CTYPES = {"int64_t": ctypes.c_int64, "int32_t": ctypes.c_int32, "int": ctypes.c_int, "float": ctypes.c_float,
          "const void*": ctypes.c_void_p, "void*": ctypes.c_void_p, "const float*": ctypes.c_void_p}

STATUS = (("TD_OK", 0, "success"),
          ("TD_ERROR", -1, "bad argument, device error, exception caught at the boundary"),
          ("TD_UNSUPPORTED", -2, "no kernel supports the problem"),
          ("TD_REJECTED", -3, "the chosen kernel rejected the arguments"))


def _enum(prefix: str, members) -> tuple:
    return tuple((f"{prefix}{m.name}", m.code) for m in members)


# (C enum name, count constant, ((member, value), ...), comment)
ENUMS = (
    ("td_dtype", "TD_DTYPE_COUNT", _enum("TD_", DType),
     "Input element types (fp8: OCP, FNUZ for gfx942). The output is fp32 for fp32, fp16 for "
     "fp16, bf16 otherwise."),
    ("td_layout", "TD_LAYOUT_COUNT", _enum("TD_", Layout), "GEMM layouts: A, B, C row- (r) or column-major (c)."),
    ("td_conv_direction", "TD_CONV_DIRECTION_COUNT", _enum("TD_CONV_", Direction), "Convolution directions."),
    ("td_gemm_variant", "TD_GEMM_VARIANT_COUNT", _enum("TD_GEMM_", GemmVariant),
     "GEMM variants: data-parallel tiles, stream-K, split-K through the batch, grouped (one launch for "
     "a list of GEMMs; run by grouped calls only)."),
    ("td_reduction", "TD_REDUCTION_COUNT", _enum("TD_REDUCTION_", Reduction),
     "How stream-K combines the partial tiles of a split output tile."),
    ("td_activation", "TD_ACTIVATION_COUNT", _enum("TD_ACT_", Activation),
     "The activation of a GEMM epilogue: GELU is the erf form, GELU_TANH the tanh approximation."),
    ("td_bias", "TD_BIAS_COUNT", _enum("TD_BIAS_", Bias),
     "A GEMM epilogue's bias vector: none, one value per column (N), one per row (M)."),
    ("td_out_dtype", "TD_OUT_DTYPE_COUNT", _enum("TD_OUT_", OutDType),
     "The element type of D, C and aux: DEFAULT is the input type's output (fp32 for fp32, fp16 for fp16, "
     "bf16 otherwise)."),
    ("td_feature", "TD_FEATURE_ALL", _enum("TD_FEATURE_", Feature),
     "What a GEMM kernel implements beyond D = alpha * A * B (KernelInfo.features, a bit mask; "
     "TD_FEATURE_ALL: every bit)."),
)

# (struct, ((field, C type, comment), ...), comment)
STRUCTS = (
    ("TdGemmProblem", (
        ("M", "int64_t", ""), ("N", "int64_t", ""), ("K", "int64_t", ""),
        ("dtype", "int32_t", "enum td_dtype"),
        ("layout", "int32_t", "enum td_layout"),
        ("lda", "int64_t", "leading dimensions in elements; 0: packed"), ("ldb", "int64_t", ""),
        ("ldc", "int64_t", ""),
        ("alpha", "float", "1.0f for a plain product; per-tensor fp8 scales multiply in here"),
        ("splits", "int32_t", "cpu stream-K: workers (0 = one per thread); cuda stream-K and split-K: "
                              "the split count (0 = the kernel's choice)"),
        ("raster", "int32_t", "cuda tile order: 0 heuristic, 1 along M, 2 along N (cpu: ignored)"),
        ("swizzle", "int32_t", "cuda tile swizzle: 0 default (1), or 1, 2, 4, 8 (cpu: ignored)"),
        ("batch", "int64_t", "GEMMs in the batch; 0 or 1: one (TD_FEATURE_BATCH above 1)"),
        ("stride_a", "int64_t", "elements between the batch's matrices of A; 0: A broadcast"),
        ("stride_b", "int64_t", "the same for B; 0: B broadcast"),
        ("stride_c", "int64_t", "the same for D, C and aux (at least one matrix's span when batch > 1)"),
        ("beta", "float", "D = ... + beta * C; 0: C is not read"),
        ("bias", "int32_t", "enum td_bias"),
        ("activation", "int32_t", "enum td_activation"),
        ("aux", "int32_t", "1: the pre-activation value is written to aux too"),
        ("row_scale", "int32_t", "1: the product times row_scale[i] (M floats)"),
        ("col_scale", "int32_t", "1: the product times col_scale[j] (N floats)"),
        ("block_scale", "int32_t", "1: fp8 block-wise scales: scale_a (M x ceil(K/128)) per 1x128 block of A, "
                                   "scale_b (ceil(K/128) x ceil(N/128)) per 128x128 block of B"),
        ("out_dtype", "int32_t", "enum td_out_dtype"),
    ), "D = act(alpha * (A(MxK) * B(KxN)) * row_scale * col_scale + beta * C + bias), in that order; "
       "every field after swizzle 0 is the plain product (docs/abi.md)."),
    ("TdGemmEpilogue", (
        ("c", "const void*", "beta's C: D's type and layout (ldc, stride_c); may be D itself"),
        ("bias", "const void*", "D's type; N or M values"),
        ("aux", "void*", "the pre-activation: D's type and layout"),
        ("row_scale", "const float*", "M floats"),
        ("col_scale", "const float*", "N floats"),
        ("scale_a", "const float*", "block_scale: M x ceil(K/128) floats, row-major"),
        ("scale_b", "const float*", "block_scale: ceil(K/128) x ceil(N/128) floats, row-major"),
    ), "The operands of a GEMM's epilogue and scales that the problem's fields ask for (others NULL)."),
    ("TdGemmGroup", (
        ("M", "int64_t", "0: the group is skipped"), ("N", "int64_t", ""), ("K", "int64_t", ""),
        ("lda", "int64_t", "0: packed"), ("ldb", "int64_t", ""), ("ldc", "int64_t", ""),
        ("a", "const void*", ""), ("b", "const void*", ""), ("d", "void*", ""),
        ("epilogue", "TdGemmEpilogue", "this group's epilogue operands"),
    ), "One GEMM of a grouped call: its sizes and operands; the rest comes from the call's problem."),
    ("ConvProblemC", tuple((name, "int", comment) for name, comment in (
        ("N", ""), ("G", ""), ("C", "input channels per group"), ("K", "output channels per group"),
        ("input_d", ""), ("input_h", ""), ("input_w", ""),
        ("filter_z", ""), ("filter_y", ""), ("filter_x", ""),
        ("stride_d", ""), ("stride_h", ""), ("stride_w", ""),
        ("pad_d", ""), ("pad_h", ""), ("pad_w", ""),
        ("dilation_d", ""), ("dilation_h", ""), ("dilation_w", ""),
        ("direction", "enum td_conv_direction"),
        ("split_k", "0 = automatic"))),
     "The reference system's convolution problem. 1D problems use the *_w fields, 2D *_h and "
     "*_w; unused dims are 1 (pad 0)."),
    ("TdConvProblem", (
        ("base", "ConvProblemC", ""),
        ("ndim", "int32_t", "1, 2 or 3"),
        ("dtype", "int32_t", "enum td_dtype"),
    ), "Extended conv problem: the reference struct plus the spatial rank and the dtype. Layouts are "
       "channels-last with groups: NWGC/NHWGC/NDHWGC input, GKXC/GKYXC/GKZYXC weight, "
       "NWGK/NHWGK/NDHWGK output."),
    ("TdOptions", (
        ("tma", "int32_t", "1: the convolution kernels that can move tiles by TMA do (0: software copies)"),
        ("pdl", "int32_t", "1: kernels that support it are launched as programmatic dependents"),
        ("multi_row", "int32_t", "1: the tiled_mma forward reuses A over several output rows"),
        ("vendor", "int32_t", "1: selection weighs the vendor-library kernels (cuDNN, cuBLASLt) too "
                              "(0: our own kernels alone; a vendor kernel still runs when named)"),
    ), "Run-time options of a library (td_get_options / td_set_options); every field 1 by default."),
)

# KernelInfo: (field, comment). Every field is an int32_t but the name; unused fields are the
# DEFAULTS below. The common fields come from the kernel config, the rest from its family.
KERNEL_INFO = (
    ("name", "the variant's name: its identity"),
    ("family", "enum td_family"),
    ("dtype", "enum td_dtype"),
    ("layout", "gemm: enum td_layout (conv: -1)"),
    ("variant", "gemm: enum td_gemm_variant (conv: the im2col GEMM's, otherwise -1)"),
    ("reduction", "gemm stream-K: enum td_reduction (otherwise -1)"),
    ("ndim", "conv: spatial rank 1, 2 or 3 (gemm: 0)"),
    ("direction", "conv: enum td_conv_direction (gemm: -1)"),
    ("tile_m", "the block tile; what its sides mean is the family's (docs/manifest.md)"),
    ("tile_n", ""),
    ("tile_k", ""),
    ("micro_m", "blocked: the register micro tile"),
    ("micro_n", ""),
    ("wave_m", "mfma: waves per block along M, N, K"),
    ("wave_n", ""),
    ("wave_k", ""),
    ("warp_m", "mfma: the MFMA instruction shape"),
    ("warp_n", ""),
    ("warp_k", ""),
    ("double_buffer", "mfma: 1 the compv3 pipeline (two LDS buffers), 0 mem"),
    ("interwave", "mfma: 1 the interwave scheduler"),
    ("cluster_m", "cutlass, im2col, implicit: the thread-block cluster"),
    ("cluster_n", ""),
    ("pingpong", "cutlass, im2col: 1 the ping-pong schedule, 0 cooperative"),
    ("nosmem_epilogue", "cutlass: 1 the epilogue without shared memory"),
    ("pad", "cutlass: 1 misaligned operands staged through aligned copies; im2col: 1 channels padded to 8; mfma: 1 any size"),
    ("promote", "cutlass fp8: 1 our mainloop, N CUTLASS's every N MMAs, 0 fast accumulation"),
    ("channels_per_group", "direct (0: any), mma, tiled_mma, toeplitz_mma; depthwise families 1"),
    ("split", "implicit bwd_weight: batch slices at most (1: none)"),
    ("named_only", "1: never picked, run only when named (a less precise contract)"),
    ("vendor", "1: a vendor library's kernel (cudnn, cublaslt): left out of selection when "
               "TdOptions.vendor is 0"),
    ("features", "gemm: enum td_feature bits the kernel implements (0: D = alpha * A * B alone)"),
)
KERNEL_INFO_DEFAULTS = {"layout": -1, "variant": -1, "reduction": -1, "ndim": 0, "direction": -1,
                        "split": 1, "promote": 1}

BANNER = ("/* Generated from python/tiledispatch/codegen/abi.py by `python -m codegen abi --write`;\n"
          " * do not edit (tests/test_abi.py checks it is current). */\n")


def _comment(text: str) -> str:
    return f"  /* {text} */" if text else ""


def render_c_types(families) -> str:
    """bindings/include/tiledispatch/abi_types.h: the enums (td_family from `families`) and structs."""
    out = [BANNER, "#ifndef TILEDISPATCH_ABI_TYPES_H", "#define TILEDISPATCH_ABI_TYPES_H", "",
           "#include <stdint.h>", "", f"#define TD_ABI_VERSION {ABI_VERSION}", ""]
    out.append("/* Status codes of every call. */")
    out.append("enum td_status {")
    out += [f"    {name} = {value},{_comment(text)}" for name, value, text in STATUS]
    out += ["};", ""]
    family_enum = ("td_family", "TD_FAMILY_COUNT",
                   tuple((f"TD_FAMILY_{f.FAMILY.upper()}", f.CODE) for f in sorted(families, key=lambda f: f.CODE)),
                   "Kernel families (KernelInfo.family; registry.json names them).")
    for name, count, members, text in ENUMS + (family_enum,):
        out.append(f"/* {text} */")
        out.append(f"enum {name} {{")
        out += [f"    {member} = {value}," for member, value in members]
        out.append("};")
        if count.endswith("_ALL"):  # a mask's every bit
            out.append(f"#define {count} {sum(v for _, v in members)}")
        else:
            out.append(f"#define {count} {max(v for _, v in members) + 1}")
        out.append("")
    for name, fields, text in STRUCTS:
        out.append(f"/* {text} */")
        out.append(f"typedef struct {name} {{")
        out += [f"    {ctype} {field};{_comment(comment)}" for field, ctype, comment in fields]
        out.append(f"}} {name};")
        out.append("")
    out.append("#endif /* TILEDISPATCH_ABI_TYPES_H */")
    return "\n".join(out) + "\n"


def render_kernel_info() -> str:
    """bindings/include/tiledispatch/kernel_info.hpp: what each kernel registers about itself."""
    out = [BANNER.replace("/*", "//", 1).replace(" * ", "// ").replace(" */", ""), "#pragma once", "",
           "#include <cstdint>", "", "namespace td {", "",
           "// A kernel's description: named, typed fields; those its family does not use hold",
           "// KERNEL_INFO_DEFAULTS (-1 for enums, 1 for split and promote, else 0).",
           "struct KernelInfo {"]
    for field, comment in KERNEL_INFO:
        ctype = "const char*" if field == "name" else "int32_t"
        out.append(f"    {ctype} {field};" + (f"  // {comment}" if comment else ""))
    out += ["};", "", "}  // namespace td"]
    return "\n".join(out) + "\n"


def kernel_info_values(values: dict) -> list:
    """The KernelInfo fields in declaration order, from `values` (name included) and the defaults."""
    unknown = set(values) - {f for f, _ in KERNEL_INFO}
    if unknown:
        raise ValueError(f"not KernelInfo fields: {', '.join(sorted(unknown))}")
    return [values.get(field, KERNEL_INFO_DEFAULTS.get(field, 0)) for field, _ in KERNEL_INFO]


def ctypes_struct(name: str, known: dict | None = None) -> type:
    """The ctypes Structure of one ABI struct (`known`: structs it nests, by name)."""
    known = known or {}
    for struct, fields, _ in STRUCTS:
        if struct == name:
            return type(name, (ctypes.Structure,), {
                "_fields_": [(field, known[ctype] if ctype in known else CTYPES[ctype]) for field, ctype, _ in fields]})
    raise KeyError(name)
