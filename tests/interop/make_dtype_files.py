"""Write safetensors files of every dtype cgrad reads, as PyTorch holds them,
for tests/interop/check_dtypes.c:

    /usr/bin/python3 make_dtype_files.py DIR   (exit 0: written; 77: no torch)

DIR/torch_dtypes.safetensors: a small model's state dict after
model.to(torch.bfloat16) (as Hugging Face stores most checkpoints), a float16
tensor, int64 ids, int32 ids and a bool mask, written in the safetensors
format (https://github.com/huggingface/safetensors: an 8-byte little-endian
header length, the JSON header, the raw little-endian bytes). The
`safetensors` package is not needed: the writer below is the format itself.
DIR/torch_expect.safetensors: what PyTorch reads for each of them, widened
(floats to float32 with .float(), ints and bools to int64), written the same
way, for the C side to compare exactly.
"""
import json
import struct
import sys

try:
    import torch
except ImportError:
    print("make_dtype_files: torch not available, skipped")
    sys.exit(77)

CODES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
         torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL"}


def raw_bytes(t):
    t = t.contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().tobytes()  # the same 16 bits
    return t.numpy().tobytes()


def save(path, tensors, metadata=None):
    """metadata: a dict of strings, or None."""
    header, blobs, off = ({"__metadata__": metadata} if metadata else {}), [], 0
    for name, t in tensors.items():
        b = raw_bytes(t)
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load(path):
    """The tensors of a safetensors file of CODES' dtypes, as a dict of torch tensors."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header, data = json.loads(f.read(n)), f.read()
    dtypes = {code: dt for dt, code in CODES.items()}
    out = {}
    for name, v in header.items():
        if name != "__metadata__":
            b, e = v["data_offsets"]
            t = torch.frombuffer(bytearray(data[b:e]), dtype=torch.uint8) if e > b else torch.empty(0)
            out[name] = t.view(dtypes[v["dtype"]]).reshape(v["shape"])
    return out


def main(out):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(7, 6), torch.nn.Linear(6, 5),
                                torch.nn.LayerNorm(5))
    with torch.no_grad():  # values bf16 rounds: thirds, tiny and large magnitudes
        model[1].bias.copy_(torch.tensor([1 / 3, -2 / 3, 1e-30, 3e38, -0.0]))
    sd = {k: v for k, v in model.to(torch.bfloat16).state_dict().items()}
    sd["half"] = torch.tensor([[0.1, -65504.0], [6e-8, 1 / 3]], dtype=torch.float16)
    sd["ids"] = torch.tensor([[0, 6, 2**40], [-(2**63), 2**63 - 1, 3]], dtype=torch.int64)
    sd["ids32"] = torch.tensor([1, -2, 2**31 - 1], dtype=torch.int32)
    sd["mask"] = torch.tensor([[True, False, True], [False, False, True]])
    save(f"{out}/torch_dtypes.safetensors", sd)
    expect = {k: (v.float() if v.is_floating_point() else v.to(torch.int64))
              for k, v in sd.items()}
    save(f"{out}/torch_expect.safetensors", expect)
    print(f"make_dtype_files: {len(sd)} tensors ({', '.join(sorted(set(CODES[v.dtype] for v in sd.values())))})")


if __name__ == "__main__":
    main(sys.argv[1])
