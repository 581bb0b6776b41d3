"""The real-model suite (MLP, CNN training, MobileNetV2, MiniLM, SmolLM2, tiny GPT-2) and what it needs to run them.

  suite.py       SUITE[name](quick) -> summary dict, available(name)
  assets.py      where the packaged weights and offline inputs are
  gguf.py        GGUF reader + Q4_0/Q4_1/Q8_0/F16/BF16/F32 dequantization
  pth.py         torch .pth reader that never runs code from the file
  weights.py     safetensors (through tinysched.nn.state)
  tokenizers.py  BERT WordPiece and byte-level BPE
  layers.py      shared pieces (embeddings, KV-cache attention, erf GELU, greedy argmax, kernel log)
  small.py, mobilenetv2.py, bert.py, llama.py, gpt2.py   the models

Nothing here imports torch; the parity references live in tests/test_models.py.
"""
