"""The text models of bench/torch_step.py in plain PyTorch: memfit's zoo
models gpt-char (models/gpt.cpp) and lstm-classifier
(models/lstm_classifier.cpp), written here so that the bench measures what
a PyTorch user would write, not a library's fused module.

GPT is GPT-2's architecture as nanoGPT writes it: learned token and position
embeddings, pre-LN blocks (causal self-attention through
F.scaled_dot_product_attention, its dropout_p on the probabilities in
training; a GELU (tanh) MLP), dropout on the embeddings and both residual
branches, a final layer norm, and the head tied to the token table. GPT-2's
initialisation (N(0, 0.02), the residual projections 0.02 / sqrt(2 n_layer)).
adamw_groups makes memfit's weight-decay groups (decay_bias_and_norm=false):
decay on the 2-d weights (linear weights, both embedding tables), none on
biases and layer norms.

With dropout_p > 0 PyTorch's CPU scaled_dot_product_attention has no fused
kernel (torch 2.15: its flash attention for CPU takes no dropout) and runs
the math path, which holds the B x H x T x T scores, probabilities and
dropout mask for backward; memfit's fused attention holds none of them.
That is what a PyTorch user gets with gpt-char's dropout 0.2, so the bench
keeps it.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout, bias):
        super().__init__()
        self.n_head, self.dropout = n_head, dropout
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, dropout, bias):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, bias=bias)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout, bias)
        self.ln_2 = nn.LayerNorm(n_embd, bias=bias)
        self.mlp = MLP(n_embd, dropout, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """gpt-char's defaults: 6 layers, 6 heads, 384 wide, block 256, dropout 0.2."""

    def __init__(self, vocab=65, n_layer=6, n_head=6, n_embd=384, block_size=256, dropout=0.2, bias=True):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList(Block(n_embd, n_head, dropout, bias) for _ in range(n_layer)),
            ln_f=nn.LayerNorm(n_embd, bias=bias),
        ))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied: one parameter
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
            elif p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            else:
                nn.init.zeros_(p) if name.endswith("bias") else nn.init.ones_(p)

    def forward(self, idx):
        T = idx.shape[1]
        assert T <= self.block_size, f"sequence of {T} tokens, block size {self.block_size}"
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))  # [B, T, vocab]


def adamw_groups(model, weight_decay):
    """Decay on 2-d parameters only (named_parameters lists the tied table once)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


class LSTMClassifier(nn.Module):
    """memfit's lstm-classifier: embedding 64 -> LSTM hidden 32 (1 layer) ->
    the last step's hidden state -> linear(classes); full-length sequences."""

    def __init__(self, vocab, classes, embed=64, hidden=32):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=1, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, tokens):
        _, (h, _) = self.lstm(self.embedding(tokens))
        return self.fc(h[-1])
