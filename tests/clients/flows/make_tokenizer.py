"""A small byte-level BPE tokenizer trained offline (`tokenizers`), saved as a Hugging Face
tokenizer directory that transformers' AutoTokenizer loads: what guidellm and aiperf count
tokens with, never downloaded from a hub. Usage: python make_tokenizer.py DIR"""
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

WORDS = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "
         "et dolore magna aliqua the quick brown fox jumps over a lazy dog time person year way day thing "
         "world life hand part child eye woman place work week case point company number group problem fact").split()


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(40)) for i in range(400)]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072,
        "eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}))
    (out / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    (out / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": tok.get_vocab_size(),
        "bos_token_id": 0, "eos_token_id": 0}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
