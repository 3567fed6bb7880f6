"""protocol.toml: frozen digest, strict loading, errors that name the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_autotune.errors import ProtocolError
from pytest_autotune.protocol import PACKAGED_PROTOCOL, find_protocol, load_protocol, parse_protocol
from pytest_autotune.protocol_registry import FROZEN_PROTOCOLS, freeze_status

REPO = Path(__file__).resolve().parents[1]
ROOT_PROTOCOL = REPO / "protocol.toml"
CURRENT_VERSION_LINE = f'version = "{load_protocol(ROOT_PROTOCOL).version}"'.encode()


def test_shipped_protocol_is_frozen_under_its_version():
    """Fails whenever protocol.toml changes without a version bump (and a new pin)."""
    proto = load_protocol(ROOT_PROTOCOL)
    status = freeze_status(proto)
    assert status.frozen, status.message
    assert FROZEN_PROTOCOLS[proto.version] == proto.sha256


def test_packaged_copy_is_byte_identical_to_root_protocol():
    assert PACKAGED_PROTOCOL.read_bytes() == ROOT_PROTOCOL.read_bytes(), (
        "pytest_autotune/protocol.toml must be a byte copy of protocol.toml (cp protocol.toml pytest_autotune/)")


def test_one_changed_byte_unfreezes_and_names_the_fix():
    raw = ROOT_PROTOCOL.read_bytes().replace(b"max_speedup = 10.0", b"max_speedup = 11.0")
    proto = parse_protocol(raw)
    status = freeze_status(proto)
    assert not status.frozen
    assert "changed without a version bump" in status.message
    assert "bump [protocol].version" in status.message


def _with_version(version: str) -> bytes:
    """protocol.toml with its [protocol].version replaced (whatever the current one is)."""
    current = parse_protocol(ROOT_PROTOCOL.read_bytes()).version
    raw = ROOT_PROTOCOL.read_bytes()
    assert raw.count(f'version = "{current}"'.encode()) == 1
    return raw.replace(f'version = "{current}"'.encode(), f'version = "{version}"'.encode())


def test_unknown_version_is_not_frozen():
    raw = _with_version("999-local")
    status = freeze_status(parse_protocol(raw))
    assert not status.frozen and "is not frozen" in status.message and "--autotune-exploratory" in status.message


def test_extra_pins_from_a_hook_freeze_a_project_protocol():
    raw = _with_version("acme-1")
    proto = parse_protocol(raw)
    assert freeze_status(proto, {"acme-1": proto.sha256}).frozen
    with pytest.raises(ProtocolError, match="pinned twice"):
        freeze_status(proto, {load_protocol(ROOT_PROTOCOL).version: "0" * 64})


def test_loaded_values_are_typed_and_frozen():
    p = load_protocol(ROOT_PROTOCOL)
    assert p.timing.order == "ABBA/BAAB" and isinstance(p.timing.min_pairs, int)
    assert p.breaker.max_speedup == 10.0
    assert p.tolerance["float32"].rtol > 0 and p.tolerance_for("int64") is None
    assert p.bars.fast_p_thresholds == (0.0, 1.0, 1.2)
    with pytest.raises(Exception):
        p.timing.min_pairs = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.tolerance["float32"] = None  # type: ignore[index]


@pytest.mark.parametrize(
    "old,new,key,fix",
    [
        (b"min_pairs = 16", b"min_pairs = 12\nmin_pair = 3", "timing.min_pair", "remove it or fix its spelling"),
        (b"count = 5", b"count = -2", "seeds.count", ">= 1"),
        (b"count = 5", b'count = "five"', "seeds.count", "must be an integer"),
        (b"max_speedup = 10.0", b"max_speedup = true", "breaker.max_speedup", "must be a number"),
        (b"disable_gc = true", b"disable_gc = 1", "timing.disable_gc", "true or false"),
        (b'order = "ABBA/BAAB"', b'order = "AB"', "timing.order", "use one of ABBA"),
        (b"max_pairs = 800", b"max_pairs = 4", "max_pairs", "raise max_pairs"),
        (b"k_recheck_ratio = 2.0", b"k_recheck_ratio = 1.0", "k_recheck_ratio", "a ratio above 1"),
        (b"[tolerance.bfloat16]", b"[tolerance.float8]", "tolerance.float8", "use one of"),
        (b"cpu_threads = 1", b"", "timing.cpu_threads", "missing key"),
    ],
)
def test_invalid_protocol_names_the_key_and_the_fix(old, new, key, fix):
    raw = ROOT_PROTOCOL.read_bytes()
    assert old in raw
    with pytest.raises(ProtocolError) as e:
        parse_protocol(raw.replace(old, new, 1), source="p.toml")
    msg = str(e.value)
    assert key in msg and fix in msg and "p.toml" in msg


def test_not_toml_is_refused_with_position():
    with pytest.raises(ProtocolError, match="not valid TOML"):
        parse_protocol(b"[protocol\nname = 1")


def test_rootdir_without_protocol_uses_the_packaged_copy(tmp_path):
    assert find_protocol(tmp_path) == PACKAGED_PROTOCOL
    (tmp_path / "protocol.toml").write_bytes(ROOT_PROTOCOL.read_bytes())
    assert find_protocol(tmp_path) == tmp_path / "protocol.toml"


def test_keys_added_by_protocol_5_are_optional_and_their_absence_keeps_the_older_meaning():
    """A protocol 4 file has no [statistics].pooling and no [devices.cuda].process_pairs: it still loads, pools the
    ratios of its pairs of processes as protocol 4 did, and times CUDA in [timing]'s number of pairs. The shipped
    protocol sets both: process medians, and two pairs of processes on CUDA (and, since protocol 8, on the CPU)."""
    text = ROOT_PROTOCOL.read_text()
    shipped = parse_protocol(text.encode())
    assert shipped.statistics.pooling_rule == "process-medians"
    assert shipped.timing_plan("cpu").process_pairs == 2 and shipped.timing_plan("cuda").process_pairs == 2
    head, cuda = text.split("\n[devices.cuda]\n", 1)
    cuda_body, rest = cuda.split("\n[", 1)
    cuda_body = "\n".join(line for line in cuda_body.splitlines()
                          if not line.startswith("process_pairs") and "start with its CUDA context" not in line)
    older = "\n".join(line for line in head.splitlines()
                      if not line.startswith("pooling =") and "ratios\": the median" not in line)
    older = older.replace("process_pairs = 2 ", "process_pairs = 6 ") + "\n[devices.cuda]\n" + cuda_body + "\n[" + rest
    assert "pooling" not in older.split("[correctness]")[0].split("[statistics]")[1]
    proto = parse_protocol(older.encode())
    assert proto.statistics.pooling is None and proto.statistics.pooling_rule == "ratios"
    assert proto.devices.cuda.process_pairs is None
    assert proto.timing_plan("cuda").process_pairs == proto.timing.process_pairs == 6
    with pytest.raises(ProtocolError, match="pooling"):
        parse_protocol(text.replace('pooling = "process-medians"', 'pooling = "mean"').encode())


def test_keys_added_by_protocol_8_are_optional_and_their_absence_keeps_the_older_meaning():
    """[devices.cpu].input_sets, derived_spread, prints_per_group and verify_rounds: a protocol 7 file has none of
    them and times as it did (every set drawn, every timed output fingerprinted, [integrity].verify_rounds rounds
    checked); the shipped protocol derives the CPU's sets and checks two outputs a group in 8 rounds. The GPU's plan
    reads none of them."""
    text = ROOT_PROTOCOL.read_text()
    shipped = parse_protocol(text.encode())
    cpu, cuda = shipped.timing_plan("cpu"), shipped.timing_plan("cuda")
    assert cpu.derive_spread == 0.0625 and cpu.prints_per_group == 2 and shipped.verify_rounds("cpu") == 8
    assert cuda.derive_spread is None and cuda.prints_per_group == 0
    assert shipped.verify_rounds("cuda") == shipped.integrity.verify_rounds
    assert shipped.timing_plan("cpu").process_offset_sd == 0.025 and cuda.process_offset_sd == 0.0
    keys = ("input_sets =", "derived_spread =", "prints_per_group =", "verify_rounds = 8", "process_offset_sd =")
    older = "\n".join(line for line in text.splitlines() if not line.startswith(keys))  # their comments stay
    proto = parse_protocol(older.encode())
    assert proto.devices.cpu.input_sets == "drawn" and proto.timing_plan("cpu").derive_spread is None
    assert proto.timing_plan("cpu").prints_per_group == 0 and proto.timing_plan("cpu").process_offset_sd == 0.0
    assert proto.verify_rounds("cpu") == proto.integrity.verify_rounds
    with pytest.raises(ProtocolError, match="input_sets"):
        parse_protocol(text.replace('input_sets = "derived"', 'input_sets = "pooled"').encode())
