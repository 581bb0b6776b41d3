"""The disk cache of code generation (tinysched/codegen/program_cache.py): an entry gives back exactly what
to_program renders, is reused only by the code that wrote it (the files and the code as loaded), is reported to a
capture as a rendering, survives nothing it cannot parse, and is not written for symbolic launches. Each check has its plant;
the execution check's plant tests (tests/replay/test_exec_plants.py, test_exec_bf16.py) run their workers with it on."""
import hashlib, shutil
from pathlib import Path
import pytest
from tinysched import Tensor, Variable, capture_hook
from tinysched.ops import Ops
import tinysched.codegen.program_cache as PC
from tinysched.codegen import program as P
from tinysched.codegen.program import to_program
from tinysched.codegen.target import GENERIC_GPU, NVIDIA_LIKE_GPU

def _ast(t: Tensor):
  return next(si.ast for si in t.schedule_with_vars()[0] if si.ast.op is Ops.SINK)

@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  monkeypatch.setenv("TINYSCHED_PROGRAM_CACHE", "1")
  return tmp_path / "programs"

def _no_render(monkeypatch):
  def refuse(*a, **k): raise AssertionError("rendered again: the cache entry was not used")
  monkeypatch.setattr(PC, "to_program", refuse)

def test_an_entry_gives_back_what_to_program_renders(cache, monkeypatch):
  for ast, tg in ((_ast(Tensor.empty(64, 768) @ Tensor.empty(768, 256)), NVIDIA_LIKE_GPU), (_ast(Tensor.empty(1000).sum()), GENERIC_GPU),
                  (_ast((Tensor.empty(8, 8).half() + 1).exp()), GENERIC_GPU)):
    want = to_program(ast, None, tg)
    assert PC.cached_program(ast, None, tg) == want
    with monkeypatch.context() as m:
      _no_render(m)
      assert PC.cached_program(ast, None, tg) == want  # from disk, field for field (Program is a frozen dataclass)
  assert len(list(cache.glob("*.json"))) == 3

def test_opts_and_target_are_part_of_the_key(cache):
  ast = _ast(Tensor.empty(256, 256) @ Tensor.empty(256, 256))
  for opts, tg in ((None, GENERIC_GPU), (None, NVIDIA_LIKE_GPU), ((), GENERIC_GPU)):
    assert PC.cached_program(ast, opts, tg) == to_program(ast, opts, tg)
  assert len({PC.entry_key(ast, None, GENERIC_GPU), PC.entry_key(ast, None, NVIDIA_LIKE_GPU), PC.entry_key(ast, (), GENERIC_GPU)}) == 3

def check_code_edit_changes_the_fingerprint(tmp_path: Path) -> None:
  pkg = Path(PC.__file__).resolve().parent.parent
  copy = tmp_path / "tinysched"
  shutil.copytree(pkg, copy, ignore=shutil.ignore_patterns("__pycache__"))
  before = PC.fingerprint_of(copy)
  f = copy / "codegen" / "lowerer.py"
  f.write_text(f.read_text().replace("def ", "def  ", 1))  # a one-character edit in code generation
  assert PC.fingerprint_of(copy) != before

def test_a_file_edit_changes_the_fingerprint(tmp_path): check_code_edit_changes_the_fingerprint(tmp_path)

def test_plant_fingerprint_of_file_names_only(tmp_path, monkeypatch):
  """A fingerprint of the file list alone would reuse entries across code edits."""
  monkeypatch.setattr(PC, "fingerprint_of", lambda root: hashlib.sha256("".join(sorted(p.name for p in root.rglob("*.py"))).encode()).hexdigest())
  with pytest.raises(AssertionError): check_code_edit_changes_the_fingerprint(tmp_path)

def check_a_patch_changes_the_live_digest(monkeypatch) -> None:
  """A module attribute replaced (a plant: replay's tests install theirs at start-up) changes the loaded code's digest;
  so does a replaced method."""
  from tinysched import shape as SH
  before = PC.live_digest()
  assert PC.live_digest() == before  # stable within a process
  with monkeypatch.context() as m:
    orig = P.render
    m.setattr(P, "render", lambda lw, target: orig(lw, target) + "\n")
    assert PC.live_digest() != before
  assert PC.live_digest() == before
  with monkeypatch.context() as m:
    orig_m = SH.View.to_indexed_uops
    m.setattr(SH.View, "to_indexed_uops", lambda self, idxs, vexpr=None: orig_m(self, idxs, vexpr))
    assert PC.live_digest() != before
  # a matcher replaced by one whose rule differs only in a function made at run time (a closure over another constant)
  from tinysched.codegen import lowerer as LO
  from tinysched.rewrite import PatternMatcher
  pm = LO.ast_lowering
  def planted(k):
    def fn(**kw): return None if k else None
    return fn
  rules = [(r[0], r[1]) for r in pm.rules]
  with monkeypatch.context() as m:
    m.setattr(LO, "ast_lowering", PatternMatcher(rules[:-1] + [(rules[-1][0], planted(1))]))
    one = PC.live_digest()
    m.setattr(LO, "ast_lowering", PatternMatcher(rules[:-1] + [(rules[-1][0], planted(2))]))
    assert one != PC.live_digest() != before
  assert PC.live_digest() == before
  # a lowering pass replaced inside the tuple of named tuples that lists them
  with monkeypatch.context() as m:
    first = LO.LOWERING_PASSES[0]
    m.setattr(LO, "LOWERING_PASSES", (LO.Pass(first.name, lambda lw: first.run(lw)),) + LO.LOWERING_PASSES[1:])
    assert PC.live_digest() != before
  assert PC.live_digest() == before

def test_a_patch_changes_the_live_digest(monkeypatch): check_a_patch_changes_the_live_digest(monkeypatch)

def test_plant_live_digest_of_module_names_only(monkeypatch):
  import sys
  monkeypatch.setattr(PC, "live_digest",
                      lambda: hashlib.sha256(" ".join(sorted(m for m in sys.modules if m.startswith("tinysched"))).encode()).hexdigest())
  with pytest.raises(AssertionError): check_a_patch_changes_the_live_digest(monkeypatch)

def test_the_digest_is_the_same_in_every_process():
  """Byte-identical keys across processes and hash seeds (a set's repr would follow the seed)."""
  import subprocess, sys, os
  code = "import tinysched.codegen.program_cache as PC, tinysched.runtime.interpreter, tinysched.codegen.lowerer; print(PC.code_fingerprint())"
  outs = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": s}, capture_output=True, text=True, check=True).stdout
          for s in ("1", "2")}
  assert len(outs) == 1

@pytest.mark.parametrize("planted", [False, True])
def test_a_capture_sees_a_hit_as_the_rendering_it_stands_for(cache, monkeypatch, planted):
  """Capturing never changes what the cache does (a test of the cache passes under pytest --replay-capture): a hit is
  served from disk and reported to the capture exactly as to_program reports a rendering (planted: a hit not reported)."""
  if planted: monkeypatch.setattr(PC, "report_program", lambda *a: None)
  ast = _ast(Tensor.empty(512) * 3)
  calls: list[tuple] = []
  def hook(level, inp, out, extra): calls.append((level, inp, out, extra["program"], extra["opts_given"]))
  with monkeypatch.context() as m:
    m.setattr(capture_hook, "HOOK", hook)
    rendered = PC.cached_program(ast, None, GENERIC_GPU)  # a miss: to_program renders and reports it
    _no_render(m)
    assert PC.cached_program(ast, None, GENERIC_GPU) == rendered  # a hit, under capture too
  if planted: assert len(calls) == 1
  else: assert len(calls) == 2 and calls[0] == calls[1] and calls[0][0] == "program" and calls[0][1] == (ast, rendered.opts, GENERIC_GPU)

def test_a_broken_entry_is_rendered_again_and_rewritten(cache):
  ast = _ast(Tensor.empty(300) + 2)
  want = PC.cached_program(ast, None, GENERIC_GPU)
  (entry,) = cache.glob("*.json")
  for junk in ("", "{not json", '{"name": 1}',
               '{"name": "x", "src": "", "global": [1], "local": null, "dtypes": ["nosuch"], "outs": [], "opts": [], "local_mem": 0}'):
    entry.write_text(junk)
    assert PC.cached_program(ast, None, GENERIC_GPU) == want
  assert PC._decode(entry.read_text()) == want

def test_symbolic_launches_are_not_stored(cache):
  ast = _ast(Tensor.empty(64)[:Variable("n", 1, 64).bind(7)] + 1)
  p = PC.cached_program(ast, None, GENERIC_GPU)
  assert p.vars and p == to_program(ast, None, GENERIC_GPU)
  assert not cache.exists() or not list(cache.glob("*.json"))

def test_off_unless_asked(cache, monkeypatch):
  monkeypatch.delenv("TINYSCHED_PROGRAM_CACHE")
  PC.cached_program(_ast(Tensor.empty(128) - 1), None, GENERIC_GPU)
  assert not cache.exists()

def test_a_rule_search_sees_the_rules_a_cached_program_hides(cache, monkeypatch):
  # a warm entry answered rules_off and rewrite_limit with a program no rule made: the cause search and blame found no
  # rule of code generation under the main job's cache (scripts/replay.sh turns it on). Plant: the bypass turned off
  from tinysched import rewrite as RW
  ast = _ast((Tensor.empty(16, 16) + 0).exp())
  want = PC.cached_program(ast, None, GENERIC_GPU)  # (written: the cache is warm)
  prev, RW.FIRED = RW.FIRED, []
  try:
    PC.cached_program(ast, None, GENERIC_GPU)
    fired = list(dict.fromkeys(n for n, _ in RW.FIRED))
  finally: RW.FIRED = prev
  assert fired
  def seen() -> list[bool]:  # per rule: does turning it off change the program (or break the lowering)?
    out = []
    for rule in fired:
      with RW.rules_off([rule]):
        try: out.append(PC.cached_program(ast, None, GENERIC_GPU).src != want.src)
        except Exception: out.append(True)  # noqa: BLE001 (a rule the lowering needs)
    return out
  assert all(seen())
  monkeypatch.setattr(PC, "watched", lambda: False)
  assert not any(seen())
