"""Issue 37, item 5: the memo sees every patch. The Tensor front end's kernel memo (schedule.py `tensor_memo`) is kept
across schedules and checked against `kernel_ast.rules_fingerprint()`, which must change with any function, method,
matcher or class of any module the memoized work runs (the helpers of shape, symbolic, uop, dtype... included), and
the results memoized outside the memo (the view algebra's tables) must be dropped with it. The program cache's key
(codegen/program_cache.py `code_fingerprint`) must follow a patch made after its first use. Each check has its plant."""
import ast, functools, importlib, sys, types
from pathlib import Path
import pytest
from tinysched import Tensor
import tinysched.schedule as S
from tinysched import shape as SH
from tinysched.helpers import GlobalCounters
from tinysched.scheduling import kernel_ast as KA
from tinysched.scheduling.kernel_ast import rules_fingerprint, same_rules

ROOT = Path(KA.__file__).resolve().parent.parent  # the tinysched package

def _files_modules() -> list[str]:
  # the package's modules by its files, found here independently of kernel_ast.package_modules
  out = []
  for p in sorted(ROOT.rglob("*.py")):
    parts = p.relative_to(ROOT.parent).with_suffix("").parts
    out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
  return out

# the modules that must be read: every module of the package but those kernel_ast.NOT_READ leaves out, with its reason
READ = [m for m in _files_modules() if not KA.not_read(m)]
for _m in READ: importlib.import_module(_m)  # (all of them load at a first schedule anyway)

# *** the list of modules read can't rot ***

def check_every_module_is_read_or_left_out() -> None:
  mods = _files_modules()
  read = set(KA.rule_modules())
  neither = [m for m in mods if m not in read and not KA.not_read(m)]
  both = [m for m in mods if m in read and KA.not_read(m)]
  assert not neither, f"tinysched modules neither read by rules_fingerprint nor in kernel_ast.NOT_READ (with the reason): {neither}"
  assert not both, both
  stale = [k for k in KA.NOT_READ if not any(m == k or (k.endswith(".*") and (m == k[:-2] or m.startswith(k[:-1]))) for m in mods)]
  assert not stale, f"kernel_ast.NOT_READ names no module of the package: {stale}"

def test_every_module_is_read_or_left_out(): check_every_module_is_read_or_left_out()

def test_plant_a_hand_kept_module_list(monkeypatch):
  # a hand-kept list, as before issue 37: the helpers of shape, uop, dtype... and any module added to the package left out
  monkeypatch.setattr(KA, "_RULE_MODULES", ["tinysched.scheduling.kernel_ast", "tinysched.scheduling.bigraph", "tinysched.schedule"])
  with pytest.raises(AssertionError): check_every_module_is_read_or_left_out()

def test_the_shape_symbolic_uop_dtype_and_helpers_modules_are_read():
  assert {"tinysched.shape", "tinysched.symbolic", "tinysched.uop", "tinysched.dtype", "tinysched.helpers", "tinysched.ops", "tinysched.rewrite",
          "tinysched.lazy", "tinysched.schedule", "tinysched.codegen.lowerer", "tinysched.codegen.kernel"} <= set(READ)

# which tinysched module each import statement of a module names (deferred imports included): `from pkg import sub` names sub
def _imports_of(name: str) -> list[tuple[int, str]]:
  p = ROOT.parent.joinpath(*name.split("."))
  p = p / "__init__.py" if p.is_dir() else p.with_suffix(".py")
  mods, out = set(_files_modules()), []
  for node in ast.walk(ast.parse(p.read_text())):
    if isinstance(node, ast.Import): out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "tinysched"]
    elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tinysched":
      out += [(node.lineno, f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else str(node.module)) for a in node.names]
  return out

# a module read may import one left out only for what never changes an AST: the capture slot (its hook only records)
MAY_IMPORT = {("tinysched.schedule", "tinysched.capture_hook")}

def check_no_module_read_imports_one_left_out(read: list[str]) -> None:
  bad = [f"{m}:{line} imports {t}" for m in read for line, t in _imports_of(m) if KA.not_read(t) and (m, t) not in MAY_IMPORT]
  assert not bad, "a module rules_fingerprint reads imports one kernel_ast.NOT_READ leaves out (read it, or say why not):\n" + "\n".join(bad)

def test_no_module_read_imports_one_left_out(): check_no_module_read_imports_one_left_out(READ)

def test_plant_the_renderer_on_the_path(monkeypatch):
  # a read module importing a module left out (as if the scheduler asked the renderer) is found
  monkeypatch.setattr(sys.modules[__name__], "_imports_of", lambda m: [(1, "tinysched.codegen.opencl")] if m == "tinysched.schedule" else [])
  with pytest.raises(AssertionError): check_no_module_read_imports_one_left_out(READ)

def test_the_fingerprint_reads_every_module_and_the_classes_defined_in_it():
  owners = KA._rule_owners()[0]
  ids = {id(o) for o in owners}
  for name in READ:
    mod = sys.modules[name]
    assert id(mod) in ids, name
    for k, v in vars(mod).items():
      if isinstance(v, type) and v.__module__ == name: assert id(v) in ids, f"{name}.{k}"

# *** a patch of any helper of any module read is never answered from the memo ***

def _passthrough(f):
  @functools.wraps(f)
  def patched(*a, **k): return f(*a, **k)
  return patched

def _own_function(mod) -> str | None:
  own = (k for k, v in vars(mod).items() if isinstance(v, types.FunctionType) and v.__module__ == mod.__name__ and not k.startswith("__"))
  return next(own, None)

def _own_method(mod) -> tuple[str, str] | None:
  for cname, cls in vars(mod).items():
    if not (isinstance(cls, type) and cls.__module__ == mod.__name__): continue
    if (k := next((k for k, v in vars(cls).items() if isinstance(v, types.FunctionType) and not k.startswith("__")), None)) is not None:
      return cname, k
  return None

def _patches() -> list:
  out = []
  for name in READ:
    mod = sys.modules[name]
    if (f := _own_function(mod)) is not None: out.append(pytest.param(name, None, f, id=f"{name}.{f}"))
    if (m := _own_method(mod)) is not None: out.append(pytest.param(name, m[0], m[1], id=f"{name}.{m[0]}.{m[1]}"))
  return out

PATCHES = _patches()

def test_every_module_read_has_a_helper_patched_below():
  # a module of no function or class of its own has nothing to patch (a package's __init__ with a docstring)
  patched = {p.values[0] for p in PATCHES}
  assert all(m in patched or (_own_function(sys.modules[m]) is None and _own_method(sys.modules[m]) is None) for m in READ)
  assert {"tinysched.shape", "tinysched.symbolic", "tinysched.uop", "tinysched.dtype", "tinysched.helpers"} <= patched
  assert sum(p.values[1] is not None for p in PATCHES) >= 15  # methods of classes, not only module functions

def _graph() -> Tensor:
  a = Tensor.ones(4, 6).contiguous()
  return ((a + 1).permute(1, 0).reshape(3, 8) * 2).sum(1)

def _asts() -> list: return [si.ast for si in _graph().schedule()]

def check_a_patch_is_never_answered_from_the_memo(monkeypatch, module: str, cls: str | None, name: str) -> None:
  first = _asts()
  assert _asts() == first and (memo := S.tensor_memo()).size()  # the memo is warm
  owner = sys.modules[module] if cls is None else getattr(sys.modules[module], cls)
  monkeypatch.setattr(owner, name, _passthrough(vars(owner)[name]))
  fresh = S.tensor_memo()
  assert fresh is not memo and fresh.size() == 0, f"the memo filled before {module}.{cls or ''}{'.' if cls else ''}{name} was patched is served"
  assert _asts() == first and S.tensor_memo() is fresh and fresh.size()  # rewritten by the patched code (it passes through)

@pytest.mark.parametrize("module, cls, name", PATCHES)
def test_a_patched_helper_is_never_answered_from_the_memo(monkeypatch, module, cls, name):
  check_a_patch_is_never_answered_from_the_memo(monkeypatch, module, cls, name)

@pytest.mark.parametrize("module", ["tinysched.shape", "tinysched.symbolic", "tinysched.uop", "tinysched.dtype", "tinysched.lazy"])
def test_plant_a_module_not_read(monkeypatch, module):
  monkeypatch.setattr(KA, "_RULE_MODULES", [m for m in KA.rule_modules() if m != module])
  p = next(p for p in PATCHES if p.values[0] == module)
  with pytest.raises(AssertionError, match="is served"): check_a_patch_is_never_answered_from_the_memo(monkeypatch, *p.values)

def test_plant_a_class_not_read(monkeypatch):
  # the module read, not the classes defined in it (View's methods)
  owners = KA._rule_owners
  monkeypatch.setattr(KA, "_rule_owners", lambda: ([o for o in owners()[0] if not isinstance(o, type)], []))
  with pytest.raises(AssertionError, match="is served"):
    check_a_patch_is_never_answered_from_the_memo(monkeypatch, "tinysched.shape", "View", "minify")

# *** results memoized outside the memo: the view algebra's tables ***

def check_a_patched_view_helper_is_what_the_next_schedule_runs(monkeypatch) -> None:
  before = _asts()
  assert _asts() == before
  monkeypatch.setattr(SH, "_compose", lambda vm2, vm1: None)  # views no longer merge
  got = _asts()  # through the tensor memo
  SH.clear_caches()
  big = S.build_big_graph([_graph().lazydata.base])
  want = [k.ast for k in S.schedule_graph(big.sink, big.var_vals, memo=S.KernelMemo())[0]]  # the patched code from scratch
  assert want != before and got == want

def test_a_patched_view_helper_is_what_the_next_schedule_runs(monkeypatch): check_a_patched_view_helper_is_what_the_next_schedule_runs(monkeypatch)

def test_plant_view_tables_kept_after_a_patch(monkeypatch):
  monkeypatch.setattr(KA, "_forget_derived", lambda: None)
  with pytest.raises(AssertionError): check_a_patched_view_helper_is_what_the_next_schedule_runs(monkeypatch)

def test_the_lowerers_index_table_is_dropped_with_a_rule_change(monkeypatch):
  from tinysched.codegen import lowerer
  from tinysched import Variable, symbolic
  rules_fingerprint()
  lowerer.wide(Variable("n", 1, 10) * 3)
  assert lowerer._WIDE_CACHE
  name = _own_function(symbolic)
  monkeypatch.setattr(symbolic, name, _passthrough(vars(symbolic)[name]))  # (the table, simplified by symbolic's rules, keys on none)
  rules_fingerprint()
  assert not lowerer._WIDE_CACHE

# *** state that changes is no rule change, and hides none ***

def test_counters_keep_the_fingerprint_and_a_patch_beside_them_is_seen(monkeypatch):
  fp = rules_fingerprint()
  for _ in range(3):  # what every realize does: GlobalCounters' counts move (a class read, since helpers.py is)
    monkeypatch.setattr(GlobalCounters, "kernel_count", GlobalCounters.kernel_count + 1)
    assert rules_fingerprint() is fp
  monkeypatch.setattr(GlobalCounters, "reset", classmethod(_passthrough(GlobalCounters.reset.__func__)))
  assert not same_rules(rules_fingerprint(), fp)
  monkeypatch.undo()
  assert same_rules(rules_fingerprint(), fp)

def test_counters_that_keep_moving_cost_no_full_read(monkeypatch):
  # (not a timing: whether the namespaces are read afresh, which costs ~0.5 ms instead of ~20 us)
  fp = rules_fingerprint()
  for _ in range(2): monkeypatch.setattr(GlobalCounters, "kernel_count", GlobalCounters.kernel_count + 1); rules_fingerprint()  # noqa: E702
  read = KA._READS.last
  for _ in range(3):
    monkeypatch.setattr(GlobalCounters, "kernel_count", GlobalCounters.kernel_count + 1)
    assert rules_fingerprint() is fp and KA._READS.last is read

def test_a_module_loaded_later_is_read_from_then_on(monkeypatch):
  name = "tinysched._memo_probe"
  monkeypatch.setattr(KA, "_RULE_MODULES", KA.rule_modules() + [name])
  fp = rules_fingerprint()
  assert name in KA._READS.missing and rules_fingerprint() is fp
  mod = types.ModuleType(name)
  mod.helper = lambda: None  # type: ignore[attr-defined]
  monkeypatch.setitem(sys.modules, name, mod)
  loaded = rules_fingerprint()
  assert not same_rules(loaded, fp) and mod.helper in loaded
  monkeypatch.setattr(mod, "helper", lambda: 1)
  assert not same_rules(rules_fingerprint(), loaded)

# *** the program cache's key follows a patch made after its first use ***

@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  monkeypatch.setenv("TINYSCHED_PROGRAM_CACHE", "1")
  return tmp_path / "programs"

def check_a_cached_program_follows_a_patch_after_the_first_use(monkeypatch) -> None:
  import tinysched.codegen.program_cache as PC
  from tinysched.codegen import program as P
  from tinysched.codegen.target import GENERIC_GPU
  from tinysched.ops import Ops
  ast = next(si.ast for si in (Tensor.empty(96) * 5 + 1).schedule() if si.ast.op is Ops.SINK)
  plain = PC.cached_program(ast, None, GENERIC_GPU)  # rendered and written (the modules rendering loads are loaded now)
  PC._TAKEN.clear()  # the key taken afresh over them: the one a process rendering this kernel holds from its first use
  key = PC.code_fingerprint()
  assert PC.cached_program(ast, None, GENERIC_GPU) == plain
  with monkeypatch.context() as m:
    orig = P.render
    m.setattr(P, "render", lambda lw, target: orig(lw, target) + "\n// patched")
    assert PC.code_fingerprint() != key
    assert PC.cached_program(ast, None, GENERIC_GPU).src.endswith("// patched"), "the entry rendered before the patch is served"
  assert PC.code_fingerprint() == key and PC.cached_program(ast, None, GENERIC_GPU) == plain  # undone: the first entry again
  with monkeypatch.context() as m:
    m.setattr(GlobalCounters, "kernel_count", GlobalCounters.kernel_count + 1)  # state, no code: the same key
    assert PC.code_fingerprint() == key

def test_a_cached_program_follows_a_patch_after_the_first_use(cache, monkeypatch):
  check_a_cached_program_follows_a_patch_after_the_first_use(monkeypatch)

def test_plant_the_program_key_taken_once(cache, monkeypatch):
  import hashlib
  import tinysched.codegen.program_cache as PC
  once = functools.lru_cache(maxsize=1)(lambda: hashlib.sha256((PC._files_fingerprint() + PC.live_digest()).encode()).hexdigest())
  monkeypatch.setattr(PC, "code_fingerprint", once)
  with pytest.raises(AssertionError): check_a_cached_program_follows_a_patch_after_the_first_use(monkeypatch)
