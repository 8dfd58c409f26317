"""Plumbing for lower_irs.py: compile a Triton kernel ahead of time for a CUDA target (no GPU needed),
disassemble its cubin, and trim the IR dumps to their informative parts.

Works with the Triton 3.x APIs in use here (3.6 on the GPU machine, 3.9 on the CPU one): an ASTSource of
a JITFunction, a GPUTarget, and ``compiled.asm[stage]``. Under TRITON_INTERPRET=1 ``@triton.jit`` returns
an interpreter wrapper, so the raw Python function is wrapped in a JITFunction here for the compiler.
"""

from __future__ import annotations

import inspect
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

STAGES = ("ttir", "ttgir", "llir", "ptx")


def jit_function(kernel):
    """The JITFunction behind ``kernel``, whether Triton runs compiled or interpreted."""
    from triton.runtime.jit import JITFunction

    if isinstance(kernel, JITFunction):
        return kernel
    return JITFunction(getattr(kernel, "fn", kernel))


def aot_compile(kernel, signature: dict, constexprs: dict, aligned: list[int], arch: int, num_warps: int):
    """Compile ``kernel`` for CUDA sm_<arch> without a GPU: Triton's front end, MLIR passes, LLVM's NVPTX
    back end and the ptxas that ships with Triton all run on the host. ``aligned`` lists the argument
    positions the launcher would specialize as 16-byte aligned (what the JIT does for such tensors)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = jit_function(kernel)
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    params = inspect.signature(ASTSource.__init__).parameters
    if "constexprs" in params:  # Triton >= 3.3: constexprs named in the signature as "constexpr"
        source = ASTSource(fn=fn, signature={**signature, **{k: "constexpr" for k in constexprs}},
                           constexprs=constexprs, attrs=attrs)
    else:  # older 3.x: constants passed apart
        source = ASTSource(fn=fn, signature=signature, constants=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps})


def triton_tool(name: str) -> Path | None:
    """A CUDA binary tool (cuobjdump, nvdisasm) from Triton's bundle, else from PATH."""
    import triton

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    if bundled.exists():
        return bundled
    found = shutil.which(name)
    return Path(found) if found else None


def disassemble(cubin: bytes) -> tuple[str, str]:
    """(SASS listing, resource usage) of a cubin, from cuobjdump; raises if the tool is missing."""
    tool = triton_tool("cuobjdump")
    if tool is None:
        raise FileNotFoundError("cuobjdump not found (neither in Triton's bundle nor on PATH)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        sass = subprocess.run([str(tool), "-sass", str(path)], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([str(tool), "-res-usage", str(path)], capture_output=True, text=True,
                               check=True).stdout
    return sass, usage


def without_locations(ir: str) -> str:
    """MLIR and LLVM IR carry source locations (file paths of the machine that compiled); drop them."""
    if "\t.section\t.debug" in ir:  # PTX: the DWARF sections at the end are line tables, not code
        ir = ir[: ir.find("\t.section\t.debug")]
    lines = [line for line in ir.splitlines() if not line.startswith(("#loc", "!", "attributes #"))]
    text = "\n".join(lines)
    text = re.sub(r" loc\((?:[^()]|\([^()]*\))*\)", "", text)  # MLIR: ` loc(#loc3)`, ` loc("x"(#loc))`
    text = re.sub(r", !dbg !\d+", "", text)  # LLVM IR debug-location metadata
    text = re.sub(r"^\s*\.loc\s.*\n|^\s*\.file\s.*\n", "", text + "\n", flags=re.M)  # PTX line info
    return text.strip("\n")


def sass_instructions(sass: str) -> list[str]:
    """The instruction lines of a cuobjdump SASS listing, without addresses and encodings."""
    out = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;?\s*/\*", line)
        if m:
            out.append(m.group(1).rstrip(" ;"))
    return out


def opcode(instruction: str) -> str:
    """'@!P0 LDG.E.128 R4, desc[...]' -> 'LDG.E.128' (the predicate dropped, the width kept)."""
    parts = instruction.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0] if parts else ""


def opcode_counts(instructions: list[str]) -> Counter:
    return Counter(opcode(i) for i in instructions)


def registers(usage: str) -> int | None:
    m = re.search(r"REG:(\d+)", usage)
    return int(m.group(1)) if m else None


def excerpt(text: str, max_lines: int) -> str:
    lines = text.strip("\n").splitlines()
    if len(lines) <= max_lines:
        return "\n".join(lines)
    return "\n".join(lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"])


def grep(text: str, pattern: str, max_lines: int, context: str) -> str:
    """The lines of text matching pattern (at most max_lines), introduced by a one-line context."""
    hits = [line.rstrip() for line in text.splitlines() if re.search(pattern, line)]
    shown = hits[:max_lines] + ([f"... ({len(hits) - max_lines} more matching lines)"] if len(hits) > max_lines else [])
    return f"{context}\n" + "\n".join(shown)
