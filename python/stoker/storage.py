"""Storage helpers over stoker's object-store layer: s3://bucket/key, http(s)://, local paths,
mem://. Credentials come from the AWS_* environment variables or ~/.aws (never printed)."""
import io

from . import _stoker


class RangedFile(io.RawIOBase):
    """A read-only, seekable raw file whose reads are ranged reads of one object (one request per
    read). Use through stoker.open(), which adds buffering. Not thread-safe (as Python files)."""

    def __init__(self, url):
        super().__init__()
        self._file = _stoker.File(str(url))
        self._pos = 0

    @property
    def name(self):
        return self._file.url

    @property
    def size(self):
        return self._file.size

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._file.size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def readinto(self, b):
        view = memoryview(b).cast("B")
        data = self._file.read_range(self._pos, len(view))
        n = len(data)
        view[:n] = memoryview(data)
        self._pos += n
        return n

    def readall(self):
        data = self._file.read_range(self._pos, max(0, self._file.size - self._pos))
        self._pos += len(data)
        return bytes(memoryview(data))

    def read_range(self, offset, length):
        """Bytes [offset, offset+length) as a read-only stoker.Buffer (no copy; memoryview() it)."""
        return self._file.read_range(offset, length)


def open(url, mode="rb", buffer_size=1 << 20):
    """Opens an object for reading: a buffered, seekable binary file-like object. Reads larger
    than buffer_size go straight to the store as one ranged read."""
    if mode not in ("r", "rb"):
        raise ValueError(f"stoker.open supports reading only (mode 'rb'), got {mode!r}")
    raw = RangedFile(url)
    if buffer_size == 0:
        return raw
    return io.BufferedReader(raw, buffer_size=buffer_size)


def ls(url, recursive=False):
    """Lists a URL: one object, or the objects and sub-"folders" below a prefix (all objects below
    it with recursive=True). Returns dicts {url, size, mtime (s since epoch), is_dir}."""
    return _stoker.ls(str(url), recursive)
