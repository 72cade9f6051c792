"""Tiny random-init judges of every Hugging Face kind, saved to folders like hub models.

BERT-like and Llama-like sequence classifiers (one logit: a reward model; two: a classifier
with named classes), with and without a chat template, and a tiny causal LM for the pairwise
judge.  No downloads; nothing in them says "nlhf".
"""

from pathlib import Path

import torch

from tiny_encoder import make_tiny_encoder

CHAT = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
WORDS = "a an the film great awful good bad item review plot it was".split()
LABELS = {0: "NEGATIVE", 1: "POSITIVE"}


def bert_classifier(folder: Path, num_labels: int, seed: int = 0) -> Path:
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    make_tiny_encoder(folder, WORDS, seed=seed, dropout=0.0)
    config = BertConfig.from_pretrained(folder, num_labels=num_labels)
    if num_labels == 2:
        config.id2label, config.label2id = LABELS, {v: k for k, v in LABELS.items()}
    torch.manual_seed(seed)
    BertForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(folder).save_pretrained(folder)
    return folder


def llama_classifier(folder: Path, num_labels: int, chat: bool, seed: int = 0) -> Path:
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from nlhf.models.tiny import byte_tokenizer

    tok = byte_tokenizer()
    if chat:
        tok.chat_template = CHAT
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
        num_labels=num_labels, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    if num_labels == 2:
        config.id2label, config.label2id = LABELS, {v: k for k, v in LABELS.items()}
    torch.manual_seed(seed)
    LlamaForSequenceClassification(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def pairwise_lm(folder: Path, chat: bool, seed: int = 0) -> Path:
    from nlhf.models.tiny import tiny_byte_lm

    model, tok = tiny_byte_lm("llama", seed=seed, max_positions=1024)
    if chat:
        tok.chat_template = CHAT
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
