"""What a kernel family is: one class that owns its manifest keys and defaults, its name
token, its validity rules, its source template and its cost-model entry.

A family is a frozen dataclass of its knobs deriving from `Family`. Its class attributes:

    FAMILY     the family's key: the manifest's `algorithm` value where a backend has several
               families, and the C enum TD_FAMILY_<FAMILY upper-cased>
    CODE       its td_family value (unique and stable: registries and tables store it)
    BACKEND    the Backend whose targets it builds for
    OPS        the ops it builds: ("gemm",), ("conv",) or both
    YAML_KEYS  the manifest keys it takes, besides `algorithm`
    KEY_SHAPES the value shape of those keys that are not plain words ("pair", "triple", "int")
    HEADER     its kernel template, relative to bindings/
    COST       {op: the C++ function of bindings/cost/ that predicts its kernels' time}
    COST_SOURCE the file defining those functions, relative to bindings/ (meson compiles the
               files the registered families name)
    GROUPED    True for a family that builds the GEMM variant `grouped` (one launch for a list
               of GEMMs), which no other family builds

and its methods (the knobs are `self`):

    from_yaml(values)   the knobs from one combination of manifest values (ValueError: why not)
    default(op)         the knobs when a group names none for this backend (classmethod)
    token               the knobs' part of a kernel name; from_token(token) parses it back,
                        returning None for a token of another family
    problems(op, dtype, layout, variant, tile, target)
                        why the family cannot build this variant ([]: it can)
    instance(config)    the C++ template instance of one variant
    defines(config)     lines the variant's source puts before its header ("" by default)
    info(config)        the family's KernelInfo fields of a variant (the common ones come
                        from the config: see frame.kernel_info)
    to_dict()           the knobs for registry.json

Register a new family with one line in families/__init__.py (or `families.register(cls)`).
"""
from __future__ import annotations


class Family:
    """The base of every family's knobs dataclass (see the module docstring)."""

    FAMILY = ""
    CODE = -1
    BACKEND = None
    OPS = ()
    YAML_KEYS = ()
    KEY_SHAPES = {}  # manifest key -> "pair" | "triple" (lists of ints) | "int" (an int or a word); else a word
    HEADER = ""
    COST = {}
    COST_SOURCE = ""
    GROUPED = False

    @property
    def family(self) -> str:
        return self.FAMILY

    @property
    def algorithm(self) -> str:
        """The manifest's `algorithm` value: the family's key."""
        return self.FAMILY

    @classmethod
    def default(cls, op: str):
        return cls()

    @classmethod
    def reject_keys(cls, values: dict, why: str = "") -> None:
        """ValueError naming the manifest keys of `values` this family does not take."""
        extra = set(values) - set(cls.YAML_KEYS) - {"algorithm"}
        if extra:
            raise ValueError(f"the {cls.FAMILY} algorithm takes no {', '.join(sorted(extra))}{why}")

    def header(self, config) -> str:
        return self.HEADER

    def defines(self, config) -> str:
        return ""

    def info(self, config) -> dict:
        return {}

    def to_dict(self) -> dict:
        return {"algorithm": self.FAMILY}


class Fixed(Family):
    """A family without knobs (its kernels differ by their tile alone): one name token.
    Set TOKEN, and NO_KNOBS_WHY to say in errors why it takes no knobs."""

    TOKEN = ""
    NO_KNOBS_WHY = ""

    @classmethod
    def from_yaml(cls, values: dict):
        cls.reject_keys(values, cls.NO_KNOBS_WHY)
        return cls()

    @property
    def token(self) -> str:
        return self.TOKEN

    @classmethod
    def from_token(cls, token: str):
        return cls() if token == cls.TOKEN else None


class PerGroup(Family):
    """A family specialised for a number of channels per group, its one knob (a dataclass
    field `channels_per_group` in the subclass). Set CPG (the values it builds), CPG_LABEL
    (how errors list them) and TOKEN (names read TOKEN_cpgN)."""

    CPG = ()
    CPG_LABEL = ""
    TOKEN = ""
    YAML_KEYS = ("channels_per_group",)
    KEY_SHAPES = {"channels_per_group": "int"}

    def __post_init__(self):
        if self.channels_per_group not in self.CPG:
            raise ValueError(f"channels_per_group {self.channels_per_group} not one of {self.CPG_LABEL}")

    @classmethod
    def from_yaml(cls, values: dict):
        cls.reject_keys(values)
        cpg = values.get("channels_per_group", "any")
        if not isinstance(cpg, int) or isinstance(cpg, bool) or cpg == 0:
            raise ValueError(f"channels_per_group must be 1, 2, 4, 8, 16 or any, got {cpg!r}")
        return cls(cpg)

    @property
    def token(self) -> str:
        return f"{self.TOKEN}_cpg{self.channels_per_group}"

    @classmethod
    def from_token(cls, token: str):
        prefix = f"{cls.TOKEN}_cpg"
        number = token[len(prefix):]
        return cls(int(number)) if token.startswith(prefix) and number.isdigit() else None

    def info(self, config) -> dict:
        return {"channels_per_group": self.channels_per_group}

    def to_dict(self) -> dict:
        return {"algorithm": self.FAMILY, "channels_per_group": self.channels_per_group}
