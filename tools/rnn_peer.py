"""PyTorch's peer of tools/rnn_bench.c: a 2-layer nn.LSTM (nn.GRU, nn.RNN)
at word_language_model's sizes (bptt 35, batch 20), one forward of x
[35, 20, H], sum, backward, zero_grad; one JSON line with rnn_bench's fields.

  OMP_NUM_THREADS=1 /usr/bin/python3 tools/rnn_peer.py [KIND [H [STEPS]]]
"""
import json
import sys
import time

import torch


def main():
    args = sys.argv[1:]
    kind = args[0] if args else "lstm"
    try:
        hidden = int(args[1]) if len(args) > 1 else 650
        steps = int(args[2]) if len(args) > 2 else 20
    except ValueError:
        hidden = steps = 0
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}.get(kind)
    if cls is None or hidden < 1 or steps < 1 or len(args) > 3:
        print("usage: rnn_peer.py [lstm|gru|rnn [H [STEPS]]]", file=sys.stderr)
        sys.exit(2)
    torch.manual_seed(1)
    m = cls(hidden, hidden, num_layers=2)
    x = torch.randn(35, 20, hidden)
    times = []
    for s in range(steps + 2):
        t0 = time.perf_counter()
        y, _ = m(x)
        y.sum().backward()
        m.zero_grad()
        if s >= 2:
            times.append(time.perf_counter() - t0)
    times.sort()
    print(json.dumps({"bench": "rnn", "impl": "torch", "kind": kind, "hidden": hidden, "layers": 2,
                      "seq": 35, "batch": 20, "threads": torch.get_num_threads(), "steps": steps,
                      "step_ms_median": round(times[steps // 2] * 1e3, 3),
                      "step_ms_best": round(times[0] * 1e3, 3)}))


if __name__ == "__main__":
    main()
