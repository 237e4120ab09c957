"""Data sets in the formats users bring, written by the real libraries: Parquet files and
``save_to_disk`` folders by Hugging Face ``datasets``, hub snapshots laid out as
``huggingface_hub`` lays out its cache."""

from __future__ import annotations

from pathlib import Path

FAKE_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def renamed(problems) -> list[dict]:
    """Rows of ``Problem``s under other names: question, final_answer (an int where it is
    one), uid, plus a field the loader must carry along."""
    return [{"uid": p.id, "question": p.problem, "final_answer": int(p.answer) if p.answer.isdigit() else p.answer,
             "source": "test"} for p in problems]


def dataset(rows: list[dict]):
    import datasets

    datasets.disable_progress_bars()
    return datasets.Dataset.from_list(rows)


def write_parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    dataset(rows).to_parquet(str(path))
    return path


def save_dataset(folder: Path, splits: dict[str, list[dict]] | list[dict]) -> Path:
    """``save_to_disk`` of a ``Dataset`` (a list of rows) or a ``DatasetDict`` (split -> rows)."""
    import datasets

    if isinstance(splits, list):
        dataset(splits).save_to_disk(str(folder))
    else:
        datasets.DatasetDict({name: dataset(rows) for name, rows in splits.items()}).save_to_disk(str(folder))
    return folder


def install_dataset_in_hf_cache(cache: Path, repo_id: str, files: dict[str, list[dict] | str],
                                commit: str = FAKE_COMMIT) -> Path:
    """A hub data set's snapshot in an HF cache, as ``hf download --repo-type dataset`` leaves
    it: ``datasets--org--name/snapshots/<commit>/<files>`` with ``refs/main`` naming the commit.
    ``files``: repository path -> rows (written as Parquet or JSONL by suffix) or text."""
    import json

    repo = cache / f"datasets--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    for name, content in files.items():
        target = snapshot / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            target.write_text(content)
        elif name.endswith(".parquet"):
            write_parquet(target, content)
        else:
            target.write_text("".join(json.dumps(row) + "\n" for row in content))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot
