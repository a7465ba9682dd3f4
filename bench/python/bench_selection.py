#!/usr/bin/env python3
"""Fetch by selection on loopback, in one run (a benchmark: it reports
numbers; the goal, bytes received per inference rank within 1.05x of its
slice, is issue 48's and docs/parts.md's).

Four trainer peers each publish an FSDP dim-0 shard (rows) of every tensor
of a Llama-shaped float16 model (--hidden, --layers, grouped-query
attention, a vocabulary of --vocab) as a part of v1. Then, one after the
other, a fresh peer fetches the whole version, and fresh peers fetch the
slice of each tensor-parallel rank that vLLM's rules give
(tensorhub.layouts.tensor_parallel) at TP 2, 4 and 8, and the second of two
pipeline stages (layouts.pipeline_stage), each timed from the
request to its verified end. For each: the bytes selected, the bytes
received over the network (FetchProgress.bytes_received), their ratio, and
the same split into the column-parallel tensors (rows of each part: a
contiguous run), the row-parallel ones (columns: a piece of every row) and
the replicated ones.

The trainers then publish v2, the same bytes, declaring the views of every
tensor-parallel rank at each TP size and of both pipeline stages
(publish(..., views=)), and the same fetches run again: each part's view of
a selection is then fetched, exactly its bytes. Each publish's time (the
parts hashed, and the views) is reported beside.

Usage: PYTHONPATH=build/python python3 bench/python/bench_selection.py build/src/tensorhub [--hidden 2048]
       [--layers 4] [--json]   (the binary makes the trainers' keys)
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time

import numpy as np

import tensorhub as th
from tensorhub import layouts

SWARM = bytes(range(32))


def llama_shapes(hidden, layers, vocab, heads=16, kv_heads=4):
    head_dim = hidden // heads
    intermediate = hidden * 11 // 4 // 64 * 64
    shapes = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "mlp.gate_proj.weight": (intermediate, hidden),
            p + "mlp.up_proj.weight": (intermediate, hidden),
            p + "mlp.down_proj.weight": (hidden, intermediate),
        })
    shapes["model.norm.weight"] = (hidden,)
    shapes["lm_head.weight"] = (vocab, hidden)
    return shapes, kv_heads


def part_of(full, rank, world):
    """FSDP's dim-0 shard of every tensor (rows [rank*n/world, ...)); a 1-D
    tensor too short to split stays whole on rank 0."""
    out = {}
    for name, array in full.items():
        rows = array.shape[0]
        if rows % world:
            if rank == 0:
                out[name] = array
            continue
        n = rows // world
        index = (slice(rank * n, (rank + 1) * n),) + tuple(slice(None) for _ in array.shape[1:])
        out[name] = th.Slice(np.ascontiguousarray(array[index]), array.shape, index)
    return out


def kind_of(index, shape):
    """column (a dim-0 range), row (a range of the last dim), or whole."""
    cut = [d for d, (s, extent) in enumerate(zip(index, shape)) if s.indices(extent)[:2] != (0, extent)]
    if not cut:
        return "whole"
    return "column-parallel" if cut == [0] else "row-parallel"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--trainers", type=int, default=4)
    ap.add_argument("--tp", type=int, nargs="*", default=[2, 4, 8])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    shapes, kv_heads = llama_shapes(args.hidden, args.layers, args.vocab)
    rng = np.random.default_rng(48)
    full = {name: rng.integers(0, 1 << 16, size=shape, dtype=np.uint16).view(np.float16) for name, shape in shapes.items()}
    total = sum(a.nbytes for a in full.values())
    results = {"model_bytes": total, "trainers": args.trainers, "hidden": args.hidden, "layers": args.layers,
               "runs": []}
    with tempfile.TemporaryDirectory() as folder:
        keys, trusted = [], []
        for r in range(args.trainers):
            keys.append(f"{folder}/rank{r}.key")
            trusted.append(subprocess.run([args.binary, "keygen", "--out", keys[-1]], capture_output=True, text=True,
                                          check=True).stdout.split()[0])
        trainers = []
        for r in range(args.trainers):
            seeds = [trainers[0].gossip_address] if trainers else []
            trainers.append(th.Peer.start(host=f"trainer{r}", key_file=keys[r], swarm_key=SWARM, seeds=seeds,
                                          trusted_publishers=trusted, retain_head_replicas=0))
        stages = [layouts.pipeline_stage(shapes, 2, s, tie_word_embeddings=False) for s in range(2)]
        declared = [layouts.tensor_parallel(shapes, tp, rank, num_key_value_heads=kv_heads)
                    for tp in args.tp for rank in range(tp)] + stages
        parts = [part_of(full, r, args.trainers) for r in range(args.trainers)]

        def publish(version, views):
            began = time.monotonic()
            handles = [trainers[r].publish("policy", parts[r], version=version, part=(r, args.trainers),
                                           views=views) for r in range(args.trainers)]
            seconds = time.monotonic() - began
            for h in handles:
                h.wait_sealed(60)
            return handles, seconds

        seed = [trainers[0].gossip_address]

        def run(label, select, version):
            with th.Peer.start(host=label, swarm_key=SWARM, seeds=seed, trusted_publishers=trusted,
                               retain_head_replicas=0) as peer:
                peer.wait_for_head("policy", version - 1, 60)
                began = time.monotonic()
                with peer.fetch("policy", version, select=select) as fetched:
                    fetched.wait(120)
                    seconds = time.monotonic() - began
                    state = fetched.state_dict()
                    for name, array in state.items():
                        index = select[name] if select is not None else tuple(slice(None) for _ in shapes[name])
                        assert np.array_equal(array.view(np.uint16), full[name][index].view(np.uint16)), name
                    received = fetched.progress().bytes_received
            by_kind = {}
            for name, array in state.items():
                index = select[name] if select is not None else tuple(slice(None) for _ in shapes[name])
                by_kind[kind_of(index, shapes[name])] = by_kind.get(kind_of(index, shapes[name]), 0) + array.nbytes
            selected = sum(by_kind.values())
            return {"fetch": label, "views": version == 2, "selected_bytes": selected, "received_bytes": received,
                    "received_x": round(received / selected, 3), "seconds": round(seconds, 3),
                    "selected_by_kind": by_kind}

        for version, views in ((1, None), (2, declared)):
            published, seconds = publish(version, views)
            results[f"publish_v{version}_seconds"] = round(seconds, 3)
            if version == 1:
                results["runs"].append(run("whole", None, version))
            for tp in args.tp:
                select = layouts.tensor_parallel(shapes, tp, 1, num_key_value_heads=kv_heads)
                results["runs"].append(run(f"tp{tp}-rank1", select, version))
            # A pipeline stage: whole tensors, each a run of rows of every part.
            results["runs"].append(run("pp2-stage1", stages[1], version))
            for p in published:
                p.release()
        results["views_declared"] = len(declared)
        for t in reversed(trainers):
            t.close()
    if args.json:
        print(json.dumps(results))
        return
    print(f"model: {total / 2**20:.1f} MiB, {args.layers} layers of hidden {args.hidden}, "
          f"{args.trainers} trainer parts (FSDP rows); publish {results['publish_v1_seconds']:.2f} s, with "
          f"{results['views_declared']} declared views {results['publish_v2_seconds']:.2f} s")
    for r in results["runs"]:
        kinds = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sorted(r["selected_by_kind"].items()))
        print(f"{r['fetch']}{' (views)' if r['views'] else ''}: selected {r['selected_bytes'] / 2**20:.1f} MiB ({kinds}), received "
              f"{r['received_bytes'] / 2**20:.1f} MiB: {r['received_x']:.2f}x, {r['seconds']:.2f} s")


if __name__ == "__main__":
    sys.exit(main())
