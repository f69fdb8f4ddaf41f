"""Docstring formulas as math on the API page.

The library's docstrings write formulas for ``help()``: Unicode (``WᵀW = I``, ``‖G‖_*``, ``η²``) that reads
as it is, and TeX-like scripts (``R^{m×n}``, ``Δ^{n-1}``, ``(M + ε²I)^{-1/2}``) that show their braces as
plain text. On the API page those become ``:math:`` roles: a literal (````...````) that contains a braced
script is typeset whole, and a braced script in prose (``Δ^{n-1}``, ``e^{-t}``) is typeset with its base.
:func:`to_tex` translates the Unicode to TeX; everything else is left as written.
"""

from __future__ import annotations

import re

GREEK = dict(zip("αβγδεζηθικλμνξπρστυφχψωΓΔΘΛΞΠΣΥΦΨΩ",
                 r"\alpha \beta \gamma \delta \varepsilon \zeta \eta \theta \iota \kappa \lambda \mu \nu \xi \pi "
                 r"\rho \sigma \tau \upsilon \varphi \chi \psi \omega \Gamma \Delta \Theta \Lambda \Xi \Pi \Sigma "
                 r"\Upsilon \Phi \Psi \Omega".split()))
SYMBOLS = {"ᵀ": r"^{\top}", "⊥": r"^{\perp}", "⁻¹": "^{-1}", "²": "^{2}", "³": "^{3}", "⁴": "^{4}", "⁵": "^{5}",
           "₀": "_{0}", "₁": "_{1}", "₂": "_{2}", "‖": r"\|", "∈": r"\in ", "×": r"\times ", "≠": r"\neq ",
           "≤": r"\le ", "≥": r"\ge ", "≈": r"\approx ", "∝": r"\propto ", "≻": r"\succ ", "⪰": r"\succeq ",
           "∇": r"\nabla ", "·": r"\cdot ", "→": r"\to ", "∘": r"\circ ", "…": r"\dots ", "∞": r"\infty ",
           "∂": r"\partial ", "−": "-", "∫": r"\int ", "Σ": r"\Sigma ", "<-": r"\leftarrow ", "->": r"\to ",
           "<=": r"\le ", ">=": r"\ge ", "!=": r"\neq "}
OPERATORS = {"tr", "msign", "diag", "det", "sign", "Var", "Cov", "log1p", "expm1"}
FUNCTIONS = {"log", "exp", "min", "max", "sin", "cos", "tanh", "sqrt"}
WORDS = {"in": r"\in"}
_TOKEN = re.compile(r"<-|->|<=|>=|!=|⁻¹|√|[A-Za-z][A-Za-z0-9]*|.", re.S)
# a braced script in prose: its base (letters, Greek, digits) or a closing bracket, then ^{...} or _{...}
_SCRIPT = re.compile(r"(?:[A-Za-z0-9" + "".join(GREEK) + r"]+|[)\]])(?:[\^_](?:\{[^{}]*\}|[A-Za-z0-9]))*"
                     r"[\^_]\{[^{}]*\}(?:[\^_](?:\{[^{}]*\}|[A-Za-z0-9]))*")
_SPANS = re.compile(r"``[^`]+``|(?::[\w:+-]+:)?`[^`]+`_?")
_OPENERS, _CLOSERS = " \t-:/'\"<([{", " \t-.,:;!?\\/'\")]}>"


def _word(word: str, in_script: bool = False) -> str:
    if in_script and len(word) == 2 and word.islower() and word not in WORDS:
        return word  # e^{-ta}, e^{qw}: a product of two symbols in an exponent
    if word in OPERATORS:
        return rf"\operatorname{{{word}}}"
    if word in FUNCTIONS:
        return "\\" + word
    if word in WORDS:
        return WORDS[word] + " "
    if len(word) > 1 and any(c.islower() for c in word):  # an identifier, not a product of symbols (WX)
        return r"\mathrm{" + word.replace("_", r"\_") + "}"
    return word


def _merge_scripts(tex: str) -> str:
    # W⊥ᵀ gives ^{\perp}^{\top}: one superscript group (a double superscript is a TeX error)
    for mark in ("^", "_"):
        pattern = re.compile(re.escape(mark) + r"\{([^{}]*)\}" + re.escape(mark) + r"\{([^{}]*)\}")
        while pattern.search(tex):
            tex = pattern.sub(lambda m: mark + "{" + m[1] + m[2] + "}", tex)
    return tex


def to_tex(expr: str) -> str:
    """TeX for a docstring formula: Unicode symbols and Greek letters as macros, words upright.

    ``{`` after ``^``/``_`` opens a group; any other brace is a set brace and is escaped. ``√x`` and ``√(x)``
    become ``\\sqrt{x}``. Raises ``ValueError`` for unbalanced braces.
    """
    out, stack, tokens = [], [], _TOKEN.findall(expr)
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "√":
            arg, i = _sqrt_argument(tokens, i + 1)
            out.append(r"\sqrt{" + to_tex(arg) + "}")
            continue
        if tok == "{":
            group = bool(out) and out[-1].endswith(("^", "_"))
            stack.append(group)
            out.append("{" if group else r"\{")
        elif tok == "}":
            if not stack:
                raise ValueError(f"unbalanced braces in {expr!r}")
            out.append("}" if stack.pop() else r"\}")
        elif tok in SYMBOLS:
            out.append(SYMBOLS[tok])
        elif tok in GREEK:
            out.append(GREEK[tok] + " ")
        elif tok == "R" and tokens[i + 1:i + 2] == ["^"] and "∈" in expr:
            out.append(r"\mathbb{R}")  # W ∈ R^{m×n}: the real numbers
        elif tok[0].isalpha() and tok.isascii():
            prev = out[-1] if out else ""
            # a multi-letter subscript without braces (_sym, _skew) is one upright group
            word = _word(tok, in_script=any(stack))
            out.append("{" + word + "}" if prev.endswith("_") and len(tok) > 1 else word)
        elif tok in "#$%&":
            out.append("\\" + tok)
        else:
            out.append(tok)
        i += 1
    if stack:
        raise ValueError(f"unbalanced braces in {expr!r}")
    return _merge_scripts("".join(out)).strip()


def _sqrt_argument(tokens: list[str], i: int) -> tuple[str, int]:
    """The argument of √ at ``tokens[i]``: a parenthesised group (without its parentheses) or one token."""
    if i < len(tokens) and tokens[i] == "(":
        depth, j = 0, i
        while j < len(tokens):
            depth += tokens[j] == "("
            depth -= tokens[j] == ")"
            if depth == 0:
                return "".join(tokens[i + 1:j]), j + 1
            j += 1
    return (tokens[i], i + 1) if i < len(tokens) else ("", i)


def _role(tex: str, before: str, after: str) -> str:
    # reST recognises a role only after whitespace or an opening mark, and before whitespace or punctuation;
    # elsewhere an escaped space (which prints nothing) separates it
    start = "" if not before or before in _OPENERS else "\\ "
    end = "" if not after or after in _CLOSERS else "\\ "
    return f"{start}:math:`{tex}`{end}"


def _has_script(text: str) -> bool:
    return re.search(r"[\^_]\{", text) is not None


def math_roles(line: str) -> str:
    """A docstring line with its braced formulas as ``:math:`` roles (see the module docstring)."""
    pieces, pos = [], 0
    for m in _SPANS.finditer(line):
        pieces.append(_prose(line[pos:m.start()], line[m.start() - 1] if m.start() else "", m[0][0]))
        span = m[0]
        if span.startswith("``") and _has_script(span):
            try:
                tex = to_tex(span[2:-2])
            except ValueError:
                tex = None
            if tex is not None:
                span = _role(tex, line[m.start() - 1] if m.start() else "", line[m.end()] if m.end() < len(line) else "")
        pieces.append(span)
        pos = m.end()
    pieces.append(_prose(line[pos:], line[pos - 1] if pos else "", ""))
    return "".join(pieces)


def _prose(text: str, before_text: str, after_text: str) -> str:
    """Braced scripts of plain text (no roles or literals in it) as math."""
    out, pos = [], 0
    for m in _SCRIPT.finditer(text):
        try:
            tex = to_tex(m[0])
        except ValueError:
            continue
        before = text[m.start() - 1] if m.start() else before_text
        after = text[m.end()] if m.end() < len(text) else after_text
        out.append(text[pos:m.start()] + _role(tex, before, after))
        pos = m.end()
    return "".join(out) + text[pos:]
