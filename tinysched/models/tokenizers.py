"""Tokenizers for the model suite, written from the published algorithms (no `tokenizers`/`transformers` needed).

WordPieceTokenizer: BERT uncased (all-MiniLM-L6-v2). Normalize (drop control characters, map whitespace to spaces, put
  spaces around CJK ideographs, lowercase, strip accents by NFD + dropping combining marks), split on whitespace and
  around every punctuation character, then greedy longest-match-first WordPiece with "##" continuations; [CLS] ... [SEP].
ByteBPETokenizer: GPT-2 style byte-level BPE (SmolLM2) from GGUF metadata (tokenizer.ggml.tokens / merges /
  token_type). Control tokens (<|im_start|> ...) are split out first; the rest is pre-tokenized with GPT-2's pattern
  ('s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+), implemented with unicodedata
  categories since Python's `re` has no \\p{..}; every piece's UTF-8 bytes are mapped to printable characters and
  merged by merge rank (lowest first).
"""
from __future__ import annotations
import json, os, re, unicodedata
from functools import lru_cache
from typing import Iterable, Sequence

# *** BERT WordPiece ***

def _is_control(c: str) -> bool:
  if c in "\t\n\r": return False
  return unicodedata.category(c) in ("Cc", "Cf")

def _is_whitespace(c: str) -> bool:
  return c in " \t\n\r" or unicodedata.category(c) == "Zs"

def _is_punctuation(c: str) -> bool:
  cp = ord(c)
  # BERT counts every non-alphanumeric ASCII character as punctuation ($, ^, `, ...), plus Unicode P* categories
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126: return True
  return unicodedata.category(c).startswith("P")

def _is_cjk(cp: int) -> bool:
  return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F or
          0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)

class WordPieceTokenizer:
  """BERT uncased WordPiece; `encode(text)` -> ids with [CLS]/[SEP], `batch(texts)` -> padded ids and attention mask."""
  def __init__(self, vocab: dict[str, int], lowercase: bool = True, strip_accents: bool | None = None, unk: str = "[UNK]",
               cls: str = "[CLS]", sep: str = "[SEP]", pad: str = "[PAD]", max_chars_per_word: int = 100):
    self.vocab, self.lowercase = vocab, lowercase
    self.strip_accents = lowercase if strip_accents is None else strip_accents  # BERT's rule: None follows lowercase
    for t in (unk, cls, sep, pad):
      if t not in vocab: raise ValueError(f"WordPiece vocab has no special token {t!r}")
    self.unk_id, self.cls_id, self.sep_id, self.pad_id = vocab[unk], vocab[cls], vocab[sep], vocab[pad]
    self.max_chars_per_word = max_chars_per_word
    self.inv = {i: t for t, i in vocab.items()}

  @staticmethod
  def from_vocab_txt(path: str | os.PathLike, **kwargs) -> WordPieceTokenizer:
    with open(path, encoding="utf-8") as f: tokens = [line.rstrip("\n") for line in f]
    return WordPieceTokenizer({t: i for i, t in enumerate(tokens)}, **kwargs)
  @staticmethod
  def from_tokenizer_json(path: str | os.PathLike) -> WordPieceTokenizer:
    with open(path, encoding="utf-8") as f: j = json.load(f)
    if j.get("model", {}).get("type") != "WordPiece": raise ValueError(f"{path}: not a WordPiece tokenizer.json")
    norm = j.get("normalizer") or {}
    return WordPieceTokenizer(j["model"]["vocab"], lowercase=norm.get("lowercase", True), strip_accents=norm.get("strip_accents"),
                              unk=j["model"].get("unk_token", "[UNK]"), max_chars_per_word=j["model"].get("max_input_chars_per_word", 100))

  def normalize(self, text: str) -> str:
    out = []
    for c in text:
      cp = ord(c)
      if cp == 0 or cp == 0xFFFD or _is_control(c): continue
      if _is_whitespace(c): out.append(" ")
      elif _is_cjk(cp): out.append(f" {c} ")
      else: out.append(c)
    s = "".join(out)
    if self.strip_accents: s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
    return s.lower() if self.lowercase else s

  def pre_tokenize(self, text: str) -> list[str]:
    words: list[str] = []
    for chunk in text.split():
      cur = ""
      for c in chunk:
        if _is_punctuation(c):
          if cur: words.append(cur)
          words.append(c)
          cur = ""
        else: cur += c
      if cur: words.append(cur)
    return words

  def wordpiece(self, word: str) -> list[int]:
    if len(word) > self.max_chars_per_word: return [self.unk_id]
    ids, start = [], 0
    while start < len(word):
      end = len(word)
      while end > start:
        piece = word[start:end] if start == 0 else "##" + word[start:end]
        if piece in self.vocab: break
        end -= 1
      if end == start: return [self.unk_id]  # no piece matches: the whole word is unknown
      ids.append(self.vocab[piece])
      start = end
    return ids

  def encode(self, text: str, max_length: int = 256) -> list[int]:
    """[CLS] + word pieces + [SEP], truncated to max_length tokens in all."""
    ids = [i for w in self.pre_tokenize(self.normalize(text)) for i in self.wordpiece(w)]
    return [self.cls_id] + ids[:max(0, max_length - 2)] + [self.sep_id]

  def batch(self, texts: Sequence[str], max_length: int = 256) -> tuple[list[list[int]], list[list[int]]]:
    """(ids, attention mask), right-padded with [PAD] to the longest text."""
    enc = [self.encode(t, max_length) for t in texts]
    n = max(len(e) for e in enc)
    return [e + [self.pad_id] * (n - len(e)) for e in enc], [[1] * len(e) + [0] * (n - len(e)) for e in enc]

  def decode(self, ids: Iterable[int]) -> str:
    out = ""
    for i in ids:
      t = self.inv.get(int(i), "[UNK]")
      out += t[2:] if t.startswith("##") else (" " + t if out else t)
    return out

# *** byte-level BPE ***

@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
  """GPT-2's reversible byte -> printable character map (printable Latin-1 bytes map to themselves)."""
  keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
  out, n = {}, 0
  for b in range(256):
    if b in keep: out[b] = chr(b)
    else:
      out[b] = chr(256 + n)
      n += 1
  return out

_CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")

def _cat(c: str) -> str: return unicodedata.category(c)[0]  # 'L' letter, 'N' number, ...

def gpt2_pre_tokenize(text: str) -> list[str]:
  """Split text like GPT-2's regex; each alternative is tried in order at every position (regex semantics)."""
  out, i, n = [], 0, len(text)
  def run(j: int, ok) -> int:
    while j < n and ok(text[j]): j += 1
    return j
  is_l = lambda c: _cat(c) == "L"
  is_n = lambda c: _cat(c) == "N"
  is_other = lambda c: not c.isspace() and _cat(c) not in ("L", "N")
  while i < n:
    c = text[i]
    m = next((k for k in _CONTRACTIONS if text.startswith(k, i)), None)
    if m is not None:
      out.append(m); i += len(m); continue
    start = i + 1 if c == " " and i + 1 < n else i  # the optional leading space of ` ?\p{L}+` and friends
    matched = False
    for ok in (is_l, is_n, is_other):
      for s in ((start, i) if start != i else (i,)):
        if s < n and ok(text[s]):
          j = run(s, ok)
          out.append(text[i:j]); i = j; matched = True
          break
      if matched: break
    if matched: continue
    # whitespace: \s+(?!\S) keeps the last space for the next word when a non-space follows, else \s+
    j = run(i, str.isspace)
    if j < n and j - 1 > i: j -= 1
    out.append(text[i:j]); i = j
  return out

class ByteBPETokenizer:
  """Byte-level BPE: `encode(text)` -> ids (special tokens in the text map to their ids), `decode(ids)` -> text."""
  def __init__(self, tokens: Sequence[str], merges: Sequence[str], special: Iterable[str] = ()):
    self.tokens = list(tokens)
    self.vocab = {t: i for i, t in enumerate(self.tokens)}
    self.ranks: dict[tuple[str, str], int] = {}
    for r, m in enumerate(merges):
      a, sep, b = m.partition(" ")
      if not sep: raise ValueError(f"BPE merge {r} {m!r} is not 'left right'")
      self.ranks.setdefault((a, b), r)
    self.special = {t: self.vocab[t] for t in special}
    # longest first, so a special token that contains another wins
    self._special_re = re.compile("|".join(re.escape(t) for t in sorted(self.special, key=len, reverse=True))) if self.special else None
    self.byte_map = bytes_to_unicode()
    self.byte_unmap = {v: k for k, v in self.byte_map.items()}
    self._cache: dict[str, list[int]] = {}

  @staticmethod
  def from_gguf_metadata(md: dict) -> ByteBPETokenizer:
    if md.get("tokenizer.ggml.model") != "gpt2":
      raise ValueError(f"GGUF tokenizer model {md.get('tokenizer.ggml.model')!r} is not byte-level BPE ('gpt2')")
    tokens, types = md["tokenizer.ggml.tokens"], md.get("tokenizer.ggml.token_type", [])
    # token types: 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte; control/user ones are matched whole
    special = [t for t, ty in zip(tokens, types) if ty in (3, 4)]
    return ByteBPETokenizer(tokens, md["tokenizer.ggml.merges"], special)

  def _bpe(self, piece: str) -> list[int]:
    if (c := self._cache.get(piece)) is not None: return c
    word = [self.byte_map[b] for b in piece.encode("utf-8")]
    while len(word) > 1:
      best, best_rank = -1, None
      for k in range(len(word) - 1):
        r = self.ranks.get((word[k], word[k + 1]))
        if r is not None and (best_rank is None or r < best_rank): best, best_rank = k, r
      if best_rank is None: break
      a, b = word[best], word[best + 1]
      merged, k = [], 0
      while k < len(word):  # merge every occurrence of the best pair, left to right
        if k < len(word) - 1 and word[k] == a and word[k + 1] == b:
          merged.append(a + b); k += 2
        else:
          merged.append(word[k]); k += 1
      word = merged
    try: ids = [self.vocab[s] for s in word]
    except KeyError as e: raise ValueError(f"BPE symbol {e.args[0]!r} of {piece!r} is not in the vocabulary") from None
    self._cache[piece] = ids
    return ids

  def encode(self, text: str) -> list[int]:
    ids: list[int] = []
    pos = 0
    for m in (self._special_re.finditer(text) if self._special_re else ()):
      ids += self._encode_plain(text[pos:m.start()])
      ids.append(self.special[m.group()])
      pos = m.end()
    return ids + self._encode_plain(text[pos:])
  def _encode_plain(self, text: str) -> list[int]: return [i for p in gpt2_pre_tokenize(text) for i in self._bpe(p)]

  def decode(self, ids: Iterable[int]) -> str:
    s = "".join(self.tokens[int(i)] for i in ids)
    return bytes(self.byte_unmap[c] for c in s if c in self.byte_unmap).decode("utf-8", errors="replace") if s else ""

__all__ = ["WordPieceTokenizer", "ByteBPETokenizer", "gpt2_pre_tokenize", "bytes_to_unicode"]
