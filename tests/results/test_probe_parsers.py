"""The probe's pure parsers on realistic nvidia-smi outputs, and its field-name fallback."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from results_helpers import FAKE_SMI, FIXTURES

from orchestrator.runner.probe import gather as probe
from orchestrator.runner.probe import gpu as probe_gpu
from orchestrator.runner.probe import parse as probe_parse
from orchestrator.runner.probe import tools as probe_run


def _fields(name: str) -> list[str]:
    return (FIXTURES / name / "fields.txt").read_text().split()


def _gpus(name: str) -> list[dict[str, Any]]:
    return probe_parse.parse_gpu_csv((FIXTURES / name / "query-gpu.csv").read_text(), _fields(name))


def test_healthy_h100_eight_gpus_parse_to_typed_values() -> None:
    gpus = _gpus("h100-healthy")
    assert len(gpus) == 8
    assert [g["index"] for g in gpus] == list(range(8))
    g0 = gpus[0]
    assert g0["name"] == "NVIDIA H100 80GB HBM3"
    assert g0["driver_version"] == "550.54.15"
    assert g0["compute_cap"] == "9.0"  # a version, kept as text
    assert g0["pci.bus_id"] == "00000000:18:00.0"
    assert g0["clocks.sm"] == 1980 and isinstance(g0["clocks.sm"], int)
    assert g0["power.draw"] == pytest.approx(112.38) and isinstance(g0["power.draw"], float)
    assert g0["pcie.link.gen.gpucurrent"] == 5 and g0["pcie.link.width.current"] == 16
    assert g0["memory.total"] == 81559
    assert g0["persistence_mode"] == "Enabled" and g0["ecc.mode.current"] == "Enabled"
    assert g0["clocks_event_reasons.active"] == "0x0000000000000000"
    assert g0["clocks_event_reasons.names"] == []
    assert "unavailable" not in g0


def test_throttled_gpu_keeps_mask_and_decodes_reasons() -> None:
    gpus = _gpus("h100-throttled")
    bad = gpus[3]
    assert bad["clocks.sm"] == 1095 and bad["clocks.max.sm"] == 1980
    assert (bad["pcie.link.gen.gpucurrent"], bad["pcie.link.gen.max"]) == (3, 5)
    assert (bad["pcie.link.width.current"], bad["pcie.link.width.max"]) == (8, 16)
    assert bad["clocks_event_reasons.active"] == "0x0000000000000048"
    assert bad["clocks_event_reasons.names"] == ["hw_slowdown", "hw_thermal_slowdown"]
    assert all(g["clocks_event_reasons.names"] == [] for i, g in enumerate(gpus) if i != 3)


def test_na_and_not_supported_become_null_and_stay_distinguishable() -> None:
    a10, h100 = _gpus("na-values")
    assert a10["power.draw"] is None and a10["ecc.mode.current"] is None
    assert a10["clocks_event_reasons.active"] is None
    assert a10["clocks_event_reasons.names"] is None
    assert a10["unavailable"] == {
        "power.draw": "[N/A]",
        "ecc.mode.current": "[N/A]",
        "clocks_event_reasons.active": "[Not Supported]",
    }
    assert h100["clocks.sm"] is None and h100["pcie.link.gen.gpucurrent"] is None
    assert h100["unavailable"]["pcie.link.width.current"] == "[Not Supported]"
    assert h100["clocks_event_reasons.names"] == ["gpu_idle"]


def test_old_driver_field_names_map_to_the_new_keys() -> None:
    fields = _fields("old-driver")
    assert "clocks_throttle_reasons.active" in fields and "pcie.link.gen.current" in fields
    gpus = _gpus("old-driver")
    assert len(gpus) == 8
    assert gpus[0]["pcie.link.gen.gpucurrent"] == 4
    assert gpus[0]["clocks_event_reasons.active"] == "0x0000000000000001"
    assert gpus[0]["clocks_event_reasons.names"] == ["gpu_idle"]
    assert "clocks_throttle_reasons.active" not in gpus[0]


def test_wrong_column_count_is_an_error() -> None:
    with pytest.raises(ValueError, match="expected 3 values"):
        probe_parse.parse_gpu_csv("0, NVIDIA H100\n", ["index", "name", "uuid"])


def test_parse_value_and_reason_edge_cases() -> None:
    assert probe_parse.parse_value("memory.used", "81559 MiB") == 81559
    assert probe_parse.parse_value("power.draw", "[Unknown Error]") is None
    assert probe_parse.parse_value("name", "  NVIDIA A10G ") == "NVIDIA A10G"
    assert probe_parse.decode_clock_event_reasons("0x0000000000000004") == ["sw_power_cap"]
    assert probe_parse.decode_clock_event_reasons("0x1000") == ["bit_0x1000"]
    assert probe_parse.decode_clock_event_reasons("garbage") is None


def test_compute_apps() -> None:
    text = (FIXTURES / "h100-throttled" / "compute-apps.csv").read_text()
    apps = probe_parse.parse_compute_apps(text)
    assert len(apps) == 8
    assert apps[0] == {"pid": 41230, "process_name": "python3", "used_memory_mib": 74302}
    assert probe_parse.parse_compute_apps("") == []
    one = probe_parse.parse_compute_apps("7, /usr/bin/python3, 100 MiB\n")
    assert one[0]["used_memory_mib"] == 100


@pytest.mark.parametrize(
    ("fixture", "driver", "cuda"),
    [
        ("h100-healthy", "550.54.15", "12.4"),
        ("na-values", "535.129.03", "12.2"),
        ("old-driver", "525.125.06", "12.0"),
    ],
)
def test_smi_header_gives_driver_and_its_cuda(fixture: str, driver: str, cuda: str) -> None:
    header = probe_parse.parse_smi_header((FIXTURES / fixture / "header.txt").read_text())
    assert header == {"smi_version": driver, "driver_version": driver, "cuda_version": cuda}


def test_topo_matrix_and_affinity() -> None:
    topo = probe_parse.parse_topo((FIXTURES / "h100-healthy" / "topo.txt").read_text())
    assert topo["devices"][:2] == ["GPU0", "GPU1"] and "NIC1" in topo["devices"]
    assert topo["links"]["GPU0"]["GPU1"] == "NV18"
    assert topo["links"]["GPU0"]["GPU0"] == "X"
    assert topo["affinity"]["GPU5"]["CPU Affinity"] == "56-111,168-223"
    assert topo["affinity"]["GPU5"]["NUMA Affinity"] == "1"


def test_nvcc_and_nccl_log_and_proc_files() -> None:
    nvcc = (
        "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2024 NVIDIA Corporation\n"
        "Built on Thu_Mar_28_02:18:24_PDT_2024\nCuda compilation tools, release 12.4, V12.4.131\n"
    )
    assert probe_parse.parse_nvcc_version(nvcc) == {"release": "12.4", "version": "12.4.131"}
    log = [
        "[2026-11-30 14:25:01 TP0] Load weight begin\n",
        "gpu01:4123:4123 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n",
        "gpu01:4124:4124 [1] NCCL INFO NCCL version 2.21.5+cuda12.4\n",
        "NCCL version 2.27.5+cuda12.9\n",
    ]
    assert probe_parse.find_nccl_versions(log) == ["2.21.5+cuda12.4", "2.27.5+cuda12.9"]
    osr = probe_parse.parse_os_release('NAME="Ubuntu"\nVERSION_ID="22.04"\n# c\nID=ubuntu\n')
    assert osr == {"NAME": "Ubuntu", "VERSION_ID": "22.04", "ID": "ubuntu"}
    cpu = probe_parse.parse_cpuinfo(
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nphysical id\t: 0\n"
        "core id\t: 0\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
        "physical id\t: 1\ncore id\t: 0\n"
    )
    assert cpu == {
        "model": "Intel(R) Xeon(R) Platinum 8480+",
        "logical": 2,
        "sockets": 2,
        "physical_cores": 2,
    }
    mem = probe_parse.parse_meminfo(
        "MemTotal:       2113626008 kB\nHugePages_Total:       0\nFoo: 1 kB\n"
    )
    assert mem == {"MemTotal_kib": 2113626008, "HugePages_Total": 0}
    load = probe_parse.parse_loadavg("0.52 0.58 0.59 2/1234 56789\n")
    assert load == {"1m": 0.52, "5m": 0.58, "15m": 0.59, "running": 2, "total": 1234}


def test_collect_env_keeps_prefixes_and_redacts_secret_names() -> None:
    env = {
        "NCCL_ALGO": "Ring",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "VLLM_API_KEY": "sk-abcdef",
        "HF_TOKEN": "hf_x",
        "HOME": "/root",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    assert probe.collect_env(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_ALGO": "Ring",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "VLLM_API_KEY": probe.REDACTED,
    }


# --- the query fallback, against the fake nvidia-smi -------------------------------------------


def test_current_driver_answers_the_first_query(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(FIXTURES / "h100-throttled"))
    gpus = probe_gpu.query_gpus(str(FAKE_SMI))
    assert gpus["fields"] == "current" and gpus["failed_attempts"] == []
    assert gpus["count"] == 8
    assert gpus["devices"][3]["clocks_event_reasons.names"] == [
        "hw_slowdown",
        "hw_thermal_slowdown",
    ]


def test_old_driver_rejects_new_names_and_the_probe_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(FIXTURES / "old-driver"))
    gpus = probe_gpu.query_gpus(str(FAKE_SMI))
    assert gpus["fields"] == "legacy"
    assert "clocks_throttle_reasons.active" in gpus["query"]
    first, second = gpus["failed_attempts"]
    assert first["rc"] == 2 and first["fields"] == "current"
    assert 'Field "pcie.link.gen.gpucurrent" is not a valid field to query.' in first["error"]
    assert '"clocks_event_reasons.active" is not a valid field' in second["error"]
    assert gpus["devices"][7]["clocks_event_reasons.active"] == "0x0000000000000001"


def test_a_driver_with_only_one_new_name_gets_the_mixed_query(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mixed = tmp_path / "mixed"
    shutil.copytree(FIXTURES / "h100-healthy", mixed)
    fields = _fields("h100-healthy")
    fields[fields.index("clocks_event_reasons.active")] = "clocks_throttle_reasons.active"
    (mixed / "fields.txt").write_text("\n".join(fields) + "\n")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(mixed))
    gpus = probe_gpu.query_gpus(str(FAKE_SMI))
    assert gpus["fields"] == "mixed"
    assert len(gpus["failed_attempts"]) == 1
    assert "clocks_throttle_reasons.active" in gpus["query"]
    assert gpus["devices"][0]["pcie.link.gen.gpucurrent"] == 5


def test_a_broken_nvidia_smi_is_absent_without_retrying_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FAKE_NVIDIA_SMI_DIR", raising=False)  # the fake then fails with rc 9
    with pytest.raises(probe_run.Absent, match=r"rc 9.*FAKE_NVIDIA_SMI_DIR"):
        probe_gpu.query_gpus(str(FAKE_SMI))
