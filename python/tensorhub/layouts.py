"""``tensorhub.layouts``: the standard selections of a model's tensors, so a
rank that fetches only its slice (fetch by selection) does not write them
by hand.

A *selection* is a plain dict: tensor name -> a tuple of Python ``slice``s,
one per dimension of the tensor's global shape, as torch indexes it (the
index of ``tensorhub.Slice``): ``slice(None)`` for a whole dimension,
``slice(start, stop)`` with ``0 <= start < stop <= extent`` otherwise,
never a step other than 1. A tuple of ``slice(None)`` only is the whole
tensor. A tensor a rank needs nothing of has no entry at all: no empty
slice is ever written.

What this module gives:

- ``tensor_parallel(tensors, tp_size, tp_rank)``: vLLM's (Megatron's)
  tensor-parallel rules for Hugging Face decoders (Llama, Qwen2/Qwen3,
  Mistral/Mixtral, Qwen2-MoE/Qwen3-MoE, DeepSeek-V2/V3, GLM-4 and GLM-4.5);
  ``tensor_parallel_rules()`` is the same table as a ``Rules``.
- ``expert_parallel(tensors, ep_size, ep_rank)``: each ``experts.N.*``
  tensor whole on the rank that owns expert N; the rest by the
  tensor-parallel rules.
- ``pipeline_stage(tensors, num_stages, stage)``: a pipeline stage's
  layers, embeddings on the first stage, final norm and LM head on the last.
- ``Rules([(regex, placement), ...], default=None)`` with the placements
  ``split(dim)``, ``replicate`` and ``skip``: any other layout.
- ``check(selection, tensors)``: a hand-written selection, validated
  against the shapes; ``intersect(a, b, ...)``: what several selections
  all select (a pipeline stage's tensor-parallel slice, say).

``tensors`` is always a mapping of tensor name to its global shape (a tuple
or list of ints) or to anything with a ``.shape`` (a numpy array, a torch
tensor, a meta tensor). Results keep the mapping's order. Every refusal is
a ``tensorhub.Error`` (code ``invalid_argument``; a wrong type is also a
``TypeError``) with a one-line reason naming the tensor where one is at
fault.

What stays in the engine's own loader: fusing q/k/v or gate/up into its
fused parameters (``qkv_proj``, ``gate_up_proj``), narrowing a tensor that
a checkpoint already stores fused, and (re-)quantizing. This module only
says which elements of the checkpoint's tensors a rank reads.

Imports nothing of the package but ``_errors``: importing it is cheap.
"""
from __future__ import annotations

import numbers
import operator
import re
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ._errors import ArgumentTypeError, Error

__all__ = ["Placement", "Rules", "split", "replicate", "skip", "tensor_parallel_rules", "tensor_parallel",
           "expert_parallel", "pipeline_stage", "check", "intersect"]

Index = Tuple[slice, ...]
Selection = Dict[str, Index]


def _invalid(message: str) -> Error:
    return Error("invalid argument: " + message, "invalid_argument")


# --- the small core every layout shares -------------------------------------

def _whole(shape: Tuple[int, ...]) -> Index:
    """The index of a whole tensor of ``shape``."""
    return (slice(None),) * len(shape)


def _cut(shape: Tuple[int, ...], dim: int, start: int, stop: int) -> Optional[Index]:
    """The index of rows ``[start, stop)`` of dimension ``dim`` (whole in
    the others); None when the range is empty; ``slice(None)`` when it is
    the whole dimension."""
    if start == 0 and stop == shape[dim]:
        return _whole(shape)  # a tensor of extent 0 too: nothing to fetch, but it is the rank's
    if stop <= start:
        return None
    return tuple(slice(start, stop) if d == dim else slice(None) for d in range(len(shape)))


def _part_of(sizes: Sequence[int], item: int) -> int:
    """Which part holds ``item`` when parts of ``sizes`` lie end to end."""
    end = 0
    for part, size in enumerate(sizes):
        end += size
        if item < end:
            return part
    return len(sizes)  # past the last part


def _count(name: str, value, low: int = 0, high: Optional[int] = None) -> int:
    """``value`` as an int in [low, high), or raises naming ``name``."""
    if isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be an int, not bool {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ArgumentTypeError(f"{name} must be an int, not {type(value).__name__} {value!r}"[:300]) from None
    if number < low or (high is not None and number >= high):
        bound = f"from {low} to {high - 1}" if high is not None else f"{low} or more"
        raise _invalid(f"{name} must be {bound}, not {number}")
    return number


def _shapes(tensors) -> Dict[str, Tuple[int, ...]]:
    """name -> global shape (a tuple of ints), in the mapping's order."""
    if not isinstance(tensors, Mapping):
        raise ArgumentTypeError(f"tensors must be a mapping of name to shape (or to a tensor), not "
                                f"{type(tensors).__name__}")
    shapes = {}
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise ArgumentTypeError(f"tensors: a tensor name must be a str, not {type(name).__name__} {name!r}"[:300])
        shape = getattr(value, "shape", value)
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
            raise ArgumentTypeError(f"tensors[{name!r}]: a shape (a tuple of ints) or an object with .shape, not "
                                    f"{type(value).__name__}")
        dims = []
        for extent in shape:
            if isinstance(extent, bool):
                extent = None
            try:
                extent = operator.index(extent)
            except TypeError:
                extent = None
            if extent is None or extent < 0:
                raise _invalid(f"tensors[{name!r}]: shape {tuple(shape)!r} is not a tuple of ints 0 or more")
            dims.append(extent)
        shapes[name] = tuple(dims)
    return shapes


def _from_config(config, *keys: str) -> Optional[int]:
    """The first of ``keys`` that the (Hugging Face) ``config`` mapping
    holds, or None."""
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise ArgumentTypeError(f"config must be a mapping (a model's config.json, or PretrainedConfig.to_dict()), "
                                f"not {type(config).__name__}")
    for key in keys:
        if config.get(key) is not None:
            return _count(f"config[{key!r}]", config[key], 1)
    return None


# --- placements ---------------------------------------------------------------

class Placement:
    """What a rule does with a tensor it matches: ``split(dim, ...)``,
    ``replicate`` (whole on every rank) or ``skip`` (on no rank). Build
    them with ``split``; the other two are module constants. Raises
    nothing itself; ``select`` raises ``tensorhub.Error`` as ``Rules.select``
    says."""

    __slots__ = ("kind", "dim", "heads", "ragged", "pad_to")

    def __init__(self, kind: str, dim: int = 0, heads: Optional[int] = None, ragged: bool = False,
                 pad_to: int = 1):
        self.kind, self.dim, self.heads, self.ragged, self.pad_to = kind, dim, heads, ragged, pad_to

    def __repr__(self) -> str:
        if self.kind != "split":
            return f"tensorhub.layouts.{self.kind}"
        extra = f", heads={self.heads}" if self.heads is not None else ""
        extra += ", ragged=True" if self.ragged else ""
        extra += f", pad_to={self.pad_to}" if self.pad_to != 1 else ""
        return f"tensorhub.layouts.split({self.dim}{extra})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Placement) and all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, s) for s in self.__slots__))

    def select(self, name: str, shape: Sequence[int], tp_size: int, tp_rank: int) -> Optional[Index]:
        """Rank ``tp_rank`` of ``tp_size``'s index into tensor ``name`` of
        ``shape``, or None when it holds nothing of it (``skip``, or an
        empty part of a ragged split). Raises Error (``invalid_argument``)
        naming the tensor: a dimension the tensor lacks, an extent that
        does not split as the placement requires."""
        shape = tuple(shape)
        if self.kind == "skip":
            return None
        if self.kind == "replicate":
            return _whole(shape)
        if not -len(shape) <= self.dim < len(shape):
            raise _invalid(f"tensor {name!r}: it has {len(shape)} dimensions, so no dimension {self.dim} to split "
                           f"(shape {list(shape)})")
        dim = self.dim % len(shape)
        start, stop = self._range(name, dim, shape[dim], tp_size, tp_rank)
        return _cut(shape, dim, start, stop)

    def _range(self, name: str, dim: int, extent: int, parts: int, index: int) -> Tuple[int, int]:
        """Part ``index`` of ``parts`` of a dimension of ``extent``."""
        where = f"tensor {name!r}: dimension {dim} (extent {extent})"
        if self.ragged:  # [r*B, min(E, (r+1)*B)), B = ceil(ceil(E/pad_to)*pad_to / parts)
            padded = -(-extent // self.pad_to) * self.pad_to
            block = -(-padded // parts)
            return min(extent, index * block), min(extent, (index + 1) * block)
        if self.heads is None:
            if extent % parts:
                raise _invalid(f"{where} does not split evenly over tp_size {parts} (vLLM splits attention "
                               "heads and MLP columns evenly)")
            block = extent // parts
            return index * block, (index + 1) * block
        heads = self.heads
        if extent % heads:
            raise _invalid(f"{where} is not {heads} heads of equal size")
        if parts <= heads:
            if heads % parts:
                raise _invalid(f"{where}: its {heads} heads do not split evenly over tp_size {parts}")
            block = extent // parts
            return index * block, (index + 1) * block
        if parts % heads:  # fewer heads than ranks: each head on parts/heads consecutive ranks
            raise _invalid(f"{where}: tp_size {parts} is not a multiple of its {heads} heads, so they cannot "
                           "be replicated evenly")
        head, size = index * heads // parts, extent // heads
        return head * size, (head + 1) * size


def split(dim: int, *, heads: Optional[int] = None, ragged: bool = False, pad_to: int = 1) -> Placement:
    """Split dimension ``dim`` (negative counts from the end) over the
    ``tp_size`` ranks: rank r holds the r-th of ``tp_size`` equal blocks,
    and ``tp_size`` must divide the extent (else ``select`` raises, naming
    the tensor, dimension, extent and tp_size).

    ``heads=H``: the dimension is H heads of equal size, never cut. With
    ``tp_size <= H``, H must split evenly; with ``tp_size > H``, ``tp_size``
    must be a multiple of H and rank r holds the single head
    ``r * H // tp_size`` (vLLM's replication of KV heads under GQA).

    ``ragged=True`` (a vocabulary): any extent E; rank r holds
    ``[r*B, min(E, (r+1)*B))`` with ``B = ceil(ceil(E / pad_to) * pad_to /
    tp_size)``, so the last ranks may hold less, or nothing (then the
    tensor has no entry in their selection). ``pad_to=64`` is vLLM's
    vocabulary padding, which decides where its ranks' rows begin.

    Raises Error (``invalid_argument``, also a TypeError for a non-int):
    ``heads`` below 1, ``pad_to`` below 1, ``pad_to`` or ``heads`` with the
    wrong kind of split."""
    dim = _count("split: dim", dim, -(1 << 31))
    if heads is not None:
        heads = _count("split: heads", heads, 1)
    pad_to = _count("split: pad_to", pad_to, 1)
    if heads is not None and ragged:
        raise _invalid("split: heads= and ragged=True do not go together (heads are never cut)")
    if pad_to != 1 and not ragged:
        raise _invalid("split: pad_to= applies to a ragged split only (ragged=True)")
    return Placement("split", dim, heads, bool(ragged), pad_to)


#: The whole tensor on every rank.
replicate = Placement("replicate")
#: The tensor on no rank (not fetched).
skip = Placement("skip")


def _placement(value, what: str) -> Placement:
    if isinstance(value, Placement):
        return value
    if value == "replicate":
        return replicate
    if value == "skip":
        return skip
    raise ArgumentTypeError(f"{what}: a placement (split(dim), replicate or skip; 'replicate' or 'skip' as a str), "
                            f"not {value!r}"[:300])


# --- rules ------------------------------------------------------------------------

class Rules:
    """An ordered table of ``(regex, placement)``: a tensor takes the
    placement of the first rule whose regex ``re.search``es its name.
    ``default``: the placement of a name no rule matches (``replicate``,
    ``skip``, a ``split``, or the strings ``"replicate"`` / ``"skip"``);
    None (the default) makes ``select`` raise on the first such name, since
    a silent default would fetch the wrong thing without a word.

    ``Rules([(r"\\.attn\\.c_attn\\.", split(0)), (r"\\bln_", replicate)])``.
    ``rules`` is the table as a tuple of (pattern, placement), so a
    standard table can be extended: ``Rules(my_rules +
    list(tensor_parallel_rules().rules))``.

    Raises Error (``invalid_argument``; also a TypeError for a wrong type)
    at once for a rule that is not a (str, placement) pair or a regex that
    does not compile, naming it."""

    def __init__(self, rules: Iterable[Tuple[str, Placement]], default=None):
        table: List[Tuple[str, Placement]] = []
        self._compiled = []
        for number, rule in enumerate(rules):
            if not isinstance(rule, (tuple, list)) or len(rule) != 2 or not isinstance(rule[0], str):
                raise ArgumentTypeError(f"Rules: rule {number} must be a (regex, placement) pair, not {rule!r}"[:300])
            placement = _placement(rule[1], f"Rules: rule {number} ({rule[0]!r})")
            try:
                self._compiled.append((re.compile(rule[0]), placement))
            except re.error as e:
                raise _invalid(f"Rules: rule {number}: {rule[0]!r} is not a regex ({e})") from None
            table.append((rule[0], placement))
        self.rules: Tuple[Tuple[str, Placement], ...] = tuple(table)
        self.default: Optional[Placement] = None if default is None else _placement(default, "Rules: default")

    def __repr__(self) -> str:
        return f"tensorhub.layouts.Rules({len(self.rules)} rules, default={self.default!r})"

    def placement(self, name: str) -> Placement:
        """The placement of tensor ``name``: the first matching rule's, else
        the default. Raises Error (``invalid_argument``) naming the tensor
        when no rule matches and there is no default."""
        for pattern, placement in self._compiled:
            if pattern.search(name):
                return placement
        if self.default is None:
            raise _invalid(f"tensor {name!r} matches no rule (say default='replicate' or 'skip', or add a rule "
                           "for it)")
        return self.default

    def select(self, tensors, tp_size: int, tp_rank: int) -> Selection:
        """Rank ``tp_rank`` of ``tp_size``'s selection of ``tensors`` (name ->
        shape, or -> anything with ``.shape``), in their order; a tensor the
        rank holds nothing of has no entry. Raises Error
        (``invalid_argument``; also a TypeError for a wrong type) with a
        one-line reason: a bad tp_size or tp_rank, a bad shape, the first
        tensor no rule matches (without a default), a dimension that does
        not split as its placement requires (naming tensor, dimension,
        extent and tp_size)."""
        tp_size = _count("tp_size", tp_size, 1)
        tp_rank = _count("tp_rank", tp_rank, 0, tp_size)
        selection = {}
        for name, shape in _shapes(tensors).items():
            index = self.placement(name).select(name, shape, tp_size, tp_rank)
            if index is not None:
                selection[name] = index
        return selection


# --- tensor parallel ----------------------------------------------------------

# A tensor's last name component (the parameter) that a split covers: the
# weight, its bias, and a block-quantized weight's scales (DeepSeek-V3's FP8
# `weight_scale_inv`, one per 128x128 block: they split with their weight
# when the block size divides each rank's part, as vLLM requires).
_SPLIT = r"\.(?:weight|bias|weight_scale_inv)$"
_ROW = r"(?:^|\.)(?:o_proj|down_proj|w2|dense_4h_to_h|self_attention\.dense)"


def tensor_parallel_rules(*, num_key_value_heads: Optional[int] = None, config: Optional[Mapping] = None,
                          vocab_padding: int = 64, default=None) -> Rules:
    """vLLM's tensor-parallel placement of Hugging Face decoder checkpoints
    (Llama, Qwen2/Qwen3, Mistral/Mixtral, Qwen2-MoE/Qwen3-MoE,
    DeepSeek-V2/V3, GLM-4 in both its ChatGLM and its Hugging Face names,
    GLM-4.5), as a ``Rules``. In order, first match wins:

    - replicated: every norm (a module named ``*norm*``: ``input_layernorm``,
      ``model.norm``, ``q_norm``, ``kv_a_layernorm``, ``final_layernorm``,
      ...); rotary buffers (``rotary_emb.*``, ``*.inv_freq``); MoE routers
      (``mlp.gate.*``, ``block_sparse_moe.gate.*``, the
      ``e_score_correction_bias``, ``shared_expert_gate``); DeepSeek's
      ``q_a_proj`` and ``kv_a_proj_with_mqa`` and the MTP layer's
      ``eh_proj``;
    - whole on every rank as well: tensors the checkpoint stores fused
      (``query_key_value``, ``qkv_proj``, ``gate_up_proj``,
      ``dense_h_to_4h``). A rank's rows of a fused tensor are several
      blocks (its q, k and v heads; its gate and up columns), which one
      rectangle cannot name, so the rank reads it whole and the engine's
      loader narrows it, as it does;
    - ``k_proj``, ``v_proj``: column-parallel (dim 0, bias too). With
      ``num_key_value_heads`` (or ``config``) given, by whole KV heads
      (head size = extent / heads): when there are fewer KV heads than
      ranks, rank r holds head ``r * num_key_value_heads // tp_size``, as
      vLLM replicates them. Without it they split evenly like ``q_proj``,
      which is wrong under GQA with fewer KV heads than ranks: give it;
    - column-parallel, ``split(0)`` of weight and bias: ``q_proj``,
      ``q_b_proj``, ``kv_b_proj``, ``gate_proj``, ``up_proj`` (dense MLPs,
      shared experts, and routed experts' under pure tensor parallelism),
      Mixtral's ``w1`` and ``w3``;
    - row-parallel, ``split(1)`` of the weight, bias replicated: ``o_proj``,
      ``down_proj``, ``w2``, ChatGLM's ``self_attention.dense`` and
      ``dense_4h_to_h``;
    - vocabulary-parallel, ``split(0, ragged=True, pad_to=vocab_padding)``:
      ``embed_tokens``, ``lm_head``, ChatGLM's ``word_embeddings`` and
      ``output_layer``, the MTP layer's ``shared_head.head``. vLLM pads the
      vocabulary to a multiple of 64 (``vocab_padding``; 1 for none) and
      gives each rank an equal block of the padded rows, so the last ranks
      hold fewer real rows, or none.

    A split covers a module's ``weight``, ``bias`` and ``weight_scale_inv``;
    any other tensor (``weight_scale``, ``input_scale``, a model's own
    extras) matches no rule and is refused unless ``default`` says
    ``"replicate"`` or ``"skip"``. ``config``: a model's config.json as a
    mapping, read for ``num_key_value_heads`` (else
    ``num_attention_heads``: no GQA) when the argument is not given.

    Raises Error (``invalid_argument``; also a TypeError for a wrong type):
    a ``num_key_value_heads`` or ``vocab_padding`` below 1, a config that is
    not a mapping or holds a bad count, a bad ``default``."""
    if num_key_value_heads is None:
        num_key_value_heads = _from_config(config, "num_key_value_heads", "num_attention_heads")
    else:
        num_key_value_heads = _count("num_key_value_heads", num_key_value_heads, 1)
    vocab = split(0, ragged=True, pad_to=_count("vocab_padding", vocab_padding, 1))
    kv = split(0) if num_key_value_heads is None else split(0, heads=num_key_value_heads)
    return Rules([
        (r"(?:^|\.)[^.]*norm[^.]*\.[^.]+$", replicate),
        (r"(?:^|\.)(?:rotary_emb|rotary_pos_emb)\.|\.inv_freq$", replicate),
        (r"(?:^|\.)(?:gate|shared_expert_gate)\.[^.]+$", replicate),
        (r"(?:^|\.)(?:q_a_proj|kv_a_proj_with_mqa|eh_proj)\.[^.]+$", replicate),
        (r"(?:^|\.)(?:query_key_value|qkv_proj|gate_up_proj|dense_h_to_4h)\.[^.]+$", replicate),
        (r"(?:^|\.)(?:k_proj|v_proj)" + _SPLIT, kv),
        (r"(?:^|\.)(?:q_proj|q_b_proj|kv_b_proj|gate_proj|up_proj|w1|w3)" + _SPLIT, split(0)),
        (_ROW + r"\.(?:weight|weight_scale_inv)$", split(1)),
        (_ROW + r"\.bias$", replicate),
        (r"(?:^|\.)(?:embed_tokens|word_embeddings|lm_head|output_layer|shared_head\.head)\.weight$", vocab),
    ], default=default)


def tensor_parallel(tensors, tp_size: int, tp_rank: int, *, num_key_value_heads: Optional[int] = None,
                    config: Optional[Mapping] = None, vocab_padding: int = 64, default=None) -> Selection:
    """Rank ``tp_rank`` of ``tp_size``'s selection of a Hugging Face decoder
    checkpoint's ``tensors`` under vLLM's tensor parallelism:
    ``tensor_parallel_rules(num_key_value_heads=, config=, vocab_padding=,
    default=).select(tensors, tp_size, tp_rank)`` (that function lists the
    rules). Every tensor is either split (column, row or vocabulary), whole
    on every rank, or (a ragged vocabulary's empty part) absent.

    Raises Error (``invalid_argument``; also a TypeError for a wrong type),
    one line: the first tensor no rule matches, naming it (pass
    ``default="replicate"`` to take such tensors whole); a column or row
    split whose extent ``tp_size`` does not divide, naming tensor,
    dimension, extent and tp_size; KV heads that neither split evenly nor
    replicate evenly; bad arguments."""
    rules = tensor_parallel_rules(num_key_value_heads=num_key_value_heads, config=config,
                                  vocab_padding=vocab_padding, default=default)
    return rules.select(tensors, tp_size, tp_rank)


# --- expert parallel ----------------------------------------------------------

_EXPERT = re.compile(r"(?:^|\.)experts\.(\d+)\.")


def _expert_owner(ep_size: int, num_experts: int, expert_map) -> Callable[[int], Optional[int]]:
    """expert -> the EP rank that holds it: the explicit ``expert_map``, or
    vLLM's linear placement (contiguous blocks, the remainder one each to
    the first ranks)."""
    if expert_map is None:
        base, extra = divmod(num_experts, ep_size)
        return lambda expert: _part_of([base + (r < extra) for r in range(ep_size)], expert)
    if isinstance(expert_map, Mapping):
        owners = dict(expert_map.items())
    elif isinstance(expert_map, Sequence) and not isinstance(expert_map, (str, bytes)):
        owners = dict(enumerate(expert_map))
    else:
        raise ArgumentTypeError(f"expert_map must map expert -> rank (a mapping or a sequence), not "
                                f"{type(expert_map).__name__}")
    for expert, rank in owners.items():
        _count(f"expert_map: expert {expert!r}", expert, 0)
        _count(f"expert_map[{expert!r}]", rank, 0, ep_size)
    return lambda expert: owners.get(expert)


def expert_parallel(tensors, ep_size: int, ep_rank: int, *, expert_map=None, num_experts: Optional[int] = None,
                    tp_size: int = 1, tp_rank: int = 0, rules: Optional[Rules] = None,
                    config: Optional[Mapping] = None) -> Selection:
    """Rank ``ep_rank`` of ``ep_size``'s selection under expert
    parallelism: every routed expert's tensor (``...experts.N.*``: Mixtral's
    ``block_sparse_moe.experts.N.w1/w2/w3``, Qwen's and DeepSeek's
    ``mlp.experts.N.gate_proj/up_proj/down_proj``, their scales) goes whole
    to the rank that owns expert N, and to no other; every other tensor
    (attention, routers, norms, embeddings, shared experts, which follow the
    dense MLP's rules) takes ``rules`` (the standard
    ``tensor_parallel_rules(config=config)`` unless given) for rank
    ``tp_rank`` of ``tp_size``: whole, when ``tp_size`` is 1. (vLLM's EP
    group is its DP x TP ranks: ``ep_rank = dp_rank * tp_size + tp_rank``.)

    Ownership: ``expert_map`` (a mapping expert -> rank, or a sequence whose
    i-th item is expert i's rank), or else vLLM's linear placement of
    ``num_experts`` experts: contiguous blocks of ``num_experts // ep_size``,
    the remainder one each to the first ranks (when ``ep_size`` divides
    ``num_experts``, expert e is rank ``e // (num_experts / ep_size)``'s).
    ``num_experts`` defaults to ``config``'s ``n_routed_experts`` /
    ``num_local_experts`` / ``num_experts``, else to the highest expert
    number in ``tensors`` plus 1, which is wrong for a table that lacks the
    last experts: give it then.

    Raises Error (``invalid_argument``; also a TypeError for a wrong type):
    a bad ``ep_size``/``ep_rank``/``tp_size``/``tp_rank``; an
    ``expert_map`` whose rank is outside ``[0, ep_size)``; an expert tensor
    whose expert the map does not name, or numbered ``num_experts`` or
    more (naming the tensor); and what ``Rules.select`` raises for the
    other tensors."""
    ep_size = _count("ep_size", ep_size, 1)
    ep_rank = _count("ep_rank", ep_rank, 0, ep_size)
    shapes = _shapes(tensors)
    experts = {name: int(m.group(1)) for name in shapes for m in [_EXPERT.search(name)] if m}
    if num_experts is None:
        num_experts = _from_config(config, "n_routed_experts", "num_local_experts", "num_experts")
    if num_experts is None:
        num_experts = max(experts.values(), default=-1) + 1
    num_experts = _count("num_experts", num_experts, 0)
    owner = _expert_owner(ep_size, num_experts, expert_map)
    if rules is None:
        rules = tensor_parallel_rules(config=config)
    elif not isinstance(rules, Rules):
        raise ArgumentTypeError(f"rules must be a tensorhub.layouts.Rules, not {type(rules).__name__}")
    others = rules.select({n: s for n, s in shapes.items() if n not in experts}, tp_size, tp_rank)
    selection = {}
    for name, shape in shapes.items():
        if name not in experts:
            if name in others:
                selection[name] = others[name]
            continue
        expert = experts[name]
        if expert >= num_experts:
            raise _invalid(f"tensor {name!r}: expert {expert} of {num_experts} (num_experts)")
        rank = owner(expert)
        if rank is None:
            raise _invalid(f"tensor {name!r}: expert_map names no rank for expert {expert}")
        if rank == ep_rank:
            selection[name] = _whole(shape)
    return selection


# --- pipeline parallel --------------------------------------------------------

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_FIRST = re.compile(r"(?:^|\.)(?:embed_tokens|word_embeddings)\.")
_LAST = re.compile(r"(?:^|\.)(?:norm|final_layernorm|lm_head|output_layer)\.[^.]+$")
_HEAD = re.compile(r"(?:^|\.)(?:lm_head|output_layer)\.weight$")
_EVERY = re.compile(r"(?:^|\.)(?:rotary_emb|rotary_pos_emb)\.|\.inv_freq$")


def _layer_partition(num_layers: int, num_stages: int) -> List[int]:
    """vLLM's even split of layers over stages (``get_pp_indices``): equal
    counts, the remainder one each to the stages before the last, from the
    second-to-last backwards."""
    counts = [num_layers // num_stages] * num_stages
    for i in range(2, num_layers % num_stages + 2):
        counts[-i] += 1
    return counts


def pipeline_stage(tensors, num_stages: int, stage: int, num_layers: Optional[int] = None, *,
                   partition: Optional[Sequence[int]] = None, tie_word_embeddings: Optional[bool] = None,
                   default=None) -> Selection:
    """Stage ``stage`` of ``num_stages``'s tensors, each whole (intersect it
    with a ``tensor_parallel`` selection for the stage's TP ranks).

    Layers ``...layers.L.*`` (``model.layers``, ChatGLM's
    ``transformer.encoder.layers``) go to the stage that holds layer L under
    vLLM's split of ``num_layers`` (default: the highest L in ``tensors``
    plus 1): equal counts, the remainder one each to the stages before the
    last, from the second-to-last backwards; or ``partition``, the layer
    count of each stage (vLLM's ``VLLM_PP_LAYER_PARTITION``), which must
    sum to ``num_layers``. Layers numbered ``num_layers`` or more
    (DeepSeek-V3's and GLM-4.5's MTP layers: pass
    ``num_layers=config["num_hidden_layers"]``) go to the last stage.
    Embeddings (``embed_tokens``, ``word_embeddings``) go to the first
    stage, and to the last too when the word embeddings are tied (vLLM
    builds them there for the LM head): ``tie_word_embeddings``, by default
    true when ``tensors`` has no ``lm_head.weight`` / ``output_layer.weight``.
    The final norm and the LM head go to the last stage; rotary buffers to
    every stage. Any other tensor outside the layers is refused unless
    ``default`` is ``"replicate"`` (every stage) or ``"skip"``.

    Raises Error (``invalid_argument``; also a TypeError for a wrong type):
    bad counts, a ``stage`` outside ``[0, num_stages)``, a ``partition`` of
    the wrong length or sum, the first tensor outside the layers that no
    rule places (without a default), naming it."""
    num_stages = _count("num_stages", num_stages, 1)
    stage = _count("stage", stage, 0, num_stages)
    shapes = _shapes(tensors)
    layers = {name: int(m.group(1)) for name in shapes for m in [_LAYER.search(name)] if m}
    if partition is not None:
        partition = [_count(f"partition[{i}]", n, 0) for i, n in enumerate(partition)]
        if len(partition) != num_stages:
            raise _invalid(f"partition: {len(partition)} stage counts for num_stages {num_stages}")
    if num_layers is None:
        num_layers = max(layers.values(), default=-1) + 1
    num_layers = _count("num_layers", num_layers, 0)
    if partition is None:
        partition = _layer_partition(num_layers, num_stages)
    elif sum(partition) != num_layers:
        raise _invalid(f"partition: its counts sum to {sum(partition)}, not num_layers {num_layers} (give num_layers "
                       "when the table holds layers past the model's, such as MTP layers)")
    if default is not None:
        default = _placement(default, "default")
        if default not in (replicate, skip):
            raise _invalid("default: 'replicate' or 'skip' (a pipeline stage takes tensors whole)")
    if tie_word_embeddings is None:
        tie_word_embeddings = not any(_HEAD.search(name) for name in shapes)
    first, last = stage == 0, stage == num_stages - 1
    selection = {}
    for name, shape in shapes.items():
        if name in layers:
            layer = layers[name]
            here = _part_of(partition, layer) == stage if layer < num_layers else last
        elif _FIRST.search(name):
            here = first or (last and bool(tie_word_embeddings))
        elif _LAST.search(name):
            here = last
        elif _EVERY.search(name):
            here = True
        elif default is None:
            raise _invalid(f"tensor {name!r} is in no layer and is no embedding, final norm, LM head or rotary "
                           "buffer (say default='replicate' or 'skip')")
        else:
            here = default == replicate
        if here:
            selection[name] = _whole(shape)
    return selection


# --- hand-written selections --------------------------------------------------

def _index(name: str, index) -> Index:
    if isinstance(index, slice):
        index = (index,)
    if not isinstance(index, tuple):
        raise ArgumentTypeError(f"selection[{name!r}]: a tuple of slices, one per dimension, not "
                                f"{type(index).__name__} {index!r}"[:300])
    return index


def check(selection, tensors) -> Selection:
    """``selection`` validated against ``tensors``' shapes, and returned as
    a plain dict in its order, each index normalized: ``slice(None)`` for a
    whole dimension, ``slice(start, stop)`` with ints otherwise. Every name
    must be one of ``tensors``; every index a tuple (a bare slice for a 1-D
    tensor) of one ``slice`` per dimension, each with step 1 (or None),
    bounds None or ints ``0 <= start < stop <= extent``: no negative bound,
    nothing past the end, no empty range (leave the tensor out instead).

    Raises Error (``invalid_argument``; also a TypeError for a wrong type)
    naming the tensor and dimension at fault: an unknown name, the wrong
    number of slices, a step other than 1, a bound out of range, an empty
    range."""
    if not isinstance(selection, Mapping):
        raise ArgumentTypeError(f"selection must be a mapping of name to a tuple of slices, not "
                                f"{type(selection).__name__}")
    shapes = _shapes(tensors)
    checked = {}
    for name, index in selection.items():
        if name not in shapes:
            raise _invalid(f"selection: no tensor {name!r} in tensors")
        shape, index = shapes[name], _index(name, index)
        if len(index) != len(shape):
            raise _invalid(f"tensor {name!r}: {len(index)} slices for its {len(shape)} dimensions (one per "
                           "dimension, slice(None) for a whole one)")
        dims = []
        for dim, (s, extent) in enumerate(zip(index, shape)):
            where = f"tensor {name!r}: dimension {dim} (extent {extent})"
            if not isinstance(s, slice):
                raise ArgumentTypeError(f"{where}: {s!r} is not a slice"[:300])
            if s.step not in (None, 1):
                raise _invalid(f"{where}: {s!r} has step {s.step!r} (only 1)")
            bounds = []
            for bound, absent in ((s.start, 0), (s.stop, extent)):
                if bound is None:
                    bounds.append(absent)
                    continue
                if isinstance(bound, bool):
                    raise ArgumentTypeError(f"{where}: {s!r} has a bool bound")
                try:
                    bound = operator.index(bound)
                except TypeError:
                    raise ArgumentTypeError(f"{where}: {s!r} has a bound that is not an int") from None
                if not 0 <= bound <= extent:
                    raise _invalid(f"{where}: {s!r} reaches outside [0, {extent}]")
                bounds.append(bound)
            start, stop = bounds
            if stop <= start:
                raise _invalid(f"{where}: {s!r} is empty (leave an unneeded tensor out of the selection)")
            dims.append(slice(None) if (start, stop) == (0, extent) else slice(start, stop))
        checked[name] = tuple(dims)
    return checked


def intersect(*selections) -> Selection:
    """What every one of ``selections`` selects: the names all of them hold
    (in the first's order), each dimension the overlap of their ranges; a
    tensor whose overlap is empty in some dimension is left out.
    ``intersect(pipeline_stage(t, 4, s), tensor_parallel(t, 8, r))`` is
    TP rank r's part of stage s. The selections are taken as valid (see
    ``check``): whole dimensions as ``slice(None)``, bounds 0 or more.

    Raises Error (``invalid_argument``; also a TypeError for a wrong type):
    no selection given, one that is not a mapping, indexes of one tensor
    with different numbers of dimensions, a step other than 1 (naming the
    tensor)."""
    if not selections:
        raise ArgumentTypeError("intersect: give one selection or more")
    for selection in selections:
        if not isinstance(selection, Mapping):
            raise ArgumentTypeError(f"intersect: a selection is a mapping of name to a tuple of slices, not "
                                    f"{type(selection).__name__}")
    result = {}
    for name in selections[0]:
        if not all(name in selection for selection in selections[1:]):
            continue
        indexes = [_index(name, selection[name]) for selection in selections]
        if len({len(index) for index in indexes}) != 1:
            raise _invalid(f"tensor {name!r}: its selections have {sorted({len(i) for i in indexes})} dimensions")
        dims = []
        for dim, slices in enumerate(zip(*indexes)):
            if any(not isinstance(s, slice) or s.step not in (None, 1) or not all(
                    b is None or isinstance(b, numbers.Integral) and not isinstance(b, bool) and b >= 0
                    for b in (s.start, s.stop)) for s in slices):
                raise _invalid(f"tensor {name!r}: dimension {dim}: {slices!r} are not all slices with step 1 "
                               "and bounds None or ints 0 or more")
            starts = [int(s.start) for s in slices if s.start is not None]
            stops = [int(s.stop) for s in slices if s.stop is not None]
            start, stop = max(starts, default=None), min(stops, default=None)
            if start is not None and stop is not None and stop <= start:
                dims = None
                break
            dims.append(slice(None) if start in (None, 0) and stop is None else slice(start or 0, stop))
        if dims is not None:
            result[name] = tuple(dims)
    return result
