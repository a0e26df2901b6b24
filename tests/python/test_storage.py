import os

import pytest

import stoker


def test_open_reads_ranges_like_a_file(tmp_path):
    data = bytes(range(256)) * 4096                            # 1 MiB
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    with stoker.open(str(path), buffer_size=4096) as f:
        assert f.read(10) == data[:10]
        f.seek(500_000)
        assert f.read(100_000) == data[500_000:600_000]
        assert f.tell() == 600_000
        f.seek(-5, os.SEEK_END)
        assert f.read() == data[-5:]
        assert f.read(10) == b""
    raw = stoker.open(str(path), buffer_size=0)
    assert raw.size == len(data)
    assert bytes(memoryview(raw.read_range(1000, 24))) == data[1000:1024]
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        stoker.open(str(tmp_path / "missing.bin"))


def test_ls(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_bytes(b"abc")
    (tmp_path / "sub" / "b.txt").write_bytes(b"hello")
    top = stoker.ls(str(tmp_path))
    names = {os.path.basename(e["url"].rstrip("/")): e for e in top}
    assert names["a.txt"]["size"] == 3 and not names["a.txt"]["is_dir"]
    assert names["sub"]["is_dir"]
    deep = stoker.ls(str(tmp_path), recursive=True)
    assert sorted(e["size"] for e in deep) == [3, 5]
    one = stoker.ls(str(tmp_path / "a.txt"))
    assert len(one) == 1 and one[0]["size"] == 3
