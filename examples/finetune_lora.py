# finetune_lora.py: the PyTorch twin of finetune_lora.c (run: python3 finetune_lora.py).
# Pretrain a small character LM on one text, save it; attach LoRA adapters
# (rank 4, alpha 8) to the MLP's Linears, fine-tune them alone on another
# text, save only the adapters; rebuild base + adapters and check the logits.
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, D, H, STEPS = 8, 32, 64, 4, 100
base_text = "the quick brown fox jumps over the lazy dog. " * 40
new_text = "a lazy cat naps by the warm fire. " * 40
chars = sorted(set(base_text + new_text))
V = len(chars)
torch.manual_seed(1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        h = self.ln1(x)
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), 1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.block, self.ln_f = Block(), nn.LayerNorm(D)

    def forward(self, idx):
        x = self.block(self.tok(idx) + self.pos(torch.arange(idx.shape[1])))
        return self.ln_f(x) @ self.tok.weight.T


class LoRA(nn.Module):  # what PEFT's LoraLayer does for one Linear
    def __init__(self, base, r=4, alpha=8):
        super().__init__()
        self.base, self.scale = base, alpha / r
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base(x) + self.scale * self.lora_B(self.lora_A(x))


def add_lora(model):
    model.requires_grad_(False)
    model.block.fc1, model.block.fc2 = LoRA(model.block.fc1), LoRA(model.block.fc2)


def train(model, text, opt):
    data = torch.tensor([chars.index(c) for c in text])
    for _ in range(STEPS):
        ix = torch.randint(len(data) - T, (B,))
        x = torch.stack([data[i:i + T] for i in ix])
        y = torch.stack([data[i + 1:i + T + 1] for i in ix])
        loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


model = LM()
print(f"base: loss {train(model, base_text, torch.optim.Adam(model.parameters(), 3e-3)):.3f}")
torch.save(model.state_dict(), "base.pt")
add_lora(model)
trainable = [p for p in model.parameters() if p.requires_grad]
print(f"LoRA: {sum(p.numel() for p in trainable)} trainable parameters")
print(f"fine-tuned: loss {train(model, new_text, torch.optim.AdamW(trainable, 3e-3)):.3f}")
torch.save({k: v for k, v in model.state_dict().items() if "lora_" in k}, "adapter.pt")

again = LM()
again.load_state_dict(torch.load("base.pt"))
add_lora(again)
again.load_state_dict(torch.load("adapter.pt"), strict=False)
model.eval(), again.eval()
ids = torch.tensor([[chars.index(c) for c in new_text[:T]]])
with torch.no_grad():
    same = torch.equal(model(ids), again(ids))
print("base + adapters reloaded, logits identical:", same)
assert same
