"""requirements-gpu.txt is requirements.txt with the CUDA build of faiss, and without Milvus Lite
(it requires faiss-cpu, which would overwrite the CUDA build's `faiss`), nothing else."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _lines(name: str) -> list[str]:
    return (ROOT / name).read_text(encoding="utf-8").splitlines()


def test_gpu_requirements_differ_only_in_the_faiss_line():
    cpu, gpu = _lines("requirements.txt"), _lines("requirements-gpu.txt")
    lite = [i for i, line in enumerate(cpu) if line.startswith("milvus-lite==")]
    assert len(lite) == 1 and "Milvus Lite" in cpu[lite[0] - 1], "requirements.txt: milvus-lite, its comment above"
    cpu = cpu[: lite[0] - 1] + cpu[lite[0] + 1 :]
    assert len(cpu) == len(gpu), "requirements-gpu.txt must have the same lines as requirements.txt"
    different = [(a, b) for a, b in zip(cpu, gpu) if a != b]
    assert different == [("faiss-cpu==1.15.1", "faiss-gpu==1.15.1")], different
