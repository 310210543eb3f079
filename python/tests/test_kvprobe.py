"""The Python package against the engine: the numpy KV cache is the C cache, numpy edits equal
the engine's splice, logits equal the CLI's, errors are exceptions, memory is not leaked.
Run by `make test` (python/run_tests.sh); needs the bundled models (make models)."""
import importlib.metadata
import os
import subprocess

import numpy as np
import pytest

import kvprobe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
QWEN = os.path.join(ROOT, "models", "qwen2.5-coder-0.5b-instruct.gguf")
CLI = os.environ.get("KVPROBE", os.path.join(ROOT, "build", "kvprobe"))
DATA = os.environ.get("KVPROBE_DATA", os.path.join(ROOT, "..", "shared", "datasets"))
QUESTION = "Which planet is known as the Red Planet?"


@pytest.fixture(scope="module")
def smol():
    m = kvprobe.Model(SMOL, threads=2)
    yield m
    m.close()


def test_version_from_one_place():
    assert kvprobe.__version__ == importlib.metadata.version("kvprobe")
    out = subprocess.run([CLI, "--version"], capture_output=True, text=True).stdout
    assert kvprobe.__version__ in out


def test_model_metadata(smol):
    assert smol.architecture == "llama" and smol.n_layers == 30 and smol.n_kv_heads == 3 and smol.head_dim == 64
    assert smol.chat_template == "chatml" and smol.n_vocab == 49152
    q = kvprobe.Model(QWEN, threads=1)
    assert (q.architecture, q.n_layers, q.n_heads, q.n_kv_heads, q.chat_template) == ("qwen2", 24, 14, 2, "qwen2.5")
    q.close()


def test_tokenize_matches_cli_and_labels_segments(smol):
    t = smol.tokenize(QUESTION, chat=True)
    cli = subprocess.run([CLI, "tokenize", "-m", SMOL, "--chat", "--ids", QUESTION], capture_output=True, text=True,
                         check=True).stdout.split()
    assert t.ids.tolist() == [int(x) for x in cli]
    assert set(t.segments) == {"scaffold", "user"} and t.segments[0] == "scaffold"
    user = smol.detokenize([i for i, s in zip(t.ids, t.segments) if s == "user"])
    assert user == QUESTION
    s = smol.tokenize(QUESTION, system="Answer briefly.")
    assert "system" in s.segments and len(s) > len(t) - 20


def test_logits_equal_the_cli(smol, tmp_path):
    ids = smol.tokenize(QUESTION, chat=True).ids
    n = 6
    path = tmp_path / "l.bin"
    out = subprocess.run([CLI, "generate", "-m", SMOL, "--tokens", ",".join(map(str, ids)), "-n", str(n), "--ids",
                          "--ignore-eog", "--precision", "q8x2", "-t", "2", "--logits", str(path)],
                         capture_output=True, text=True, check=True).stdout.split()
    cli = np.fromfile(path, dtype=np.float32).reshape(n, smol.n_vocab)
    kv = smol.prefill(ids)
    # the CLI's step 0 logits follow the whole prompt: recompute them as the last prompt token
    kv.truncate(len(ids) - 1)
    got, x = [], ids[-1]
    for _ in range(n):
        lg = smol.decode(kv, [x], all_logits=False)
        got.append(lg)
        x = int(np.argmax(lg))
    got = np.stack(got)
    assert [int(np.argmax(r)) for r in got] == [int(t) for t in out]
    np.testing.assert_array_equal(got, cli)  # same engine, same precision: the same bits


def test_numpy_kv_is_the_cache(smol):
    ids = smol.tokenize(QUESTION, chat=True).ids
    kv = smol.prefill(ids[:-1])
    assert len(kv) == len(ids) - 1 and kv.k(0).shape == (len(ids) - 1, 3, 64) and kv.v(29).dtype == np.float32
    assert np.array_equal(kv.K[7], kv.k(7)) and np.array_equal(kv.V[7], kv.v(7))
    # K/V are what attention reads: writing them back unchanged leaves the logits bit-identical,
    # writing other values moves them
    ref = smol.decode(kv.fork(), ids[-1:], all_logits=False)
    a = kv.fork()
    for l in range(smol.n_layers):
        a.set_k(l, a.k(l))
        a.V[l] = a.v(l)
    np.testing.assert_array_equal(smol.decode(a, ids[-1:], all_logits=False), ref)
    b = kv.fork()
    b.set_k(10, b.k(10) * 2.0)
    assert np.abs(smol.decode(b, ids[-1:], all_logits=False) - ref).max() > 1e-3
    # keys are post-RoPE: the same token at two positions gets different keys
    c = smol.prefill([ids[0], ids[0]])
    k0 = c.k(3)
    assert not np.allclose(k0[0], k0[1])


@pytest.mark.parametrize("cond", ["zero", "blank"])
def test_numpy_splice_equals_engine_splice(smol, cond):
    p = smol.tokenize(QUESTION, chat=True)
    n, L = len(p), 15
    base = smol.prefill(p.ids[:-1], n_ctx=n + 8)
    donor = None
    if cond == "blank":  # the BLANK donor: user tokens replaced by filler, same length
        filler = smol.tokenize("This is a neutral placeholder text with nothing in particular to say. ").ids
        d_ids = p.ids.copy()
        user = [i for i, s in enumerate(p.segments) if s == "user"]
        for k, i in enumerate(user):
            d_ids[i] = filler[k % len(filler)]
        donor = smol.prefill(d_ids[:-1], n_ctx=n + 8)
    engine = base.fork()
    engine.splice(cond, layer_from=L, n_prompt=n, segments=p, donor=donor)
    hand = base.fork()
    for l in range(L, smol.n_layers):  # span: every prompt position but the last token
        if cond == "zero":
            hand.set_k(l, np.zeros((n - 1, 3, 64), np.float32))
            hand.set_v(l, np.zeros((n - 1, 3, 64), np.float32))
        else:
            hand.set_k(l, donor.k(l))
            hand.set_v(l, donor.v(l))
    for l in range(smol.n_layers):
        np.testing.assert_array_equal(engine.k(l), hand.k(l))
        np.testing.assert_array_equal(engine.v(l), hand.v(l))
    a = smol.decode(engine, p.ids[-1:], all_logits=False)
    np.testing.assert_array_equal(a, smol.decode(hand, p.ids[-1:], all_logits=False))
    assert np.abs(a - smol.decode(base.fork(), p.ids[-1:], all_logits=False)).max() > 1e-3


def test_drop_and_evict(smol):
    p = smol.tokenize(QUESTION, chat=True)
    kv = smol.prefill(p.ids[:-1])
    a = kv.fork()
    a.splice("drop-content", layer_from=0, n_prompt=len(p), segments=p)
    user = [i for i, s in enumerate(p.segments[:-1]) if s == "user"]
    assert not a.holds(0, user[0]) and a.holds(0, 0)
    with pytest.raises(kvprobe.KvprobeError):
        a.k(0)  # evicted positions cannot be read
    b = kv.fork()
    b.evict(range(smol.n_layers), user)
    np.testing.assert_array_equal(smol.decode(a, p.ids[-1:], all_logits=False), smol.decode(b, p.ids[-1:], all_logits=False))


def test_generate(smol):
    assert "Mars" in smol.generate(QUESTION, max_new_tokens=16)


def test_errors_are_exceptions(smol, tmp_path):
    with pytest.raises(kvprobe.KvprobeError) as e:
        kvprobe.Model(str(tmp_path / "missing.gguf"))
    assert "missing.gguf" in str(e.value)
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(open(SMOL, "rb").read(4096))  # a truncated file
    with pytest.raises(kvprobe.KvprobeError) as e:
        kvprobe.Model(str(bad))
    assert e.value.code == 2 and "cut.gguf" in str(e.value)
    hostile = tmp_path / "hostile.gguf"
    hostile.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (2 ** 62).to_bytes(8, "little") + bytes(8))
    with pytest.raises(kvprobe.KvprobeError):
        kvprobe.Model(str(hostile))
    kv = smol.prefill([1, 2, 3])
    with pytest.raises(IndexError):
        kv.k(30)
    with pytest.raises(IndexError):
        kv.splice("zero", layer_from=31, n_prompt=3)
    with pytest.raises(ValueError):
        kv.set_k(0, np.zeros((3, 3, 32), np.float32))  # wrong head_dim
    with pytest.raises(TypeError):
        kv.set_k(0, np.zeros((3, 3, 64), np.int32))  # wrong dtype
    with pytest.raises(ValueError):
        kv.set_k(0, np.zeros((9, 3, 64), np.float32))  # past the cache
    with pytest.raises(ValueError):
        kv.splice("sideways", layer_from=0, n_prompt=3)
    with pytest.raises(kvprobe.KvprobeError):
        kv.splice("blank", layer_from=0, n_prompt=3)  # needs a donor
    with pytest.raises(ValueError):
        smol.decode(kv, [smol.n_vocab])  # token out of range
    with pytest.raises(ValueError):
        smol.decode(smol.new_cache(2), [1, 2, 3])  # does not fit
    with pytest.raises(kvprobe.KvprobeError) as e:
        kvprobe.Model(SMOL, precision="fp7")
    assert "fp7" in str(e.value)


def _rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_fork_free_does_not_leak(smol):
    kv = smol.prefill(smol.tokenize(QUESTION, chat=True).ids)
    for _ in range(50):  # warm up allocator pools
        f = kv.fork()
        f.close()
    before = _rss_kib()
    for _ in range(1000):
        f = kv.fork()
        f.set_k(0, f.k(0))
        del f
    grown = _rss_kib() - before
    # one fork holds kv.nbytes (~25 MB); 1,000 leaked forks would be ~25 GB
    assert grown < kv.nbytes / 1024, f"RSS grew by {grown} KiB over 1,000 fork/free cycles"


def test_sweep_records_and_dataframe(tmp_path):
    out = tmp_path / "sw"
    recs = kvprobe.sweep(SMOL, "sst2:2", out=str(out), conditions=["clean", "zero"], layers=[20], steps=[0],
                         max_new_tokens=4, threads=2, margins=True, data_dir=DATA)
    assert len(recs) == 2 * 2 and {r["condition"] for r in recs} == {"clean", "zero"}
    assert all(len(r["margins"]) == r["decode_steps"] for r in recs)
    again = kvprobe.sweep(SMOL, "sst2:2", out=str(out), conditions=["clean", "zero"], layers=[20], steps=[0],
                          max_new_tokens=4, threads=2, margins=True, data_dir=DATA)
    assert [r["tokens"] for r in again] == [r["tokens"] for r in recs]  # resumed: nothing new
    with pytest.raises(kvprobe.KvprobeError):
        kvprobe.sweep(SMOL, "sst2:2", out=str(tmp_path / "x"), conditions=["sideways"], data_dir=DATA)
    with pytest.raises(kvprobe.KvprobeError):
        kvprobe.sweep(SMOL, "sst2:2", out=str(tmp_path / "y"), bogus_option=1, data_dir=DATA)
    pd = pytest.importorskip("pandas")
    df = kvprobe.load_records(str(out), as_dataframe=True)
    assert isinstance(df, pd.DataFrame) and len(df) == 4


def test_example_reproduces_a_heatmap_cell():
    r = subprocess.run([os.sys.executable, os.path.join(ROOT, "examples", "heatmap_cell.py"), "4"], capture_output=True,
                       text=True, env={**os.environ, "KVPROBE_DATA": DATA})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "by hand: 4 of 4 examples give the sweep's tokens" in r.stdout, r.stdout
