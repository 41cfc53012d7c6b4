"""Hostile inputs of issue 13 section 5, shared by the corpus, the fuzz tests and the
bounded-cost tests (which measure them in a child process). Each builder takes its sizes,
so the fuzz tests can draw them and the cost tests can use the large ones."""

from __future__ import annotations


def alias_text_bomb(length: int = 100_000, refs: int = 1500) -> bytes:
    """An operation whose args are ``refs`` aliases of one ``length``-character string: a
    small file that, on today's main, compiles to ``length * refs`` characters."""
    aliases = ", ".join(["*s"] * refs)
    return (
        "kind: Operation\n"
        "presets: [a100]\n"
        "run:\n"
        "  container:\n"
        "    env:\n"
        f'      X: &s "{"A" * length}"\n'
        "    command: [python]\n"
        f"    args: [{aliases}]\n"
    ).encode()


def billion_laughs(levels: int = 9, fan_out: int = 10, key: str = "children") -> str:
    """Nested aliases under ``key``: ``fan_out ** levels`` values once expanded."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * fan_out) + "]"]
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * fan_out) + "]")
    lines.append(f"{key}: *l{levels}")
    return "\n".join(lines) + "\n"


def matrix_bomb(children: int = 200, refs: int = 2000, length: int = 1000) -> bytes:
    """A matrix whose one parameter, ``length`` characters long, is pasted ``refs`` times
    into each of ``children`` children: ``children * refs * length`` characters."""
    values = ", ".join(f'"{i:0{length}d}"' for i in range(children))
    template = "{{ params.x }}" * refs
    return (
        "kind: Operation\n"
        "presets: [a100]\n"
        "run:\n"
        "  container:\n"
        "    command: [python]\n"
        f'    args: ["{template}"]\n'
        "matrix:\n"
        "  kind: grid\n"
        "  params:\n"
        f"    x: [{values}]\n"
    ).encode()


def deep_nesting(depth: int = 5000, opener: str = "[") -> str:
    closer = {"[": "]", "{a: ": "}"}[opener]
    return opener * depth + "x" + closer * depth


OP = "- {operation: vision/train-resnet, phase: Running}\n"

# name -> (content of an --observed file, what the error must say)
OBSERVED: dict[str, tuple[bytes, str]] = {
    "alias-bomb": (billion_laughs(key="entries").encode(), "alias bomb"),
    "alias-text-bomb": (
        b'- {operation: &s "'
        + b"v" * 2000
        + b'", phase: Running}\n'
        + b"- {operation: *s, phase: Running}\n" * 600,
        "characters of text (alias bomb?)",
    ),
    "deep-nesting-flow": (("- " + deep_nesting()).encode(), "nesting deeper than 48 levels"),
    "deep-nesting-block": (
        b"".join(b"  " * i + b"- \n" for i in range(300)) + b"  " * 300 + b"x\n",
        "nesting deeper than 48 levels",
    ),
    "custom-tag": (
        b"- {operation: !!python/object/apply:os.system [id], phase: Running}\n",
        "unsupported YAML tag",
    ),
    "local-tag": (b"- !op {operation: vision/a, phase: Running}\n", "unsupported YAML tag"),
    "binary-tag": (b"- {operation: !!binary aGk=, phase: Running}\n", "unsupported YAML tag"),
    "int-5000-digits-operation": (
        b"- {operation: " + b"9" * 5000 + b", phase: Running}\n",
        "number is 5000 characters long; the limit is 100",
    ),
    "int-5000-digits-request": (
        b"- {operation: vision/a, phase: Running, requests: {nvidia.com/gpu: "
        + b"1" * 5000
        + b"}}\n",
        "number is 5000 characters long; the limit is 100",
    ),
    "float-overflow": (
        b"- {operation: vision/a, phase: Running, requests: {cpu: 1e400}}\n",
        "out of range",
    ),
    "over-size-limit": (OP.encode() * 30_000, "file is larger than the limit of 1048576 bytes"),
    "not-utf8": (b"- {operation: vision/a, phase: \xff}\n", "file is not valid UTF-8"),
    "nul-bytes": (b"\x00" * 64, "unacceptable character #x0000"),
}

# name -> (content of vision/bomb's record on the status branch, what the problem says)
STATUS: dict[str, tuple[bytes, str]] = {
    "alias-bomb-children": (
        ("operation: vision/bomb\nphase: Running\n" + billion_laughs()).encode(),
        "alias bomb",
    ),
    "alias-bomb-message": (
        ("operation: vision/bomb\nphase: Running\n" + billion_laughs(key="message")).encode(),
        "alias bomb",
    ),
    "alias-text-bomb": (
        b'operation: vision/bomb\nphase: Running\nx: &s "'
        + b"v" * 2000
        + b'"\nchildren: ['
        + b", ".join([b"*s"] * 600)
        + b"]\n",
        "characters of text (alias bomb?)",
    ),
    "deep-nesting": (
        ("operation: vision/bomb\nphase: Running\noutputs: " + deep_nesting(5000, "{a: ")).encode(),
        "nesting deeper than 48 levels",
    ),
    "custom-tag": (
        b"operation: vision/bomb\nphase: !!python/name:os.system Running\n",
        "unsupported YAML tag",
    ),
    "int-5000-digits": (
        b"operation: vision/bomb\nphase: Running\ngeneration: " + b"7" * 5000 + b"\n",
        "number is 5000 characters long; the limit is 100",
    ),
    "over-size-limit": (
        b"operation: vision/bomb\nphase: Running\nlogs: " + b"x" * (1 << 21) + b"\n",
        "file is larger than the limit of 1048576 bytes",
    ),
}
