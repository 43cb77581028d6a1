"""The course's foundation: device selection, pinned environment, doctor, reference and check harness."""
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import torch

import softmax_lab
import triton  # after softmax_lab: it picks the device first
import triton.language as tl
from softmax_lab import doctor, reference, testing

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    # A real file, not `python -c`: compiling a @triton.jit kernel for the GPU needs its source on disk.
    full_env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "SOFTMAX_LAB_DEVICE")}
    full_env.update(env)
    script = tmp_path / "snippet.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=full_env, timeout=120)


# --- device selection -------------------------------------------------------------------------------

def test_import_selects_device_and_describes_it():
    assert softmax_lab.DEVICE.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert softmax_lab.WHERE == softmax_lab.describe()
    if not softmax_lab.ON_GPU:
        assert os.environ["TRITON_INTERPRET"] == "1"
        assert softmax_lab.WHERE.startswith("CPU via Triton interpreter")


def test_a_kernel_defined_after_import_runs_without_manual_env(tmp_path):
    # What a learner does in a notebook: import softmax_lab, then write a kernel in a later cell.
    proc = run_python("""
        import softmax_lab, torch, triton, triton.language as tl

        @triton.jit
        def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

        x = torch.arange(5.0, device=softmax_lab.DEVICE)
        y = torch.full_like(x, float("nan"))
        double[(1,)](x, y, 5, BLOCK=8)
        print(y.cpu().tolist(), softmax_lab.DEVICE.type)
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("]")[0] + "]" == "[0.0, 2.0, 4.0, 6.0, 8.0]"


def test_cpu_can_be_forced(tmp_path):
    proc = run_python("import os, softmax_lab; print(softmax_lab.DEVICE.type, os.environ.get('TRITON_INTERPRET'))",
                      tmp_path, SOFTMAX_LAB_DEVICE="cpu")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["cpu", "1"]


def test_code_folder_is_not_a_package():
    # The stdlib has a module named `code` that IPython imports at start-up.
    assert not (ROOT / "code" / "__init__.py").exists()
    import code as stdlib_code

    assert hasattr(stdlib_code, "InteractiveConsole")


# --- pinned environment -----------------------------------------------------------------------------

def _pins_from_pyproject() -> dict:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = data["project"]["dependencies"] + data["project"]["optional-dependencies"]["test"]
    return dict(r.split("==") for r in reqs)


def _pins_from_environment_yml() -> dict:
    pins = re.findall(r"^\s*-\s*([A-Za-z0-9_.\-]+)==([^\s#]+)\s*$", (ROOT / "environment.yml").read_text(), re.M)
    return dict(pins)


def test_installed_versions_match_the_pins():
    from importlib import metadata

    pins = _pins_from_pyproject()
    for name in ("triton", "numpy", "nbval", "ipywidgets", "jupyterlab"):
        if softmax_lab.ON_GPU and name != "triton":
            continue  # GPU machines keep their own image
        assert metadata.version(name) == pins[name], name


def test_ci_runs_only_what_the_readme_shows():
    # tests/test_install.py checks the pip settings .ci/run switches off; here: nothing but `make test` runs.
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    commands = [l.strip() for l in ci.splitlines() if l.strip() and not l.startswith("#")
                and not l.startswith(("set ", "cd ", "export PIP_", "unset PIP_"))]
    assert commands == ["make test"]
    assert "make test" in readme and "make lab" in readme


# --- doctor -------------------------------------------------------------------------------------------

def test_doctor_passes_here(capsys):
    assert softmax_lab.doctor() is True
    out = capsys.readouterr().out
    assert "a tiny Triton kernel ran" in out and "All checks passed." in out
    assert "`softmax-lab check` graded a tiny notebook: 1/1 points" in out  # the learner's command, run for real


def test_doctor_names_the_numpy_fix(monkeypatch):
    if softmax_lab.ON_GPU:
        pytest.skip("numpy check applies to the interpreter only")
    import numpy

    monkeypatch.setattr(numpy, "__version__", "2.4.0")
    bad = [f for f in doctor.check_versions() if f.level == "FAIL"]
    assert bad and 'numpy<2.4' in bad[0].fix


def test_doctor_names_a_torch_triton_mismatch(monkeypatch):
    monkeypatch.setattr(doctor.metadata, "requires", lambda name: ["triton==9.9.9; platform_system == 'Linux'"])
    bad = [f for f in doctor.check_versions() if f.level == "FAIL"]
    assert bad and "triton==9.9.9" in bad[0].fix


def test_doctor_names_a_missing_kernel_registration(monkeypatch):
    from jupyter_client import kernelspec

    monkeypatch.setattr(kernelspec.KernelSpecManager, "find_kernel_specs", lambda self: {})
    (finding,) = doctor.check_kernel_registered()
    assert finding.level == "FAIL" and "ipykernel install" in finding.fix


def test_doctor_reports_a_kernel_that_stores_nothing(monkeypatch):
    class NoOp:
        def __getitem__(self, grid):
            return lambda *args, **kw: None

    monkeypatch.setattr(doctor, "_row_max_kernel", NoOp())
    (finding,) = doctor.check_tiny_kernel()
    assert finding.level == "FAIL" and "stored nothing" in finding.what


def test_doctor_reports_the_numpy_interpreter_error(monkeypatch):
    class Broken:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                raise TypeError("only 0-dimensional arrays can be converted to Python scalars")
            return launch

    monkeypatch.setattr(doctor, "_row_max_kernel", Broken())
    (finding,) = doctor.check_tiny_kernel()
    assert finding.level == "FAIL" and "numpy<2.4" in finding.fix


def test_doctor_cli_exit_code():
    proc = subprocess.run([sys.executable, "-m", "softmax_lab.cli", "doctor"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    help_ = subprocess.run([sys.executable, "-m", "softmax_lab.cli", "--help"], capture_output=True, text=True)
    for cmd in ("doctor", "build", "grade", "check", "bench"):
        assert cmd in help_.stdout
    bad = subprocess.run([sys.executable, "-m", "softmax_lab.cli", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown command" in bad.stderr


# --- interpreter traps the course teaches ---------------------------------------------------------------


@triton.jit
def _load_without_other(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)  # no other=: masked lanes are undefined (0 in the interpreter)
    tl.store(y_ptr, tl.max(x, axis=0))


@triton.jit
def _exp_fp16(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.exp(tl.load(x_ptr + offs)))


def test_trap_masked_load_without_other_pads_with_zero_in_the_interpreter():
    if softmax_lab.ON_GPU:
        pytest.skip("on a GPU the masked lanes are undefined rather than 0")
    x = torch.tensor([-3.0, -2.0, -1.0])
    y = torch.full((1,), float("nan"))
    _load_without_other[(1,)](x, y, 3, BLOCK=4)
    assert y.item() == 0.0  # the wrong max: a 0 from the padding lane beat every real value


def test_trap_fp16_exp_is_rejected_so_kernels_must_cast_to_fp32():
    # Older Triton interpreters ran tl.exp on fp16 and only the GPU compiler refused it; the pinned 3.6.0
    # refuses it in both places, so a learner's missing `.to(tl.float32)` shows up on a laptop too.
    x = torch.zeros(16, dtype=torch.float16, device=softmax_lab.DEVICE)
    y = torch.empty_like(x)
    with pytest.raises(Exception, match="fp32"):
        _exp_fp16[(1,)](x, y, BLOCK=16)


# --- reference and harness ------------------------------------------------------------------------------

def test_reference_trace_and_teaching_variants():
    x = torch.tensor([[1000.0, 1001.0, 1002.0]])
    assert [round(v, 4) for v in reference.softmax_ref(x)[0].tolist()] == [0.09, 0.2447, 0.6652]
    assert torch.isnan(reference.softmax_unstable(x)).all()  # exp(1000) = inf in fp32
    small = torch.tensor([[2.0, 1.0, 0.0]])
    scaled = reference.softmax_shift_denominator_only(small) / reference.softmax_ref(small).float()
    torch.testing.assert_close(scaled, torch.full_like(scaled, float(torch.exp(torch.tensor(2.0)))))


def test_masked_reference_gives_zeros_for_fully_masked_rows():
    s = torch.randn(2, 4)
    mask = torch.tensor([[True, True, False, False], [False] * 4])
    y = reference.masked_softmax_ref(s, mask)
    assert torch.equal(y[1], torch.zeros(4, dtype=torch.float64))
    torch.testing.assert_close(y[0, :2], reference.softmax_ref(s[0, :2]))


def test_cases_cover_the_seed_shapes_and_pitfalls():
    names = [c.name for c in testing.cases(seed=0)]
    for shape in ["1x1", "2x31", "3x32", "4x33", "2x255", "3x257"]:
        assert f"random {shape}" in names
    assert any("all-negative" in n for n in names) and any("1000, 1001, 1002" in n for n in names)
    strided = [c.x for c in testing.cases(seed=0) if "strided" in c.name][0]
    assert not strided.is_contiguous() and strided.stride(0) == 1100


def test_fresh_inputs_differ_and_seeded_inputs_repeat():
    assert not torch.equal(testing.randn((4, 4)), testing.randn((4, 4)))
    assert torch.equal(testing.randn((4, 4), seed=3), testing.randn((4, 4), seed=3))


def _torch_kernel(x, out=None):
    y = torch.softmax(x.float(), dim=-1).to(x.dtype)
    return y if out is None else out.copy_(y)


def _stores_nothing(x, out=None):
    return out


def _zero_padding(x, out=None):
    # The classic bug: rows padded with 0 to a block of 4 before the max; only matters for all-negative rows.
    n = x.shape[-1]
    padded = torch.cat([x.float(), torch.zeros(x.shape[0], (-n) % 4, dtype=torch.float32, device=x.device)], dim=-1)
    m = padded.amax(-1, keepdim=True)
    e = torch.exp(x.float() - m)
    return out.copy_((e / e.sum(-1, keepdim=True)).to(x.dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_harness_accepts_a_correct_softmax(dtype):
    testing.assert_softmax_correct(_torch_kernel, dtype)


def test_harness_catches_a_kernel_that_stores_nothing():
    msg = testing.check_softmax(_stores_nothing, testing.randn((2, 31)))
    assert "NaN" in msg and "not stored" in msg


def test_harness_catches_zero_padding_on_all_negative_rows():
    results = testing.run_cases(_zero_padding)
    failed = [r for r in results if not r.ok]
    assert any("all-negative" in r.name and "-inf" in r.message for r in failed), results


def test_tolerance_rejects_integer_dtypes():
    with pytest.raises(TypeError, match="float16, bfloat16, float32"):
        testing.tolerance(torch.int32)
