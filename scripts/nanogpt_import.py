#!/usr/bin/env python3
"""A character-level nanoGPT checkpoint as a cgrad charlm checkpoint.

    /usr/bin/python3 scripts/nanogpt_import.py CKPT.pt META.pkl OUT.safetensors [--force]

CKPT.pt is what nanoGPT's train.py saves (out_dir/ckpt.pt: "model",
"model_args"), META.pkl its prepare.py's vocabulary (data/shakespeare_char/
meta.pkl: "itos"). OUT is a charlm checkpoint of the same weights:
`charlm sample --ckpt OUT`, `charlm eval`, `charlm train --init-from OUT`
read it (no optimizer state: nanoGPT's is not carried over). The
architecture is nanoGPT's as cgrad's flags say it, `--pos-enc learned
--emb-scale none --act gelu_erf --norm-first true --bias B --d-ff 4d`
(docs/zoo.md); c_attn is split into q_proj, k_proj and v_proj, the
head stays tied to tok_emb.weight, and the causal-mask buffers (attn.bias)
and torch.compile's "_orig_mod." prefix are dropped.

Needs PyTorch to read CKPT.pt (nanoGPT's own environment has it; on Debian
apt-get install python3-torch). GPT-2 BPE checkpoints (no META.pkl, 50,304
ids) are refused: cgrad's BPE is SentencePiece's, not tiktoken's. An
existing OUT is refused without --force. Exit 0, or 1 with one line on
stderr.
"""
import argparse
import json
import os
import pickle
import struct
import sys

# nanoGPT's names (after "transformer.") -> cgrad charlm's
RENAMES = [("wte.", "tok_emb."), ("wpe.", "pos_emb."), ("ln_1.", "ln1."), ("ln_2.", "ln2."),
           ("attn.c_proj.", "attn.o_proj."), ("mlp.c_fc.", "ff.fc1."),
           ("mlp.c_proj.", "ff.fc2.")]


class Refusal(Exception):
    """a refusal: its text is the one line printed"""


def cgrad_tensors(sd, n_embd):
    """nanoGPT's state dict (any prefix of "_orig_mod." and "transformer.")
    as cgrad charlm's tensors, c_attn split in three; lm_head (tied) and the
    mask buffers dropped."""
    out = {}
    for k, v in sd.items():
        k = k[len("_orig_mod."):] if k.startswith("_orig_mod.") else k
        k = k[len("transformer."):] if k.startswith("transformer.") else k
        if k == "lm_head.weight" or (k.endswith(".attn.bias") and v.dim() == 4):
            continue  # the tied head (wte's), the causal mask of torch < 2.0
        if k.startswith("h."):
            k = "blocks." + k[2:]
        for a, b in RENAMES:
            k = k.replace(a, b)
        if ".attn.c_attn." in k:
            if v.shape[0] != 3 * n_embd:
                raise Refusal(f"{k}: shape {list(v.shape)}, expected [{3 * n_embd}, ...]")
            for name, part in zip("qkv", v.split(n_embd, dim=0)):
                out[k.replace("c_attn", name + "_proj")] = part
        else:
            out[k] = v
    return out


def config_of(args, vocab):
    """charlm's config JSON (models/charlm: unlisted fields keep their
    defaults: layernorm of eps 1e-5, final norm, tied head)"""
    need = ["n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size"]
    miss = [k for k in need if k not in args]
    if miss:
        raise Refusal(f"model_args lacks {', '.join(miss)}: not a nanoGPT checkpoint")
    if args["vocab_size"] != vocab:
        raise Refusal(f"model_args.vocab_size is {args['vocab_size']} but META has {vocab} "
                           "characters (a GPT-2 BPE checkpoint? only character-level ones import)")
    d = int(args["n_embd"])
    return {"model": "charlm", "vocab": vocab, "d": d, "H": int(args["n_head"]),
            "layers": int(args["n_layer"]), "d_ff": 4 * d, "max_len": int(args["block_size"]),
            "norm": "layernorm", "act": "gelu_erf", "norm_first": True,
            "bias": bool(args["bias"]), "dropout": float(args.get("dropout", 0.0)),
            "attn_dropout": float(args.get("dropout", 0.0)),  # nanoGPT's one dropout
            "pos_enc": "learned", "emb_scale": "none"}


def expected_names(cfg):
    """the tensors of cgrad's charlm of this config"""
    ws = [".weight", ".bias"] if cfg["bias"] else [".weight"]
    block = [n + w for n in ("ln1", "attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj",
                             "ln2", "ff.fc1", "ff.fc2") for w in ws]
    names = ["tok_emb.weight", "pos_emb.weight"] + [n + w for n in ["ln_f"] for w in ws]
    return set(names + [f"blocks.{i}.{n}" for i in range(cfg["layers"]) for n in block])


def vocab_of(meta_path):
    """META.pkl's itos as cgrad's vocabulary: its characters in id order,
    which charlm wants strictly increasing (prepare.py's sorted set is)"""
    with open(meta_path, "rb") as f:
        meta = pickle.load(f)
    if not isinstance(meta, dict) or not isinstance(meta.get("itos"), dict):
        raise Refusal(f"{meta_path}: no 'itos' dictionary (nanoGPT's prepare.py writes one)")
    itos = meta["itos"]
    chars = [itos.get(i) for i in range(len(itos))]
    if any(not isinstance(c, str) or len(c) != 1 for c in chars):
        raise Refusal(f"{meta_path}: itos is not one character for each id 0..{len(itos) - 1}")
    if any(a >= b for a, b in zip(chars, chars[1:])):
        raise Refusal(f"{meta_path}: the characters are not in increasing order, as "
                           "prepare.py's sorted(set(data)) gives")
    return "".join(chars)


def save(path, tensors, metadata):
    """a safetensors file of float32 tensors, metadata strings"""
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        b = t.detach().to("cpu").float().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(tmp, path)  # never a half-written OUT


def run(ckpt_path, meta_path, out, force):
    if os.path.exists(out) and not force:
        raise Refusal(f"{out} exists; pass --force to overwrite it")
    for p in (ckpt_path, meta_path):
        if not os.path.isfile(p):
            raise Refusal(f"{p}: no such file")
    try:
        import torch
    except ImportError:
        raise Refusal("needs PyTorch to read a .pt file (apt-get install python3-torch)")
    vocab = vocab_of(meta_path)
    try:
        ck = torch.load(ckpt_path, map_location="cpu")
    except Exception as e:  # a pickle of something else, a truncated file
        raise Refusal(f"{ckpt_path}: not readable by torch.load ({type(e).__name__}: {e})")
    if not isinstance(ck, dict) or "model" not in ck or "model_args" not in ck:
        raise Refusal(f"{ckpt_path}: no 'model' and 'model_args' (nanoGPT's train.py saves both)")
    cfg = config_of(ck["model_args"], len(vocab))
    tensors = cgrad_tensors(ck["model"], cfg["d"])
    want, have = expected_names(cfg), set(tensors)
    if want != have:
        odd = sorted(have - want)[:3] or ["none"]
        raise Refusal(f"{ckpt_path}: the weights are not nanoGPT's GPT of its model_args "
                      f"(missing {', '.join(sorted(want - have)[:3]) or 'none'}; "
                      f"unexpected {', '.join(odd)})")
    meta = {"model": "charlm", "config": json.dumps(cfg), "vocab": json.dumps(vocab)}
    save(out, tensors, meta)
    return cfg, len(tensors)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, as cgrad's programs: exit 2
        print(f"nanogpt_import: {message} (try --help)", file=sys.stderr)
        sys.exit(2)


def main():
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt", help="nanoGPT's ckpt.pt")
    ap.add_argument("meta", help="nanoGPT's meta.pkl (character-level data)")
    ap.add_argument("out", help="the charlm checkpoint to write (.safetensors)")
    ap.add_argument("--force", action="store_true", help="overwrite an existing OUT")
    a = ap.parse_args()
    try:
        cfg, n = run(a.ckpt, a.meta, a.out, a.force)
    except Refusal as e:
        print(f"nanogpt_import: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"nanogpt_import: {a.out}: {n} tensors, {cfg['layers']} layers, d {cfg['d']}, "
          f"{cfg['H']} heads, {cfg['vocab']} characters, block {cfg['max_len']}")


if __name__ == "__main__":
    main()
