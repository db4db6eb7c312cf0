"""Tokenizer: ids equal transformers' GGUF tokenizer on SmolLM2; tiny hand-made GGUFs; errors."""
import os

import gguf
import numpy as np
import pytest

from arenarl_jax.text import chat_format as cf
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.text.tokenizer import Tokenizer, gguf_cache_key
from arenarl_jax.types import ToolCall

TEXTS = [
    "Hello world", "The capital of France is Paris.",
    # unicode
    "naïve café résumé Straße Ελληνικά русский العربية हिन्दी", "x\u0303 e\u0301 \u200b \u00a0",
    # CJK
    "中文分词测试，巴黎的天气怎么样？", "日本語のテキストです。", "한국어 텍스트",
    # emoji (ZWJ sequence, flag, skin tone)
    "🙂🚀 👩‍👩‍👧 🇫🇷 👍🏽!",
    # digits
    "1234567890", "pi=3.14159, 10,000 km in 2024", " 42 +7 -0.5e-3",
    # whitespace
    "a  b   c    d", "   leading", "trailing   ", "\t\ttabs\t", "\n\n\nnewlines\n", "a \n b\r\nc",
    " ", "\n", "  \t \n ",
    # special-token strings
    "<|im_start|>system\nHi<|im_end|>\n", "<|im_end|><|im_start|><|endoftext|>",
    "<repo_name>x<file_sep>y<jupyter_code>", "<|im_start", "im_end|>", "<think>r</think>",
    # code / contractions
    "def f(x):\n    return x ** 2  # it's fine, we'll see",
]


@pytest.fixture(scope="module")
def gguf_path():
  return find_smollm2_gguf()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("tokenizer_cache"))


@pytest.fixture(scope="module")
def tok(gguf_path, cache_dir):
  return Tokenizer.from_gguf(gguf_path, cache_dir=cache_dir)


@pytest.fixture(scope="module")
def tok_nodigits(gguf_path, cache_dir):
  """Without SmolLM2's digit pre-split: what transformers' GGUF loader builds."""
  return Tokenizer.from_gguf(gguf_path, cache_dir=cache_dir, split_digits=False)


@pytest.fixture(scope="module")
def hf_tok(hf_smollm2):
  """transformers' own GGUF tokenizer (needs torch): the reference, shared with the model tests."""
  return hf_smollm2[1]


def _random_texts(n, seed=0):
  pieces = ["a", "Z", "é", "ß", "中", "文", "日本", "한", "🙂", "👩‍👧", "🇯🇵", " ", "  ", "\t", "\n",
            "\r\n", "0", "7", "3.5", "'s", "'LL", "<|im_start|>", "<|im_end|>", "<think>", "<", "|",
            "\u200b", "\u00a0", "\u0301", "word", " the", "!!", "```"]
  rng = np.random.default_rng(seed)
  return ["".join(rng.choice(pieces, size=rng.integers(1, 24))) for _ in range(n)]


def _space_run_before_digit(text):
  return any(text[k].isnumeric() and text[k - 1].isspace() and text[k - 2].isspace()
             for k in range(2, len(text)))


def test_ids_equal_transformers(tok_nodigits, hf_tok):
  texts = TEXTS + _random_texts(200)
  assert sum(map(_space_run_before_digit, texts)) >= 10  # the cases where the pre-split matters
  for text in texts:
    want = hf_tok.encode(text, add_special_tokens=False)
    assert tok_nodigits.encode(text) == want, text
    assert tok_nodigits.encode(text, add_special_tokens=True) == hf_tok.encode(text), text
  assert tok_nodigits.encode_batch(texts) == [tok_nodigits.encode(t) for t in texts]


def test_default_splits_digits_like_smollm2(tok, hf_tok):
  """Default = llama.cpp's "smollm" pre-tokenizer: equal to transformers' except on space runs
  directly before a digit, where the run stays one pre-token."""
  texts = TEXTS + _random_texts(200)
  same = [t for t in texts if not _space_run_before_digit(t)]
  assert tok.encode_batch(same) == [hf_tok.encode(t, add_special_tokens=False) for t in same]
  assert tok.encode("a  1") == [tok.token_to_id("a"), tok.token_to_id("ĠĠ"), tok.token_to_id("1")]
  assert hf_tok.encode("a  1", add_special_tokens=False) == [81, 216, 216, 33]
  assert tok.encode("\n\t0") == [tok.token_to_id("Ċĉ"), tok.token_to_id("0")]
  assert tok.encode("12 345") == [33, 34, 216, 35, 36, 37]  # one token per digit either way


def test_special_tokens_map_to_their_ids(tok):
  assert tok.encode("<|im_start|>user\nhi<|im_end|>") == [1, 4093, 198, 6004, 2]
  assert (tok.vocab_size, tok.bos_id, tok.eos_id, tok.pad_id) == (49152, 1, 2, 2)
  assert tok.id_to_token(1) == "<|im_start|>" and tok.token_to_id("<|im_end|>") == 2
  assert tok.special_ids == frozenset(range(17))


def test_decode_round_trip_and_matches_transformers(tok, hf_tok):
  for text in TEXTS + _random_texts(50, seed=1):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.decode(np.asarray(ids, np.int32)) == text
    assert tok.decode(ids, skip_special_tokens=True) == hf_tok.decode(ids,
                                                                      skip_special_tokens=True)
  single = list(range(0, 300)) + list(range(300, 49152, 97))  # incl. partial UTF-8 bytes
  assert [tok.decode([i]) for i in single] == [hf_tok.decode([i]) for i in single]
  assert tok.decode_batch([[1, 2], [19556]]) == ["<|im_start|><|im_end|>", "Hello"]


def test_chat_template_and_plain_rendering_match_transformers(tok, hf_tok):
  assert tok.chat_template == hf_tok.chat_template
  for msgs in ([{"role": "user", "content": "What is the capital of France?"}],
               [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4"}, {"role": "user", "content": "3+3?"}]):
    want = hf_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert cf.render_messages(msgs, add_generation_prompt=True) == want


def test_increment_tokens_concatenate(tok):
  """Sampler contract: prompt ids + generated ids (ending in <|im_end|>) + suffix ids == whole."""
  tools = [{"name": "weather", "parameters": {"type": "object"}}]
  history = [{"role": "user", "content": "Weather in 東京 and Paris?"}]
  ids = tok.encode(cf.render_messages(history, tools=tools, add_generation_prompt=True))
  turn = dict(reasoning="Two cities.", content="",
              tool_calls=[ToolCall("weather", {"city": "東京"}), ToolCall("weather", {"city": "P"})])
  ids += tok.encode(cf.render_assistant(**turn) + cf.IM_END)
  ids += tok.encode(cf.render_tool_turn(["rain 🌧", "  sun  "], close_previous=False))
  history += [{"role": "assistant", **turn}, {"role": "tool", "content": "rain 🌧"},
              {"role": "tool", "content": "  sun  "}]
  assert ids == tok.encode(cf.render_messages(history, tools=tools, add_generation_prompt=True))


def test_cached_load_and_saved_dir_equal(tok, gguf_path, cache_dir, tmp_path, monkeypatch):
  assert os.path.isfile(os.path.join(cache_dir, gguf_cache_key(gguf_path), "tokenizer.json"))
  monkeypatch.setattr(gguf, "GGUFReader", _refuse)  # the cache must not re-read the GGUF
  cached = Tokenizer.from_gguf(gguf_path, cache_dir=cache_dir)
  tok.save(str(tmp_path))
  loaded = Tokenizer.from_hf_dir(str(tmp_path))
  for other in (cached, loaded):
    assert other.encode_batch(TEXTS) == tok.encode_batch(TEXTS)
    assert (other.bos_id, other.eos_id, other.pad_id, other.chat_template, other.special_ids) == (
        tok.bos_id, tok.eos_id, tok.pad_id, tok.chat_template, tok.special_ids)


def test_saved_dir_loads_in_transformers(tok, tmp_path):
  from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
  tok.save(str(tmp_path))
  hf = AutoTokenizer.from_pretrained(str(tmp_path))
  assert [hf.encode(t, add_special_tokens=False) for t in TEXTS] == tok.encode_batch(TEXTS)
  assert (hf.eos_token_id, hf.pad_token_id, hf.chat_template) == (2, 2, tok.chat_template)


def test_unknown_ids_and_tokens_raise(tok):
  with pytest.raises(ValueError, match=r"ids\[1\]=49152"):
    tok.decode([5, 49152])
  with pytest.raises(KeyError, match="not in the vocabulary"):
    tok.token_to_id("<no such token>")
  with pytest.raises(TypeError, match=r"texts\[1\]"):
    tok.encode_batch(["a", 3])


# ------------------------------------------------------------------ tiny hand-made GGUF files
def _byte_chars():
  """GPT-2's printable stand-in character for each byte 0..255."""
  keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
  chars, extra = {}, 0
  for b in range(256):
    if b in keep:
      chars[b] = chr(b)
    else:
      chars[b] = chr(256 + extra)
      extra += 1
  return [chars[b] for b in range(256)]


# ids: 0-2 control, 3 + byte for bytes, then 259 "ab", 260 "abc", 261 "12", 262 "<think>".
TINY_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + _byte_chars() + [
    "ab", "abc", "12", "<think>"]
TINY_TYPES = [3, 3, 3] + [1] * 256 + [1, 1, 1, 4]


def _write_gguf(path, *, model="gpt2", pre="gpt2", merges=("a b", "ab c", "1 2"), eos=2,
                add_bos=None, pad=None, template="{{ messages }}"):
  w = gguf.GGUFWriter(str(path), "llama")
  w.add_tokenizer_model(model)
  if pre is not None:
    w.add_tokenizer_pre(pre)
  w.add_token_list(TINY_TOKENS)
  w.add_token_types(TINY_TYPES)
  if merges is not None:
    w.add_token_merges(list(merges))
  w.add_bos_token_id(1)
  if eos is not None:
    w.add_eos_token_id(eos)
  if pad is not None:
    w.add_pad_token_id(pad)
  if add_bos is not None:
    w.add_add_bos_token(add_bos)
  w.add_chat_template(template)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return str(path)


def _refuse(*args, **kwargs):
  raise AssertionError("GGUFReader must not be called")


def test_tiny_gguf_hand_worked_ids(tmp_path):
  tok = Tokenizer.from_gguf(_write_gguf(tmp_path / "t.gguf"), use_cache=False)
  assert tok.encode("abc ab") == [260, 35, 259]  # "Ġab" -> Ġ + ab: no "Ġ ab" merge
  assert tok.encode("12") == [261]
  assert tok.encode("x<think>y<|im_end|>") == [3 + ord("x"), 262, 3 + ord("y"), 2]
  assert tok.decode([262, 2], skip_special_tokens=True) == "<think>"  # user-defined, not special
  assert tok.encode("ab", add_special_tokens=True) == [259]  # no add_bos_token flag
  assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.chat_template) == (1, 2, 2, "{{ messages }}")
  assert sorted(os.listdir(tmp_path)) == ["t.gguf"]  # use_cache=False writes nothing


def test_tiny_gguf_smollm_pre_splits_digits_and_bos_flag(tmp_path):
  tok = Tokenizer.from_gguf(_write_gguf(tmp_path / "t.gguf", pre="smollm", add_bos=True, pad=0),
                            use_cache=False)
  assert tok.encode("12") == [3 + ord("1"), 3 + ord("2")]
  assert tok.encode("ab", add_special_tokens=True) == [1, 259]
  assert tok.pad_id == 0


def test_tiny_gguf_cache(tmp_path, monkeypatch):
  path = _write_gguf(tmp_path / "t.gguf")
  cache = str(tmp_path / "cache")
  first = Tokenizer.from_gguf(path, cache_dir=cache)
  cached_file = os.path.join(cache, gguf_cache_key(path), "tokenizer.json")
  assert os.path.isfile(cached_file)
  with monkeypatch.context() as m:
    m.setattr(gguf, "GGUFReader", _refuse)
    assert Tokenizer.from_gguf(path, cache_dir=cache).encode("abc 12") == first.encode("abc 12")
  with open(cached_file, "w") as f:
    f.write("not json")  # a corrupt cache is rebuilt
  assert Tokenizer.from_gguf(path, cache_dir=cache).encode("abc 12") == first.encode("abc 12")
  assert Tokenizer.from_hf_dir(os.path.dirname(cached_file)).encode("abc") == [260]
  key = gguf_cache_key(path)
  st = os.stat(path)
  os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
  assert gguf_cache_key(path) != key


def test_unwritable_cache_warns_and_still_loads(tmp_path):
  blocker = tmp_path / "not_a_dir"
  blocker.write_text("a file where the cache folder should be")
  with pytest.warns(UserWarning, match="could not cache the tokenizer"):
    tok = Tokenizer.from_gguf(_write_gguf(tmp_path / "t.gguf"), cache_dir=str(blocker / "sub"))
  assert tok.encode("abc") == [260]


@pytest.mark.parametrize("kwargs, match", [
    (dict(merges=None), "GGUF metadata key 'tokenizer.ggml.merges' is missing"),
    (dict(eos=None), "GGUF metadata key 'tokenizer.ggml.eos_token_id' is missing"),
    (dict(model="llama"), "tokenizer.ggml.model='llama'"),
    (dict(pre="qwen2"), "tokenizer.ggml.pre='qwen2' is not supported"),
    (dict(merges=("a b c",)), r"tokenizer.ggml.merges\[0\]='a b c'"),
    (dict(eos=999), "eos_id=999 is outside the vocabulary"),
])
def test_bad_gguf_metadata_raises(tmp_path, kwargs, match):
  path = _write_gguf(tmp_path / "bad.gguf", **kwargs)
  with pytest.raises(ValueError, match=match) as info:
    Tokenizer.from_gguf(path, cache_dir=str(tmp_path / "cache"))
  if "outside" not in match:
    assert path in str(info.value)


def test_unreadable_gguf_raises(tmp_path):
  with pytest.raises(FileNotFoundError, match="missing.gguf"):
    Tokenizer.from_gguf(str(tmp_path / "missing.gguf"))
  garbage = tmp_path / "garbage.gguf"
  garbage.write_bytes(b"definitely not a gguf file")
  with pytest.raises(ValueError, match="garbage.gguf: not a readable GGUF file"):
    Tokenizer.from_gguf(str(garbage), use_cache=False)
  good = _write_gguf(tmp_path / "good.gguf")
  truncated = tmp_path / "truncated.gguf"
  data = open(good, "rb").read()
  truncated.write_bytes(data[:len(data) // 2])
  with pytest.raises(ValueError, match="truncated.gguf"):
    Tokenizer.from_gguf(str(truncated), use_cache=False)


def test_bad_hf_dir_raises(tmp_path):
  with pytest.raises(FileNotFoundError, match="tokenizer.json not found"):
    Tokenizer.from_hf_dir(str(tmp_path))
  (tmp_path / "tokenizer.json").write_text("{")
  with pytest.raises(ValueError, match="not a valid tokenizer.json"):
    Tokenizer.from_hf_dir(str(tmp_path))
  tok = Tokenizer.from_gguf(_write_gguf(tmp_path / "t.gguf"), use_cache=False)
  tok.save(str(tmp_path / "saved"))
  (tmp_path / "saved" / "tokenizer_config.json").write_text('{"eos_token": "<nope>"}')
  with pytest.raises(ValueError, match="eos_token '<nope>' is not in the vocabulary"):
    Tokenizer.from_hf_dir(str(tmp_path / "saved"))
  (tmp_path / "saved" / "tokenizer_config.json").write_text("{}")
  with pytest.raises(ValueError, match="no EOS token"):
    Tokenizer.from_hf_dir(str(tmp_path / "saved"))
