"""tensorhub.layouts: the standard selections (tensor, expert and pipeline
parallel) over shape tables of small Llama-, Qwen2-MoE/Mixtral-, DeepSeek-V3-
and GLM-4-like checkpoints (names as the Hugging Face checkpoints have them,
sizes shrunk). Coverage is checked element by element: each rank's slice of
a zero array gets += 1, and a split tensor must come out all ones."""
import inspect
import types

import numpy as np
import pytest

import tensorhub as th
from tensorhub import layouts

HIDDEN, VOCAB = 64, 1000


def llama(layers=2, heads=8, kv_heads=2, head_dim=8, intermediate=128, bias=False, tied=False, rotary=False):
    """Llama / Mistral / Qwen2 (bias=True) / Qwen3-like names and shapes."""
    t = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (HIDDEN,)
        t[p + "self_attn.q_proj.weight"] = (heads * head_dim, HIDDEN)
        t[p + "self_attn.k_proj.weight"] = (kv_heads * head_dim, HIDDEN)
        t[p + "self_attn.v_proj.weight"] = (kv_heads * head_dim, HIDDEN)
        if bias:
            t[p + "self_attn.q_proj.bias"] = (heads * head_dim,)
            t[p + "self_attn.k_proj.bias"] = (kv_heads * head_dim,)
            t[p + "self_attn.v_proj.bias"] = (kv_heads * head_dim,)
        t[p + "self_attn.o_proj.weight"] = (HIDDEN, heads * head_dim)
        if rotary:
            t[p + "self_attn.rotary_emb.inv_freq"] = (head_dim // 2,)
        t[p + "post_attention_layernorm.weight"] = (HIDDEN,)
        t[p + "mlp.gate_proj.weight"] = (intermediate, HIDDEN)
        t[p + "mlp.up_proj.weight"] = (intermediate, HIDDEN)
        t[p + "mlp.down_proj.weight"] = (HIDDEN, intermediate)
    t["model.norm.weight"] = (HIDDEN,)
    if not tied:
        t["lm_head.weight"] = (VOCAB, HIDDEN)
    return t


def moe_layers(t, layers, block, experts, intermediate, up, down):
    """Adds each layer's router and experts under `block` to `t`: `up`
    names the experts' [intermediate, hidden] weights, `down` the
    [hidden, intermediate] one. Returns each layer's prefix."""
    prefixes = []
    for i in range(layers):
        p = f"model.layers.{i}.{block}."
        t[p + "gate.weight"] = (experts, HIDDEN)
        for e in range(experts):
            for name in up:
                t[p + f"experts.{e}.{name}.weight"] = (intermediate, HIDDEN)
            t[p + f"experts.{e}.{down}.weight"] = (HIDDEN, intermediate)
        prefixes.append(p)
    return prefixes


def mixtral(layers=2, experts=4, intermediate=32):
    t = {n: s for n, s in llama(layers).items() if ".mlp." not in n}
    moe_layers(t, layers, "block_sparse_moe", experts, intermediate, ("w1", "w3"), "w2")
    return t


def qwen2_moe(layers=2, experts=4, intermediate=32, shared=64):
    t = {n: s for n, s in llama(layers, bias=True).items() if ".mlp." not in n}
    for p in moe_layers(t, layers, "mlp", experts, intermediate, ("gate_proj", "up_proj"), "down_proj"):
        t[p + "shared_expert.gate_proj.weight"] = (shared, HIDDEN)
        t[p + "shared_expert.up_proj.weight"] = (shared, HIDDEN)
        t[p + "shared_expert.down_proj.weight"] = (HIDDEN, shared)
        t[p + "shared_expert_gate.weight"] = (1, HIDDEN)
    return t


# DeepSeek-V3-like: MLA with q_lora, one dense layer then MoE layers, FP8
# block scales on some projections (`weight_scale_inv`, one per 8x8 block
# here; 128x128 in the real checkpoint), and the MTP layer (numbered
# num_hidden_layers) at the end.
DS = dict(heads=4, q_lora=32, kv_lora=16, nope=8, rope=4, v_head=8, experts=8, moe_inter=32, inter=128, layers=3)


def _deepseek_layer(i, moe):
    p = f"model.layers.{i}."
    h, qk = DS["heads"], DS["nope"] + DS["rope"]
    t = {
        p + "input_layernorm.weight": (HIDDEN,),
        p + "self_attn.q_a_proj.weight": (DS["q_lora"], HIDDEN),
        p + "self_attn.q_a_layernorm.weight": (DS["q_lora"],),
        p + "self_attn.q_b_proj.weight": (h * qk, DS["q_lora"]),
        p + "self_attn.kv_a_proj_with_mqa.weight": (DS["kv_lora"] + DS["rope"], HIDDEN),
        p + "self_attn.kv_a_layernorm.weight": (DS["kv_lora"],),
        p + "self_attn.kv_b_proj.weight": (h * (DS["nope"] + DS["v_head"]), DS["kv_lora"]),
        p + "self_attn.kv_b_proj.weight_scale_inv": (8, 2),
        p + "self_attn.o_proj.weight": (HIDDEN, h * DS["v_head"]),
        p + "self_attn.o_proj.weight_scale_inv": (8, 4),
        p + "post_attention_layernorm.weight": (HIDDEN,),
    }
    if not moe:
        t[p + "mlp.gate_proj.weight"] = (DS["inter"], HIDDEN)
        t[p + "mlp.up_proj.weight"] = (DS["inter"], HIDDEN)
        t[p + "mlp.down_proj.weight"] = (HIDDEN, DS["inter"])
        return t
    t[p + "mlp.gate.weight"] = (DS["experts"], HIDDEN)
    t[p + "mlp.gate.e_score_correction_bias"] = (DS["experts"],)
    for e in range(DS["experts"]):
        t[p + f"mlp.experts.{e}.gate_proj.weight"] = (DS["moe_inter"], HIDDEN)
        t[p + f"mlp.experts.{e}.gate_proj.weight_scale_inv"] = (4, 8)
        t[p + f"mlp.experts.{e}.up_proj.weight"] = (DS["moe_inter"], HIDDEN)
        t[p + f"mlp.experts.{e}.down_proj.weight"] = (HIDDEN, DS["moe_inter"])
    t[p + "mlp.shared_experts.gate_proj.weight"] = (DS["moe_inter"], HIDDEN)
    t[p + "mlp.shared_experts.up_proj.weight"] = (DS["moe_inter"], HIDDEN)
    t[p + "mlp.shared_experts.down_proj.weight"] = (HIDDEN, DS["moe_inter"])
    return t


def deepseek_v3(mtp=True):
    t = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for i in range(DS["layers"]):
        t.update(_deepseek_layer(i, moe=i >= 1))
    t["model.norm.weight"] = (HIDDEN,)
    t["lm_head.weight"] = (VOCAB, HIDDEN)
    if mtp:
        n = DS["layers"]
        p = f"model.layers.{n}."
        t[p + "embed_tokens.weight"] = (VOCAB, HIDDEN)
        t[p + "enorm.weight"] = (HIDDEN,)
        t[p + "hnorm.weight"] = (HIDDEN,)
        t[p + "eh_proj.weight"] = (HIDDEN, 2 * HIDDEN)
        t.update(_deepseek_layer(n, moe=True))
        t[p + "shared_head.norm.weight"] = (HIDDEN,)
        t[p + "shared_head.head.weight"] = (VOCAB, HIDDEN)
    return t


def chatglm4(layers=2, heads=4, kv_heads=2, head_dim=16, ffn=96, vocab=VOCAB):
    """GLM-4 as THUDM/glm-4-9b stores it (ChatGLM names, fused tensors)."""
    t = {"transformer.embedding.word_embeddings.weight": (vocab, HIDDEN),
         "transformer.rotary_pos_emb.inv_freq": (head_dim // 4,)}
    qkv = (heads + 2 * kv_heads) * head_dim
    for i in range(layers):
        p = f"transformer.encoder.layers.{i}."
        t[p + "input_layernorm.weight"] = (HIDDEN,)
        t[p + "self_attention.query_key_value.weight"] = (qkv, HIDDEN)
        t[p + "self_attention.query_key_value.bias"] = (qkv,)
        t[p + "self_attention.dense.weight"] = (HIDDEN, heads * head_dim)
        t[p + "post_attention_layernorm.weight"] = (HIDDEN,)
        t[p + "mlp.dense_h_to_4h.weight"] = (2 * ffn, HIDDEN)
        t[p + "mlp.dense_4h_to_h.weight"] = (HIDDEN, ffn)
    t["transformer.encoder.final_layernorm.weight"] = (HIDDEN,)
    t["transformer.output_layer.weight"] = (vocab, HIDDEN)
    return t


def glm4_hf(layers=2):
    """GLM-4-0414 as transformers' Glm4ForCausalLM names it: q/k/v apart,
    gate_up_proj fused, sandwich norms."""
    t = {n: s for n, s in llama(layers, heads=4, kv_heads=2, head_dim=16, bias=True).items()
         if not n.endswith(("gate_proj.weight", "up_proj.weight"))}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "mlp.gate_up_proj.weight"] = (2 * 128, HIDDEN)
        t[p + "post_self_attn_layernorm.weight"] = (HIDDEN,)
        t[p + "post_mlp_layernorm.weight"] = (HIDDEN,)
    return t


def counts(shapes, selections):
    """Per tensor, how many of `selections` hold each element."""
    held = {name: np.zeros(shape, dtype=np.int32) for name, shape in shapes.items()}
    for selection in selections:
        for name, index in selection.items():
            held[name][index] += 1
    return held


def size(shape, index):
    return int(np.prod([len(range(*s.indices(n))) for s, n in zip(index, shape)]))


def assert_tensor_parallel_covers(shapes, tp, **kwargs):
    """Every split tensor is covered exactly once by the tp ranks; every
    whole one is whole on every rank."""
    rules = layouts.tensor_parallel_rules(**kwargs)
    selections = [layouts.tensor_parallel(shapes, tp, r, **kwargs) for r in range(tp)]
    for selection in selections:
        assert list(selection) == [n for n in shapes if n in selection]  # the input's order
        assert layouts.check(selection, shapes) == selection  # valid, and already normal
    held = counts(shapes, selections)
    for name, shape in shapes.items():
        placement = rules.placement(name)
        if placement == layouts.replicate:
            assert held[name].min() == held[name].max() == tp, name
            assert all(s[name] == (slice(None),) * len(shape) for s in selections), name
        else:
            assert placement.kind == "split", (name, placement)
            assert (held[name] == 1).all(), (name, held[name])
            assert sum(size(shape, s[name]) for s in selections if name in s) == int(np.prod(shape)), name
    return selections


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("model", ["llama", "qwen2", "qwen2_tied_rotary", "mixtral", "qwen2_moe", "deepseek_v3",
                                   "chatglm4", "glm4_hf"])
def test_every_split_tensor_is_covered_once_and_replicated_ones_are_whole_everywhere(model, tp):
    shapes = {"llama": llama(), "qwen2": llama(bias=True), "qwen2_tied_rotary": llama(tied=True, rotary=True),
              "mixtral": mixtral(), "qwen2_moe": qwen2_moe(), "deepseek_v3": deepseek_v3(),
              "chatglm4": chatglm4(), "glm4_hf": glm4_hf()}[model]
    assert_tensor_parallel_covers(shapes, tp, num_key_value_heads=2)


@pytest.mark.parametrize("tp", [4, 8])
def test_wider_tensor_parallelism_covers_too(tp):
    assert_tensor_parallel_covers(llama(kv_heads=8), tp, num_key_value_heads=8)
    assert_tensor_parallel_covers(deepseek_v3(), 4 if tp == 8 else tp)  # 4 heads: tp 8 does not divide them
    assert_tensor_parallel_covers(mixtral(), tp, num_key_value_heads=2 if tp <= 2 else None)


def test_column_row_and_vocabulary_rules_give_the_expected_slices():
    shapes = llama(bias=True)
    r1 = layouts.tensor_parallel(shapes, 2, 1, num_key_value_heads=2)
    whole1 = (slice(None),)
    p = "model.layers.0."
    assert r1[p + "self_attn.q_proj.weight"] == (slice(32, 64), slice(None))
    assert r1[p + "self_attn.q_proj.bias"] == (slice(32, 64),)
    assert r1[p + "self_attn.k_proj.weight"] == (slice(8, 16), slice(None))  # KV head 1
    assert r1[p + "self_attn.v_proj.bias"] == (slice(8, 16),)
    assert r1[p + "self_attn.o_proj.weight"] == (slice(None), slice(32, 64))
    assert r1[p + "mlp.gate_proj.weight"] == (slice(64, 128), slice(None))
    assert r1[p + "mlp.up_proj.weight"] == (slice(64, 128), slice(None))
    assert r1[p + "mlp.down_proj.weight"] == (slice(None), slice(64, 128))
    assert r1[p + "input_layernorm.weight"] == whole1
    assert r1["model.norm.weight"] == whole1
    # vLLM pads the vocabulary to 64: 1000 -> 1024, 512 rows a rank.
    assert r1["model.embed_tokens.weight"] == (slice(512, 1000), slice(None))
    assert r1["lm_head.weight"] == (slice(512, 1000), slice(None))
    # A row-parallel bias is whole; one rank is the whole model.
    r = layouts.tensor_parallel({"x.o_proj.weight": (4, 8), "x.o_proj.bias": (4,)}, 2, 0)
    assert r == {"x.o_proj.weight": (slice(None), slice(0, 4)), "x.o_proj.bias": whole1}
    assert all(all(s == slice(None) for s in i) for i in layouts.tensor_parallel(shapes, 1, 0).values())


def test_replicated_tensors_of_moe_and_mla_models():
    for shapes in (mixtral(), qwen2_moe(), deepseek_v3()):
        rules = layouts.tensor_parallel_rules()
        for name in shapes:
            routed = ".gate." in name or "shared_expert_gate" in name
            mla = "q_a_proj" in name or "kv_a_proj_with_mqa" in name or "eh_proj" in name
            norm = "norm" in name.rsplit(".", 2)[-2]
            if routed or mla or norm:
                assert rules.placement(name) == layouts.replicate, name
    s = layouts.tensor_parallel(deepseek_v3(), 4, 3)
    p = "model.layers.1."
    assert s[p + "mlp.gate.e_score_correction_bias"] == (slice(None),)
    assert s[p + "self_attn.kv_b_proj.weight"] == (slice(48, 64), slice(None))
    assert s[p + "self_attn.kv_b_proj.weight_scale_inv"] == (slice(6, 8), slice(None))  # with its weight
    assert s[p + "self_attn.o_proj.weight_scale_inv"] == (slice(None), slice(3, 4))
    assert s[p + "mlp.experts.5.gate_proj.weight"] == (slice(24, 32), slice(None))  # TP splits every expert
    assert s[p + "mlp.experts.5.down_proj.weight"] == (slice(None), slice(24, 32))
    assert s[p + "mlp.shared_experts.up_proj.weight"] == (slice(24, 32), slice(None))
    assert s["model.layers.3.shared_head.head.weight"] == (slice(768, 1000), slice(None))


def test_fused_glm_tensors_are_whole_and_its_row_parallel_ones_split():
    s = layouts.tensor_parallel(chatglm4(), 2, 1)
    p = "transformer.encoder.layers.0."
    assert s[p + "self_attention.query_key_value.weight"] == (slice(None), slice(None))
    assert s[p + "self_attention.query_key_value.bias"] == (slice(None),)
    assert s[p + "mlp.dense_h_to_4h.weight"] == (slice(None), slice(None))
    assert s[p + "self_attention.dense.weight"] == (slice(None), slice(32, 64))
    assert s[p + "mlp.dense_4h_to_h.weight"] == (slice(None), slice(48, 96))
    assert s["transformer.output_layer.weight"] == (slice(512, 1000), slice(None))
    assert s["transformer.embedding.word_embeddings.weight"] == (slice(512, 1000), slice(None))
    assert s["transformer.rotary_pos_emb.inv_freq"] == (slice(None),)
    assert layouts.tensor_parallel(glm4_hf(), 2, 0)["model.layers.1.mlp.gate_up_proj.weight"] == (slice(None),) * 2


@pytest.mark.parametrize("tp", [4, 8])
def test_gqa_with_fewer_kv_heads_than_ranks_replicates_them(tp):
    shapes = llama(kv_heads=2, head_dim=8, bias=True)
    k, kb = "model.layers.1.self_attn.k_proj.weight", "model.layers.1.self_attn.k_proj.bias"
    held = np.zeros(16, dtype=np.int32)
    for r in range(tp):
        head = r * 2 // tp
        for kwargs in (dict(num_key_value_heads=2), dict(config={"num_key_value_heads": 2, "num_attention_heads": 8})):
            s = layouts.tensor_parallel(shapes, tp, r, **kwargs)
            assert s[k] == (slice(8 * head, 8 * head + 8), slice(None)), (r, s[k])
            assert s[kb] == (slice(8 * head, 8 * head + 8),)
            assert s[k.replace("k_proj", "v_proj")] == s[k]
            assert s[k.replace("k_proj", "q_proj")] == (slice(64 // tp * r, 64 // tp * (r + 1)), slice(None))
        held[s[kb]] += 1
    assert (held == tp // 2).all()  # each head on tp/2 ranks
    # Without the head count, k/v split evenly like q (the documented trap).
    assert layouts.tensor_parallel(shapes, 4, 1)[k] == (slice(4, 8), slice(None))
    # A config without num_key_value_heads means one KV head per head.
    assert layouts.tensor_parallel(shapes, 4, 1, config={"num_attention_heads": 8})[k] == (slice(4, 8), slice(None))


def test_kv_heads_that_neither_split_nor_replicate_evenly_are_refused():
    with pytest.raises(th.Error) as e:
        layouts.tensor_parallel({"a.k_proj.weight": (16, 8)}, 3, 0, num_key_value_heads=2)
    assert e.value.code == "invalid_argument" and "'a.k_proj.weight'" in str(e.value) and "2 heads" in str(e.value)
    with pytest.raises(th.Error) as e:
        layouts.tensor_parallel({"a.v_proj.weight": (24, 8)}, 2, 0, num_key_value_heads=3)
    assert "'a.v_proj.weight'" in str(e.value) and "3 heads" in str(e.value)
    with pytest.raises(th.Error):  # the extent is not 5 heads
        layouts.tensor_parallel({"a.v_proj.weight": (24, 8)}, 1, 0, num_key_value_heads=5)


def test_the_vocabulary_splits_raggedly_and_a_rank_past_it_gets_nothing():
    def ranges(vocab, tp, **kwargs):
        shapes = {"lm_head.weight": (vocab, 4), "model.embed_tokens.weight": (vocab, 4)}
        out = []
        for r in range(tp):
            s = layouts.tensor_parallel(shapes, tp, r, **kwargs)
            assert s.get("lm_head.weight") == s.get("model.embed_tokens.weight")
            out.append(None if "lm_head.weight" not in s else s["lm_head.weight"][0])
        held = counts(shapes, [{"lm_head.weight": (i, slice(None))} for i in out if i is not None])
        assert (held["lm_head.weight"] == 1).all()
        return [None if i is None else (i.start or 0, i.stop if i.stop is not None else vocab) for i in out]

    assert ranges(1000, 4) == [(0, 256), (256, 512), (512, 768), (768, 1000)]
    assert ranges(1001, 2) == [(0, 512), (512, 1001)]  # vLLM: 1001 -> 1024, not ceil(1001 / 2)
    assert ranges(1000, 3, vocab_padding=1) == [(0, 334), (334, 668), (668, 1000)]  # ceil(E / tp)
    assert ranges(100, 8) == [(0, 16), (16, 32), (32, 48), (48, 64), (64, 80), (80, 96), (96, 100), None]
    assert ranges(1000, 1) == [(0, 1000)]


def test_unmatched_names_raise_naming_the_first_unless_a_default_is_given():
    shapes = dict(llama(1))
    shapes["model.layers.0.self_attn.o_proj.weight_scale"] = ()  # a per-tensor FP8 scale: no rule
    shapes["model.layers.0.mystery.weight"] = (3, 3)
    with pytest.raises(th.Error) as e:
        layouts.tensor_parallel(shapes, 2, 0, num_key_value_heads=2)
    assert e.value.code == "invalid_argument"
    assert "'model.layers.0.self_attn.o_proj.weight_scale'" in str(e.value) and "\n" not in str(e.value)
    s = layouts.tensor_parallel(shapes, 2, 0, num_key_value_heads=2, default="replicate")
    assert s["model.layers.0.mystery.weight"] == (slice(None), slice(None))
    assert s["model.layers.0.self_attn.o_proj.weight_scale"] == ()
    s = layouts.tensor_parallel(shapes, 2, 0, num_key_value_heads=2, default=layouts.skip)
    assert "model.layers.0.mystery.weight" not in s and "model.layers.0.self_attn.o_proj.weight_scale" not in s
    assert "model.layers.0.input_layernorm.weight" in s


def test_a_split_that_does_not_divide_raises_naming_tensor_dimension_extent_and_tp_size():
    with pytest.raises(th.Error) as e:
        layouts.tensor_parallel(llama(), 3, 0)
    message = str(e.value)
    assert e.value.code == "invalid_argument"
    assert "'model.layers.0.self_attn.q_proj.weight'" in message and "dimension 0" in message
    assert "extent 64" in message and "tp_size 3" in message
    with pytest.raises(th.Error) as e:
        layouts.tensor_parallel({"x.down_proj.weight": (8, 6)}, 4, 1)
    assert "'x.down_proj.weight'" in str(e.value) and "dimension 1" in str(e.value) and "extent 6" in str(e.value)
    with pytest.raises(th.Error) as e:  # block scales split with their weight only where the blocks allow
        layouts.tensor_parallel({"x.gate_proj.weight": (32, 64), "x.gate_proj.weight_scale_inv": (2, 4)}, 4, 0)
    assert "'x.gate_proj.weight_scale_inv'" in str(e.value) and "extent 2" in str(e.value)
    with pytest.raises(th.Error) as e:  # a 1-D tensor has no dimension 1, even on one rank
        layouts.Rules([("x", layouts.split(1))]).select({"x": (4,)}, 1, 0)
    assert "'x'" in str(e.value) and "dimension 1" in str(e.value)


def test_expert_parallel_gives_each_expert_whole_to_its_owner():
    shapes = mixtral(experts=4)
    selections = [layouts.expert_parallel(shapes, 2, r) for r in range(2)]
    for r, s in enumerate(selections):
        for name, index in s.items():
            assert index == (slice(None),) * len(shapes[name])
        owned = {int(n.split(".experts.")[1].split(".")[0]) for n in s if ".experts." in n}
        assert owned == ({0, 1} if r == 0 else {2, 3})
        # Non-expert tensors: whole on every rank (tp_size 1), routers included.
        assert "model.layers.1.block_sparse_moe.gate.weight" in s and "model.layers.0.self_attn.q_proj.weight" in s
    held = counts(shapes, selections)
    for name in shapes:
        assert (held[name] == (1 if ".experts." in name else 2)).all(), name
    # vLLM's linear placement: 4 experts over 3 ranks is [2, 1, 1].
    owned = [{n.split(".experts.")[1].split(".")[0] for n in layouts.expert_parallel(shapes, 3, r) if ".experts." in n}
             for r in range(3)]
    assert owned == [{"0", "1"}, {"2"}, {"3"}]


def test_expert_parallel_by_an_explicit_map():
    shapes = qwen2_moe(experts=4)
    for expert_map in ([0, 1, 0, 1], {0: 0, 1: 1, 2: 0, 3: 1}):
        for r in range(2):
            s = layouts.expert_parallel(shapes, 2, r, expert_map=expert_map)
            owned = {int(n.split(".experts.")[1].split(".")[0]) for n in s if ".experts." in n}
            assert owned == ({0, 2} if r == 0 else {1, 3})
            assert s["model.layers.0.mlp.shared_expert.gate_proj.weight"] == (slice(None), slice(None))
    with pytest.raises(th.Error) as e:
        layouts.expert_parallel(shapes, 2, 0, expert_map={0: 0, 1: 1, 2: 0})
    assert "'model.layers.0.mlp.experts.3.gate_proj.weight'" in str(e.value) and "expert 3" in str(e.value)
    with pytest.raises(th.Error) as e:
        layouts.expert_parallel(shapes, 2, 0, expert_map=[0, 1, 2, 1])
    assert "expert_map[2]" in str(e.value)
    with pytest.raises(th.Error) as e:
        layouts.expert_parallel(shapes, 2, 0, num_experts=3)
    assert "'model.layers.0.mlp.experts.3.gate_proj.weight'" in str(e.value)


def test_expert_parallel_with_tensor_parallel_attention_and_shared_experts():
    shapes = deepseek_v3()
    config = {"n_routed_experts": 8, "num_key_value_heads": 4}
    tp = 2
    selections = [layouts.expert_parallel(shapes, 4, ep, tp_size=tp, tp_rank=ep % tp, config=config)
                  for ep in range(4)]
    for ep, s in enumerate(selections):
        experts = {int(n.split(".experts.")[1].split(".")[0]) for n in s if ".experts." in n}
        assert experts == {2 * ep, 2 * ep + 1}
        p = "model.layers.2."
        half = (slice(None), slice(0, 16) if ep % tp == 0 else slice(16, 32))
        assert s[p + "mlp.shared_experts.down_proj.weight"] == half
        assert s[p + "self_attn.o_proj.weight"] == half
        assert s[p + "mlp.gate.weight"] == (slice(None), slice(None))
        assert s[p + f"mlp.experts.{2 * ep}.gate_proj.weight_scale_inv"] == (slice(None), slice(None))
    # The TP ranks of one EP group cover each non-expert tensor once (split) or whole.
    held = counts(shapes, selections[:2])
    rules = layouts.tensor_parallel_rules()
    for name in shapes:
        if ".experts." not in name:
            want = 1 if rules.placement(name).kind == "split" else 2
            assert (held[name] == want).all(), name


def test_pipeline_stages_partition_the_layers_as_vllm_does():
    shapes = llama(layers=5)
    for stages, partition in ((1, [5]), (2, [3, 2]), (3, [2, 2, 1]), (4, [1, 1, 2, 1]), (5, [1] * 5)):
        selections = [layouts.pipeline_stage(shapes, stages, s) for s in range(stages)]
        held = counts(shapes, selections)
        assert all((held[n] == 1).all() for n in shapes)  # every tensor on exactly one stage
        for s, selection in enumerate(selections):
            layers = sorted({int(n.split(".")[2]) for n in selection if n.startswith("model.layers.")})
            assert layers == list(range(sum(partition[:s]), sum(partition[:s + 1]))), (stages, s, layers)
            assert ("model.embed_tokens.weight" in selection) == (s == 0)
            assert ("model.norm.weight" in selection) == ("lm_head.weight" in selection) == (s == stages - 1)
            assert all(i == (slice(None),) * len(shapes[n]) for n, i in selection.items())
    explicit = [layouts.pipeline_stage(shapes, 3, s, partition=[1, 3, 1]) for s in range(3)]
    assert sorted({n.split(".")[2] for n in explicit[1] if n.startswith("model.layers.")}) == ["1", "2", "3"]
    with pytest.raises(th.Error) as e:
        layouts.pipeline_stage(shapes, 3, 0, partition=[1, 1, 1])
    assert "sum to 3" in str(e.value)


def test_pipeline_stages_with_tied_embeddings_mtp_layers_and_other_tensors():
    tied = llama(layers=4, tied=True, rotary=True)
    first, last = layouts.pipeline_stage(tied, 2, 0), layouts.pipeline_stage(tied, 2, 1)
    assert "model.embed_tokens.weight" in first and "model.embed_tokens.weight" in last  # vLLM's tied LM head
    assert "model.embed_tokens.weight" not in layouts.pipeline_stage(tied, 2, 1, tie_word_embeddings=False)
    ds = deepseek_v3()
    stages = [layouts.pipeline_stage(ds, 2, s, num_layers=DS["layers"]) for s in range(2)]
    assert "model.layers.3.eh_proj.weight" in stages[1] and "model.layers.3.shared_head.head.weight" in stages[1]
    # 3 layers over 2 stages: [2, 1], the remainder before the last stage.
    assert "model.layers.1.mlp.gate.weight" in stages[0] and "model.layers.1.mlp.gate.weight" not in stages[1]
    assert "model.layers.2.mlp.gate.weight" in stages[1] and "model.layers.2.mlp.gate.weight" not in stages[0]
    glm = chatglm4(layers=2)
    g0, g1 = (layouts.pipeline_stage(glm, 2, s) for s in range(2))
    assert "transformer.embedding.word_embeddings.weight" in g0 and "transformer.output_layer.weight" in g1
    assert "transformer.encoder.final_layernorm.weight" in g1 and "transformer.rotary_pos_emb.inv_freq" in g0
    assert "transformer.rotary_pos_emb.inv_freq" in g1
    odd = dict(tied, **{"model.vision_tower.proj.weight": (4, 4)})
    with pytest.raises(th.Error) as e:
        layouts.pipeline_stage(odd, 2, 0)
    assert "'model.vision_tower.proj.weight'" in str(e.value)
    assert "model.vision_tower.proj.weight" in layouts.pipeline_stage(odd, 2, 1, default="replicate")
    assert "model.vision_tower.proj.weight" not in layouts.pipeline_stage(odd, 2, 0, default="skip")


def test_a_pipeline_stage_intersected_with_tensor_parallel_ranks():
    shapes = llama(layers=4)
    stage = layouts.pipeline_stage(shapes, 2, 1)
    for r in range(2):
        both = layouts.intersect(stage, layouts.tensor_parallel(shapes, 2, r, num_key_value_heads=2))
        assert set(both) == set(stage)
        assert both["model.layers.3.self_attn.q_proj.weight"] == (slice(32 * r, 32 * r + 32), slice(None))
        assert both["lm_head.weight"] == (slice(512 * r, 1000 if r else 512), slice(None))
    a = {"w": (slice(0, 4), slice(None)), "v": (slice(None),)}
    b = {"w": (slice(2, 8), slice(1, 3)), "u": (slice(None),)}
    assert layouts.intersect(a, b) == {"w": (slice(2, 4), slice(1, 3))}
    assert layouts.intersect(a, {"w": (slice(4, 8), slice(None))}) == {}  # empty overlap: left out
    assert layouts.intersect(a) == a
    with pytest.raises(th.Error):
        layouts.intersect(a, {"w": (slice(None),)})
    with pytest.raises(th.Error):
        layouts.intersect(a, {"w": (slice(0, 4, 2), slice(None))})


def test_check_normalizes_a_good_selection_and_rejects_bad_slices_naming_the_tensor():
    shapes = {"w": (8, 4), "b": (8,)}
    assert layouts.check({"w": (slice(0, 8), slice(1, 3)), "b": slice(2, None)}, shapes) == \
        {"w": (slice(None), slice(1, 3)), "b": (slice(2, 8),)}
    assert layouts.check({"w": (slice(np.int64(2), np.int64(4)), slice(None))}, shapes) == \
        {"w": (slice(2, 4), slice(None))}
    bad = [
        ({"w": (slice(0, 9), slice(None))}, "outside"),
        ({"w": (slice(-2, None), slice(None))}, "outside"),
        ({"w": (slice(0, 8, 2), slice(None))}, "step 2"),
        ({"w": (slice(4, 4), slice(None))}, "empty"),
        ({"w": (slice(5, 3), slice(None))}, "empty"),
        ({"w": (slice(None),)}, "1 slices for its 2 dimensions"),
        ({"z": (slice(None),)}, "no tensor 'z'"),
    ]
    for selection, why in bad:
        with pytest.raises(th.Error) as e:
            layouts.check(selection, shapes)
        assert e.value.code == "invalid_argument" and why in str(e.value), (selection, str(e.value))
        name = next(iter(selection))
        assert f"'{name}'" in str(e.value)
    for selection in ({"w": (0, slice(None))}, {"w": [slice(None), slice(None)]}, {"w": (slice(0.5, 2), slice(None))}):
        with pytest.raises(TypeError) as e:
            layouts.check(selection, shapes)
        assert isinstance(e.value, th.Error) and "'w'" in str(e.value)


def test_rules_state_any_layout():
    rules = layouts.Rules([(r"\.attn\.", layouts.split(1)), (r"norm", layouts.replicate), (r"\.bias$", layouts.skip)],
                          default="replicate")
    shapes = {"h.0.attn.w": (4, 6), "h.0.ln_norm.weight": (6,), "h.0.mlp.bias": (6,), "h.0.mlp.weight": (6, 6)}
    assert rules.select(shapes, 2, 1) == {"h.0.attn.w": (slice(None), slice(3, 6)),
                                          "h.0.ln_norm.weight": (slice(None),),
                                          "h.0.mlp.weight": (slice(None), slice(None))}
    assert rules.placement("h.0.mlp.bias") is layouts.skip
    assert len(rules.rules) == 3 and rules.default == layouts.replicate
    extended = layouts.Rules([(r"^extra\.", layouts.skip)] + list(layouts.tensor_parallel_rules().rules))
    assert extended.select({"extra.x": (3,), "model.norm.weight": (4,)}, 2, 0) == {"model.norm.weight": (slice(None),)}
    assert repr(layouts.split(-1, ragged=True, pad_to=64)) == "tensorhub.layouts.split(-1, ragged=True, pad_to=64)"
    assert layouts.Rules([("w", layouts.split(-1))]).select({"w": (2, 4)}, 2, 1) == {"w": (slice(None), slice(2, 4))}
    with pytest.raises(th.Error) as e:
        layouts.Rules([("(", layouts.skip)])
    assert "'('" in str(e.value)
    for bad in ([("x",)], [(1, layouts.skip)], [("x", "halve")]):
        with pytest.raises(TypeError):
            layouts.Rules(bad)
    with pytest.raises(th.Error):
        layouts.split(0, heads=2, ragged=True)
    with pytest.raises(th.Error):
        layouts.split(0, pad_to=64)


def test_shapes_come_from_tuples_lists_arrays_or_anything_with_a_shape():
    shapes = {"model.norm.weight": (64,), "lm_head.weight": (VOCAB, HIDDEN)}
    want = layouts.tensor_parallel(shapes, 2, 1)
    assert layouts.tensor_parallel({n: list(s) for n, s in shapes.items()}, 2, 1) == want
    assert layouts.tensor_parallel({n: np.zeros(s, np.int8) for n, s in shapes.items()}, 2, 1) == want
    assert layouts.tensor_parallel({n: types.SimpleNamespace(shape=s) for n, s in shapes.items()}, 2, 1) == want
    assert layouts.tensor_parallel({n: tuple(np.int64(d) for d in s) for n, s in shapes.items()}, 2, 1) == want


def test_bad_arguments_raise_one_line_errors():
    shapes = llama(1)
    calls = [
        lambda: layouts.tensor_parallel(shapes, 0, 0),
        lambda: layouts.tensor_parallel(shapes, 2, 2),
        lambda: layouts.tensor_parallel(shapes, 2, -1),
        lambda: layouts.tensor_parallel({"lm_head.weight": (-1, 4)}, 2, 0),
        lambda: layouts.tensor_parallel(shapes, 2, 0, num_key_value_heads=0),
        lambda: layouts.tensor_parallel(shapes, 2, 0, vocab_padding=0),
        lambda: layouts.expert_parallel(shapes, 2, 5),
        lambda: layouts.pipeline_stage(shapes, 2, 2),
        lambda: layouts.pipeline_stage(shapes, 2, 0, partition=[1]),
        lambda: layouts.pipeline_stage(shapes, 2, 0, default=layouts.split(0)),
    ]
    for call in calls:
        with pytest.raises(th.Error) as e:
            call()
        assert e.value.code == "invalid_argument" and "\n" not in str(e.value), str(e.value)
    type_errors = [
        lambda: layouts.tensor_parallel([("lm_head.weight", (4, 4))], 2, 0),
        lambda: layouts.tensor_parallel({"lm_head.weight": "4x4"}, 2, 0),
        lambda: layouts.tensor_parallel(shapes, 2.0, 0),
        lambda: layouts.tensor_parallel(shapes, True, 0),
        lambda: layouts.tensor_parallel(shapes, 2, 0, config=[("num_key_value_heads", 2)]),
        lambda: layouts.expert_parallel(shapes, 2, 0, expert_map="01"),
        lambda: layouts.expert_parallel(shapes, 2, 0, rules=[("x", layouts.skip)]),
        lambda: layouts.check([("w", slice(None))], shapes),
        lambda: layouts.intersect(),
    ]
    for call in type_errors:
        with pytest.raises(TypeError) as e:
            call()
        assert isinstance(e.value, th.Error) and e.value.code == "invalid_argument", str(e.value)


def test_the_module_is_the_packages_and_every_public_function_says_what_it_raises():
    assert th.layouts is layouts
    silent = []
    for name in layouts.__all__:
        obj = getattr(layouts, name)
        members = [(name, obj)] if inspect.isfunction(obj) else []
        if inspect.isclass(obj):
            members += [(f"{name}.{m}", v) for m, v in vars(obj).items()
                        if not m.startswith("_") and inspect.isfunction(v)]
            members.append((name, obj))
        for where, member in members:
            if "raise" not in (member.__doc__ or "").lower():
                silent.append(where)
    assert not silent, f"these say nothing of what they raise: {silent}"
